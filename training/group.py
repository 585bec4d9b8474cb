"""The resident trainer group: the RL update on N ranks, from the flow's own process.

Where the ranks live: N child processes of the flow process (the supervisor), one per rank,
each started with the torch.distributed variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) that the `deepspeed` launcher would give it, so `training.engine` joins the group
the same way (gloo on CPU, NCCL on GPUs, one GPU per rank by LOCAL_RANK). They start on the
first update that asks for them (`rl.processes`) and stay alive between iterations: the
process group, DeepSpeed's imports and its CPU ops are set up once, and each iteration only
sends the job. The job travels over the rank's stdin/stdout pipes (pickled), so nothing but
the supervisor can talk to a rank; each rank runs the same `grpo_update` the single-process
path runs, which reads version i from the checkpoint folder and publishes version i + 1 by an
atomic rename: that is how the new policy comes back for sampling.

A rank that dies (its pipe closes) or raises is detected while the supervisor waits; the whole
group is killed (the survivors would hang in a collective), `RankFailure` is raised, and the
`update_policy` stage's retry starts a fresh group that runs the update again from version i.
The update writes nothing but the checkpoint of version i + 1, which appears whole or not at
all, so a retry never writes anything twice; the trajectories were written by an earlier stage.

`rl.processes: 1` (the default) never starts a group: the update runs in the flow's process,
as it always has.

Test hook: ROLLFORGE_FAULT_KILL_RANK="<rank>:<version>:<marker file>" makes that rank SIGKILL
itself right after its engine is built for that version (the other ranks are then inside the
update, waiting on it in a collective), once: the marker file records that it happened.
"""
from __future__ import annotations

import atexit
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import asdict
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Sequence

FAULT_ENV = "ROLLFORGE_FAULT_KILL_RANK"
START_TIMEOUT_S = 900.0  # imports + process-group rendezvous; slow on a loaded 2-core machine
_REPO = Path(__file__).resolve().parent.parent
_DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "LOCAL_WORLD_SIZE", "CROSS_RANK", "CROSS_SIZE")


class RankFailure(RuntimeError):
    """A rank of the trainer group died or raised; the group has been shut down."""


