"""One rank of the resident trainer group (training/group.py, whose docstring has the design):
its connection back to the supervisor, the test hook that kills it, and its main loop, run as
`python -m training.rank --rank-main` by the group.

Test hook: ROLLFORGE_FAULT_KILL_RANK="<rank>:<version>:<marker file>" makes that rank SIGKILL
itself right after its engine is built for that version (the other ranks are then inside the
update, waiting on it in a collective), once: the marker file records that it happened.
"""
from __future__ import annotations

import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
from multiprocessing.connection import Client, Connection
from pathlib import Path

FAULT_ENV = "ROLLFORGE_FAULT_KILL_RANK"
NICE_ENV = "ROLLFORGE_RANK_NICE"  # a rank beside the sampler (rl.overlap) yields its cores
ADDR_ENV, KEY_ENV = "ROLLFORGE_GROUP_ADDR", "ROLLFORGE_GROUP_KEY"


def connect_supervisor() -> Connection:
    """A rank's connection to its supervisor (from the variables the group started it with);
    the first message says which rank this is. The rank exits when its parent is gone."""
    host, port = os.environ[ADDR_ENV].rsplit(":", 1)
    conn = Client((host, int(port)), authkey=bytes.fromhex(os.environ[KEY_ENV]))
    conn.send({"rank": int(os.environ["RANK"]), "pid": os.getpid()})
    parent = os.getppid()

    def watch():
        # A rank inside a collective never reads its connection, so it would outlive a dead
        # supervisor or Dask worker by as long as gloo's timeout; its parent's exit ends it.
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True, name="rank-parent-watch").start()
    return conn


def _arm_fault(version: int) -> None:
    """The test hook of the module docstring."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    rank_s, version_s, marker = spec.split(":", 2)
    if int(rank_s) != int(os.environ["RANK"]) or int(version_s) != version or Path(marker).exists():
        return
    Path(marker).write_text(str(os.getpid()))
    from training import engine as eng

    real = eng.make_engine

    def make_then_die(*args, **kwargs):
        real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    eng.make_engine = make_then_die


def _rank_main() -> int:
    conn = connect_supervisor()
    # DeepSpeed's logs and progress lines go to stderr, which the rank shares with the flow's
    # terminal (or its Dask worker's log).
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from training.env import apply_defaults

    apply_defaults()
    import torch

    if os.environ.get(NICE_ENV):
        os.nice(int(os.environ[NICE_ENV]))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    from training import engine as eng
    from training.config import PolicyConfig, RLConfig
    from training.trainer import RLSample, grpo_update

    try:
        eng.setup_distributed()
    except BaseException:
        conn.send({"error": traceback.format_exc()})
        return 1
    conn.send({"rank": eng.rank(), "pid": os.getpid(), "host": socket.gethostname(),
               "threads": torch.get_num_threads(),
               "backend": "nccl" if torch.cuda.is_available() else "gloo"})
    while True:
        try:
            job = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):  # the supervisor is gone
            return 1
        if job is None:
            eng.teardown_distributed()
            return 0
        try:
            _arm_fault(job["version"])
            samples = [RLSample(**s) for s in job["samples"]]
            metrics = grpo_update(job["run_dir"], job["version"], samples,
                                  PolicyConfig(**job["policy"]), RLConfig(**job["rl"]),
                                  job["temperature"], job["seed"], job["replay"])
            conn.send({"rank": eng.rank(), "metrics": metrics})
        except BaseException:
            conn.send({"error": traceback.format_exc()})
            return 1


if __name__ == "__main__":
    if sys.argv[1:] != ["--rank-main"]:
        sys.exit("python -m training.rank --rank-main: a rank of the trainer group; started by "
                 "training.group.TrainerGroup, not by hand")
    raise SystemExit(_rank_main())
