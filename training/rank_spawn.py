"""How a rank process of the trainer group (training/group.py) is started and ended: on this
machine, or on a cluster's worker, which the group asks to call these module functions there
(`client.run`: a Dask worker imports rollforge anyway). Nothing here imports Dask: the flow
that owns the cluster passes what the group needs to know of it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from training.rank import ADDR_ENV, KEY_ENV

_REPO = Path(__file__).resolve().parent.parent
_DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "TORCHELASTIC_USE_AGENT_STORE", "LOCAL_WORLD_SIZE", "CROSS_RANK", "CROSS_SIZE",
              ADDR_ENV, KEY_ENV)


def host_of(address: str) -> str:
    """'tcp://10.0.0.5:8786' -> '10.0.0.5' (also for tls:// and IPv6 in brackets)."""
    rest = address.split("://", 1)[-1]
    host = rest.rsplit(":", 1)[0]
    return host.strip("[]")


SPAWNED: dict[int, subprocess.Popen] = {}


def worker_facts(dask_worker=None) -> dict:
    import torch

    host = host_of(dask_worker.address) if dask_worker is not None else "127.0.0.1"
    return {"host": host, "cpus": os.cpu_count() or 1, "gpus": torch.cuda.device_count()}


def spawn(envs: list[dict], tuned: dict, launcher_vars: Sequence[str] = ()) -> list[int]:
    """Start one rank per env on this host; their pids. The variables a Dask nanny sets for its
    worker (`launcher_vars`, from `distributed.nanny.pre-spawn-environ`:
    MALLOC_TRIM_THRESHOLD_=65536, one BLAS thread) are tuning for the worker's tasks, not for a
    rank: `tuned` is what the flow's process has of them (the others are left unset), so a rank
    runs as a local one would.
    Alternating updates of 2 local ranks and 2 ranks on 2 workers ran at the same speed
    within noise (6.6-7.6k against 6.0-7.2k tokens/s, load 3)."""
    base = base_env()
    for k in launcher_vars:
        base.pop(k, None)
    base.update(tuned)
    pids = []
    for extra in envs:
        p = popen({**base, **extra})
        SPAWNED[p.pid] = p
        pids.append(p.pid)
    return pids


def kill(pids: list[int]) -> None:
    end([p for p in map(SPAWNED.pop, pids, [None] * len(pids)) if p is not None])


def end(procs: list[subprocess.Popen]) -> None:
    """Kill what still runs of `procs` (each its whole session), and reap them all."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait()


def base_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _DIST_VARS}
    # This checkout first: an installed copy of rollforge elsewhere must not serve a rank.
    path = [str(_REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def popen(env: dict) -> subprocess.Popen:
    # Its own session: a Ctrl-C in the terminal reaches the flow, which closes the group; the
    # ranks never print a KeyboardInterrupt each. stdin is not theirs to read.
    return subprocess.Popen([sys.executable, "-m", "training.rank", "--rank-main"],
                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)