def resolve_processes(processes: int | str) -> int:
    """`rl.processes` as a rank count: "gpus" is every local CUDA device (one rank on CPU
    when there is none)."""
    if processes == "gpus":
        import torch

        return max(1, torch.cuda.device_count())
    return int(processes)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_threads(world: int) -> int:
    """Torch threads per rank: OMP_NUM_THREADS when the user set it, else the cores shared
    out. Torch's default (every core in every rank) oversubscribes the CPU N times over."""
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    return max(1, (os.cpu_count() or 1) // world)


class TrainerGroup:
    """N resident rank processes on this machine, driven by `run(job)`."""

    def __init__(self, world: int, start_timeout_s: float = START_TIMEOUT_S):
        if world < 1:
            raise ValueError(f"rl.processes={world}: expected at least 1")
        self.world = world
        self.jobs = 0  # jobs this group has finished (resident: one per iteration)
        # Set while a job is out: a wait cut short (a stage deadline, Ctrl-C) leaves the ranks
        # on a job whose reply would be taken for the next one's, so such a group is replaced.
        self.busy = False
        self.procs: list[subprocess.Popen] = []
        self._send: list[Connection] = []
        self._recv: list[Connection] = []
        self._start(start_timeout_s)

    def _start(self, timeout_s: float) -> None:
        threads = _rank_threads(self.world)
        base = {k: v for k, v in os.environ.items() if k not in _DIST_VARS}
        # This checkout first: an installed copy of rollforge elsewhere must not serve a rank.
        path = [str(_REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
        base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                    WORLD_SIZE=str(self.world), LOCAL_WORLD_SIZE=str(self.world),
                    OMP_NUM_THREADS=str(threads), PYTHONPATH=os.pathsep.join(path))
        for r in range(self.world):
            env = {**base, "RANK": str(r), "LOCAL_RANK": str(r)}
            # Its own session: a Ctrl-C in the terminal reaches the flow, which closes the group;
            # the ranks never print a KeyboardInterrupt each.
            p = subprocess.Popen([sys.executable, "-m", "training.group", "--rank-main"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                 cwd=os.getcwd(), start_new_session=True)
            self.procs.append(p)
            self._send.append(Connection(os.dup(p.stdin.fileno()), readable=False))
            self._recv.append(Connection(os.dup(p.stdout.fileno()), writable=False))
            p.stdin.close()
            p.stdout.close()
        self.ready = self._gather(timeout_s, "start")

    def _gather(self, timeout_s: float | None, what: str) -> list[dict]:
        """One reply from every rank, or RankFailure as soon as one dies or raises."""
        replies: dict[int, dict] = {}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pending = {c: r for r, c in enumerate(self._recv)}
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait(list(pending), timeout=left)
            if not ready:
                self.close(force=True)
                raise RankFailure(f"trainer group ({self.world} ranks): no {what} reply from "
                                  f"ranks {sorted(pending.values())} within {timeout_s:g}s")
            for c in ready:
                r = pending.pop(c)
                try:
                    msg = c.recv()
                except (EOFError, OSError):
                    code = self.procs[r].wait()
                    self.close(force=True)
                    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
                    raise RankFailure(f"trainer group: rank {r} of {self.world} died during the "
                                      f"{what} ({how}); the group was shut down") from None
                if "error" in msg:
                    self.close(force=True)
                    raise RankFailure(f"trainer group: rank {r} of {self.world} failed during "
                                      f"the {what}:\n{msg['error']}")
                replies[r] = msg
        return [replies[r] for r in range(self.world)]

    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs)

    def usable(self) -> bool:
        """Alive and not left holding a job nobody waits for."""
        return self.alive() and not self.busy

    def run(self, job: dict) -> list[dict]:
        """Send `job` to every rank; each rank's reply, rank order."""
        if not self.usable():
            raise RankFailure("trainer group: not usable (closed, a rank died, or a job was "
                              "abandoned)")
        blob = pickle.dumps(job)
        self.busy = True
        for c in self._send:
            try:
                c.send_bytes(blob)
            except OSError:
                break  # that rank is dead: `_gather` reports which
        out = self._gather(None, f"update of version {job.get('version')}")
        self.busy = False
        self.jobs += 1
        return out

    def close(self, force: bool = False) -> None:
        """Stop the ranks: asked to leave the process group together, or (`force`, or when
        they do not stop within a minute) killed."""
        if not force:
            for c in self._send:
                try:
                    c.send_bytes(pickle.dumps(None))
                except OSError:
                    pass
            end = time.monotonic() + 60
            for p in self.procs:
                try:
                    p.wait(timeout=max(0.1, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        for c in self._send + self._recv:
            c.close()
        self.procs, self._send, self._recv = [], [], []


_GROUP: TrainerGroup | None = None
STARTS = {"count": 0}  # groups started by this process (a restart after a failure counts)


def group_of(world: int) -> TrainerGroup:
    """The resident group of `world` ranks: the running one, or a fresh one (after a failure,
    or when the rank count changed)."""
    global _GROUP
    if _GROUP is not None and (_GROUP.world != world or not _GROUP.usable()):
        _GROUP.close(force=not _GROUP.usable())
        _GROUP = None
    if _GROUP is None:
        if not STARTS["count"]:  # a caller outside the flow may never call close_group
            atexit.register(close_group)
        _GROUP = TrainerGroup(world)
        STARTS["count"] += 1
    return _GROUP


def close_group() -> None:
    """Stop the resident group, if any (the flow does at its end)."""
    global _GROUP
    if _GROUP is not None:
        _GROUP.close(force=not _GROUP.usable())
        _GROUP = None


def combine(replies: list[dict]) -> dict:
    """The step's metrics from every rank's: rank 0's loss and counters (the step is one), the
    tokens of all ranks over the slowest rank's seconds, memory per rank and its maximum."""
    ms = [r["metrics"] for r in replies]
    out = dict(ms[0])
    tokens = sum(m["train/tokens"] for m in ms)
    seconds = max(m["train/seconds"] for m in ms)
    out.update({"train/tokens": tokens, "train/tokens_per_s": tokens / max(seconds, 1e-9),
                "train/seconds": seconds})
    for key in ("train/peak_mem_mb", "train/optimizer_mb", "train/params_mb"):
        if all(key in m for m in ms):
            out[key] = max(m[key] for m in ms)
            for r, m in enumerate(ms):
                out[f"{key[:6]}rank{r}/{key[6:]}"] = m[key]
    return out


def update(run_dir: str, version: int, samples: Sequence, policy, rl, temperature: float,
           seed: int, replay: Sequence[tuple[str, str]] = ()) -> dict:
    """One RL update (version -> version + 1) on `rl.processes` ranks: in this process for one
    (today's path, unchanged), on the resident group for more. Same arguments as `grpo_update`."""
    world = resolve_processes(rl.processes)
    if world == 1:
        from training.trainer import grpo_update

        return grpo_update(run_dir, version, list(samples), policy, rl, temperature, seed, replay)
    group = group_of(world)
    job = {"run_dir": str(run_dir), "version": int(version),
           "samples": [asdict(s) for s in samples], "policy": policy.model_dump(),
           "rl": rl.model_dump(), "temperature": float(temperature), "seed": int(seed),
           "replay": [tuple(p) for p in replay]}
    try:
        replies = group.run(job)
    except RankFailure:
        close_group()
        raise
    return {**combine(replies), "train/group_starts": STARTS["count"],
            "train/group_jobs": group.jobs}


# ---- the rank side -------------------------------------------------------------------------

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
    # The pipes carry the protocol; anything else printed (DeepSpeed's logs, progress lines)
    # goes to stderr, which the rank shares with the flow's terminal.
    send = Connection(os.dup(1), readable=False)
    recv = Connection(os.dup(0), writable=False)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from flows.env import apply_defaults

    apply_defaults()
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    from training import engine as eng
    from training.config import PolicyConfig, RLConfig
    from training.trainer import RLSample, grpo_update

    try:
        eng.setup_distributed()
    except BaseException:
        send.send({"error": traceback.format_exc()})
        return 1
    send.send({"rank": eng.rank(), "pid": os.getpid(), "threads": torch.get_num_threads(),
               "backend": "nccl" if torch.cuda.is_available() else "gloo"})
    while True:
        try:
            job = pickle.loads(recv.recv_bytes())
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
            send.send({"rank": eng.rank(), "metrics": metrics})
        except BaseException:
            send.send({"error": traceback.format_exc()})
            return 1


if __name__ == "__main__":
    if sys.argv[1:] != ["--rank-main"]:
        sys.exit("python -m training.group --rank-main: a rank of the trainer group; started by "
                 "training.group.TrainerGroup, not by hand")
    raise SystemExit(_rank_main())
