"""The resident trainer group: the RL update on N ranks, from the flow's own process.

Where the ranks live (`rl.placement`):
- `local`: N child processes of the flow process (the supervisor), on this machine.
- `dask`: processes started on the workers of the run's Dask cluster, the one the rollouts use,
  so one distributed engine reaches every node: the ranks are spread evenly over the workers
  (in address order), numbered `LOCAL_RANK` 0.. within each host (one GPU per rank by it).
  The run folder must be on storage every host sees, as the checkpoints already must be for
  the workers' rollouts; `MASTER_ADDR` is the host of rank 0's worker.

Either way each rank is started with the torch.distributed variables (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT) that the `deepspeed` launcher would give it, so
`training.engine` joins the group the same way (gloo on CPU, NCCL on GPUs). The ranks start on
the first update that asks for them and stay alive between iterations: the process group,
DeepSpeed's imports and its CPU ops are set up once, and each iteration only sends the job.
Every rank connects back to the supervisor over TCP (a listener on an address the ranks can
reach, authenticated by a key made per group, so nothing but the supervisor can drive a rank)
and the job travels pickled over that connection; the transport and the protocol are the same
for both placements, only how a rank is started and killed differs. Each rank runs the same
`grpo_update` the single-process path runs, which reads version i from the checkpoint folder
and publishes version i + 1 by an atomic rename: that is how the new policy comes back for
sampling.

A rank that dies (its connection closes) or raises is detected while the supervisor waits; the
whole group is killed (the survivors would hang in a collective), `RankFailure` is raised, and
the `update_policy` stage's retry starts a fresh group that runs the update again from
version i. The update writes nothing but the checkpoint of version i + 1, which appears whole
or not at all, so a retry never writes anything twice; the trajectories were written by an
earlier stage. A rank whose parent (the flow, or the Dask worker that started it) is gone
exits by itself.

`rl.processes: 1` (the default) starts no group: the update runs in the flow's process, as
it always has, unless `rl.overlap` asks for it beside the sampler: then one rank runs it, and
ranks started on this machine take half its cores (`share`) at nice 19, and the flow's sampler
leaves them those cores while the update is out (`training.threads.reserved`). Ranks on Dask
workers are neither niced nor reserved for: beside the sampler they belong on other hosts.

A rank's own side (its connection back, its main loop, the fault hook the tests use) is
training/rank.py; how its process is started, here or on a Dask worker, training/rank_spawn.py.
"""
from __future__ import annotations

import atexit
import os
import pickle
import socket
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge, wait
from pathlib import Path
from typing import Sequence

from training.rank import (ADDR_ENV, FAULT_ENV, KEY_ENV,  # noqa: F401  (FAULT_ENV: tests set it)
                           NICE_ENV)
# How a rank process starts, here or on a Dask worker (the tests reach these through group).
from training import rank_spawn
OVERLAP_NICE = 19  # the CPU priority of local ranks beside the sampler (rl.overlap)
START_TIMEOUT_S = 900.0  # imports + process-group rendezvous; slow on a loaded 2-core machine
# A rank answers the key challenge as soon as it connects (its imports come after); a client that
# takes longer is not one of ours and is dropped, so it cannot hold the start.
HANDSHAKE_TIMEOUT_S = 5.0
# Passed from the flow's environment to ranks on other hosts (a local rank inherits them all).
_FORWARD = ("DS_ACCELERATOR", FAULT_ENV)


class RankFailure(RuntimeError):
    """A rank of the trainer group died or raised; the group has been shut down."""


def resolve_processes(processes: int | str, client=None) -> int:
    """`rl.processes` as a rank count: "gpus" is every CUDA device (one rank when there is
    none): this machine's, or with a Dask `client` those of every host of its cluster."""
    if processes != "gpus":
        return int(processes)
    if client is None:
        import torch

        return max(1, torch.cuda.device_count())
    hosts: dict[str, int] = {}
    for facts in client.run(rank_spawn.worker_facts).values():
        hosts[facts["host"]] = max(hosts.get(facts["host"], 0), facts["gpus"])
    return max(1, sum(hosts.values()))


def _rank_threads(ranks_here: int, cpus: int | None = None, share: float = 1.0) -> int:
    """Torch threads per rank: OMP_NUM_THREADS when the user set it, else the `share` of the
    host's cores the ranks get, shared out. Torch's default (every core in every rank)
    oversubscribes the CPU N times over."""
    from training.threads import USER_OMP  # not the OMP_NUM_THREADS=1 a LocalCluster leaves

    if USER_OMP.isdigit():
        return max(1, int(USER_OMP))
    return max(1, int((cpus or os.cpu_count() or 1) * share) // ranks_here)


@dataclass(frozen=True)
class Slot:
    """Where one rank runs: a Dask worker's address (None: a child of this process), its host,
    and its LOCAL_RANK among the ranks of that host."""
    worker: str | None
    host: str
    local_rank: int
    local_world: int
    threads: int


def plan(world: int, client=None, share: float = 1.0) -> list[Slot]:
    """Rank r's slot, for r in 0..world-1: all local without a client; else spread evenly over
    the client's workers in address order (rank r on worker r mod W), numbered within hosts.
    `share`: of this machine's cores, what local ranks get (the rest is the sampler's)."""
    if client is None:
        threads = _rank_threads(world, share=share)
        return [Slot(None, "127.0.0.1", r, world, threads) for r in range(world)]
    facts = client.run(rank_spawn.worker_facts)
    if not facts:
        raise RankFailure("rl.placement='dask': the Dask cluster has no workers")
    workers = sorted(facts)
    where = [workers[r % len(workers)] for r in range(world)]
    per_host: dict[str, int] = {}
    for w in where:
        per_host[facts[w]["host"]] = per_host.get(facts[w]["host"], 0) + 1
    seen: dict[str, int] = {}
    slots = []
    for w in where:
        host = facts[w]["host"]
        slots.append(Slot(w, host, seen.get(host, 0), per_host[host],
                          _rank_threads(per_host[host], facts[w]["cpus"])))
        seen[host] = seen.get(host, 0) + 1
    return slots


def _reachable_ip(client) -> str:
    """This machine's address on the route to the scheduler (loopback for a local cluster):
    what a UDP socket connected towards it is bound to (nothing is sent); without a route, the
    address of this machine's host name (as Dask's own `get_ip` does)."""
    host = rank_spawn.host_of(client.scheduler.address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host, 80))
            if s.getsockname()[0] != "0.0.0.0":
                return s.getsockname()[0]
        except OSError:
            pass
    try:
        return socket.getaddrinfo(socket.gethostname(), 80, family, socket.SOCK_DGRAM)[0][4][0]
    except socket.gaierror:
        return "127.0.0.1"


# ---- the supervisor ----------------------------------------------------------------------

class TrainerGroup:
    """N resident rank processes (local, or on a Dask cluster's workers), driven by
    `run(job)`."""

    def __init__(self, world: int, client=None, start_timeout_s: float = START_TIMEOUT_S,
                 share: float = 1.0, nice: int = 0, launcher_vars: Sequence[str] = ()):
        if world < 1:
            raise ValueError(f"rl.processes={world}: expected at least 1")
        self.world = world
        self.client = client
        self.share, self.nice = share, nice
        self.placement = "local" if client is None else "dask"
        # What the cluster's worker launcher sets for its own tasks (a Dask nanny's
        # `distributed.nanny.pre-spawn-environ`, read by the flow): not a rank's to inherit.
        self.launcher_vars = tuple(launcher_vars)
        self.key = (world, None if client is None else client.scheduler.address, share, nice)
        self.jobs = 0  # jobs this group has finished (resident: one per iteration)
        # Set while a job is out: a wait cut short (a stage deadline, Ctrl-C) leaves the ranks
        # on a job whose reply would be taken for the next one's, so such a group is replaced.
        self.busy = False
        self.procs: list[subprocess.Popen] = []  # local placement
        self.remote: dict[str, list[int]] = {}  # dask placement: worker -> pids
        self.conns: list[Connection] = []
        self.slots: list[Slot] = []
        self._store = None
        try:
            self._start(start_timeout_s)
        except BaseException:
            self.close(force=True)
            raise

    def _start(self, timeout_s: float) -> None:
        self.slots = plan(self.world, self.client, self.share)
        me = "127.0.0.1" if self.client is None else _reachable_ip(self.client)
        authkey = os.urandom(32)
        server = socket.create_server((me, 0), backlog=max(16, self.world))
        server.settimeout(1.0)  # accept wakes every second to look for ranks that died
        # The ranks' rendezvous store is served from here for the group's life, on a port the
        # kernel gave it (torchrun's agent store): a port picked free and bound later by rank
        # 0, after its imports, could be taken in between by any process's connection.
        from torch.distributed import TCPStore  # noqa: PLC0415

        self._store = TCPStore(me, 0, self.world, True, timeout=timedelta(seconds=timeout_s),
                               wait_for_workers=False)
        common = {"MASTER_ADDR": me, "MASTER_PORT": str(self._store.port),
                  "TORCHELASTIC_USE_AGENT_STORE": "True",
                  "WORLD_SIZE": str(self.world), ADDR_ENV: f"{me}:{server.getsockname()[1]}",
                  KEY_ENV: authkey.hex()}
        if self.client is not None:
            common.update({k: os.environ[k] for k in _FORWARD if k in os.environ})
        envs = [{**common, "RANK": str(r), "LOCAL_RANK": str(s.local_rank),
                 "LOCAL_WORLD_SIZE": str(s.local_world), "OMP_NUM_THREADS": str(s.threads),
                 **({NICE_ENV: str(self.nice)} if self.nice and s.worker is None else {})}
                for r, s in enumerate(self.slots)]
        try:
            if self.client is None:
                base = rank_spawn.base_env()
                self.procs = [rank_spawn.popen({**base, **e}) for e in envs]
            else:
                tuned = {k: os.environ[k] for k in self.launcher_vars if k in os.environ}
                by_worker: dict[str, list[int]] = {}
                for r, s in enumerate(self.slots):
                    by_worker.setdefault(s.worker, []).append(r)
                for w, ranks in by_worker.items():
                    pids = self.client.run(rank_spawn.spawn, [envs[r] for r in ranks], tuned,
                                           self.launcher_vars, workers=[w])[w]
                    self.remote[w] = pids
            self.conns = self._connect(server, authkey, timeout_s)
        finally:
            server.close()
        self.ready = self._gather(timeout_s, "start")

    def _connect(self, server: socket.socket, authkey: bytes, timeout_s: float) -> list:
        """Every rank's connection, in rank order: each proves it holds the group's key (the
        handshake of `multiprocessing.connection`) and says its rank first. A client that does
        not (a stranger, or one that says nothing) is dropped and the loop goes on accepting;
        the start's deadline holds whatever the clients do."""
        conns: dict[int, Connection] = {}
        deadline = time.monotonic() + timeout_s
        while len(conns) < self.world:
            left = deadline - time.monotonic()
            if left <= 0:
                self._check_started()
                missing = sorted(set(range(self.world)) - set(conns))
                raise RankFailure(f"trainer group ({self.world} ranks, {self.placement}): "
                                  f"ranks {missing} did not connect within {timeout_s:g}s")
            try:
                sock, _ = server.accept()
            except TimeoutError:
                self._check_started()
                continue
            got = _handshake(sock, authkey, min(HANDSHAKE_TIMEOUT_S, max(left, 0.1)))
            if got is not None:
                conns[int(got[1]["rank"])] = got[0]
        return [conns[r] for r in range(self.world)]

    def _check_started(self) -> None:
        """RankFailure if a local rank died before it connected (accept wakes every second)."""
        dead = [r for r, p in enumerate(self.procs) if p.poll() is not None]
        if dead:
            raise RankFailure(f"trainer group: rank {dead[0]} of {self.world} died during the "
                              f"start ({_how(self.procs[dead[0]].returncode)}); the group was "
                              "shut down")

    def _gather(self, timeout_s: float | None, what: str) -> list[dict]:
        """One reply from every rank, or RankFailure as soon as one dies or raises."""
        replies: dict[int, dict] = {}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pending = {c: r for r, c in enumerate(self.conns)}
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait(list(pending), timeout=left)
            if not ready:
                self.close(force=True)
                raise RankFailure(f"trainer group: no {what} reply from ranks "
                                  f"{sorted(pending.values())} of {self.world} within "
                                  f"{timeout_s:g}s")
            for c in ready:
                r = pending.pop(c)
                try:
                    msg = c.recv()
                except (EOFError, OSError):
                    how = self._exit_of(r)
                    self.close(force=True)
                    raise RankFailure(f"trainer group: rank {r} of {self.world} died during the "
                                      f"{what} ({how}); the group was shut down") from None
                if "error" in msg:
                    self.close(force=True)
                    raise RankFailure(f"trainer group: rank {r} of {self.world} failed during "
                                      f"the {what}:\n{msg['error']}")
                replies[r] = msg
        return [replies[r] for r in range(self.world)]

    def _exit_of(self, r: int) -> str:
        if self.procs:
            return _how(self.procs[r].wait())
        return f"its connection closed; it ran on Dask worker {self.slots[r].worker}"

    def alive(self) -> bool:
        """Every rank still connected and silent between jobs (a closed connection reads as
        ready, as does a rank that wrote out of turn: neither group can take a job)."""
        if not self.conns or any(c.closed for c in self.conns):
            return False
        if self.procs and any(p.poll() is not None for p in self.procs):
            return False
        return self.busy or not wait(self.conns, timeout=0)

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
        for c in self.conns:
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
            for c in self.conns:
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
            # A remote rank that leaves closes its connection: wait for that, then reap it.
            for c in self.conns:
                try:
                    if wait([c], timeout=max(0.1, end - time.monotonic())):
                        c.recv_bytes()
                except (EOFError, OSError):
                    pass
        rank_spawn.end(self.procs)
        for w, pids in self.remote.items():
            try:
                self.client.run(rank_spawn.kill, pids, workers=[w])
            except Exception:  # the worker is gone, and its ranks with it (they watch it)
                pass
        for c in self.conns:
            c.close()
        self.procs, self.remote, self.conns = [], {}, []
        self._store = None  # the ranks that used it are gone


def _handshake(sock: socket.socket, authkey: bytes, timeout_s: float
               ) -> tuple[Connection, dict] | None:
    """The key handshake and the hello of a new connection, within `timeout_s`: the connection
    and the hello, or None for a client that is not one of our ranks (no key, bytes that are
    not the protocol, or silence: the listener is reachable from the network with
    `rl.placement: dask`, and a blocking read would wait on such a client forever)."""
    sock.setblocking(True)  # a Connection reads a blocking descriptor, so no socket timeout:
    c = Connection(os.dup(sock.fileno()))
    expired = threading.Event()

    def cut() -> None:  # ... past the limit, a shutdown ends the blocked read instead (EOF)
        expired.set()
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    timer = threading.Timer(timeout_s, cut)
    timer.start()
    hello = None
    try:
        deliver_challenge(c, authkey)
        answer_challenge(c, authkey)
        hello = c.recv()
    except Exception:  # AuthenticationError, EOFError, OSError, or whatever a stranger sent
        pass
    finally:
        timer.cancel()
        timer.join()  # after this, `expired` says for certain whether the cut happened
        sock.close()  # the connection lives on in `c`'s own descriptor
    if expired.is_set() or not isinstance(hello, dict) or "rank" not in hello:
        c.close()
        return None
    return c, hello


def _how(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


_GROUP: TrainerGroup | None = None
STARTS = {"count": 0}  # groups started by this process (a restart after a failure counts)


def group_of(world: int, client=None, share: float = 1.0, nice: int = 0,
             launcher_vars: Sequence[str] = ()) -> TrainerGroup:
    """The resident group of `world` ranks placed by `client` (None: local), local ranks on
    `share` of the cores (`launcher_vars`: as `TrainerGroup`'s): the running one, or a fresh
    one (after a failure, or when the rank count, cluster or share changed)."""
    global _GROUP
    key = (world, None if client is None else client.scheduler.address, share, nice)
    if _GROUP is not None and (_GROUP.key != key or not _GROUP.usable()):
        _GROUP.close(force=not _GROUP.usable())
        _GROUP = None
    if _GROUP is None:
        if not STARTS["count"]:  # a caller outside the flow may never call close_group
            atexit.register(close_group)
        _GROUP = TrainerGroup(world, client, share=share, nice=nice,
                              launcher_vars=launcher_vars)
        STARTS["count"] += 1
    return _GROUP


def close_group() -> None:
    """Stop the resident group, if any (the flow does at its end, before its Dask client)."""
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


def runs_here(rl, client=None) -> bool:
    """Whether `update` runs in this process: one rank, placed locally, no overlap."""
    client = client if rl.placement == "dask" else None
    return not rl.overlap and client is None and resolve_processes(rl.processes, client) == 1


def update(run_dir: str, version: int, samples: Sequence, policy, rl, temperature: float,
           seed: int, replay: Sequence[tuple[str, str]] = (), client=None,
           launcher_vars: Sequence[str] = ()) -> dict:
    """One RL update (version -> version + 1) on `rl.processes` ranks: in this process for one
    (today's path, unchanged), on the resident group for more or with `rl.overlap`, placed by
    `rl.placement` (with `dask`, on the workers of `client`, whose launcher sets
    `launcher_vars` for its own tasks). Same arguments as `grpo_update`."""
    from training import threads

    client = client if rl.placement == "dask" else None
    if rl.placement == "dask" and client is None:
        raise ValueError("rl.placement='dask' needs the run's Dask client")
    world = resolve_processes(rl.processes, client)
    if runs_here(rl, client):
        from training.trainer import grpo_update

        return grpo_update(run_dir, version, list(samples), policy, rl, temperature, seed, replay)
    # Beside the sampler (rl.overlap) local ranks get half the cores, and the lowest CPU
    # priority: the rollouts' sandboxes share those cores with them and are the loop's
    # critical path, while the update has the whole collection's time to finish.
    group = group_of(world, client, *((0.5, OVERLAP_NICE) if rl.overlap else (1.0, 0)),
                     launcher_vars=launcher_vars)
    here = sum(s.threads for s in group.slots if s.worker is None)
    job = {"run_dir": str(Path(run_dir).resolve()), "version": int(version),
           "samples": [asdict(s) for s in samples], "policy": policy.model_dump(),
           "rl": rl.model_dump(), "temperature": float(temperature), "seed": int(seed),
           "replay": [tuple(p) for p in replay]}
    try:
        with threads.reserved(here):  # this machine's cores the ranks compute on meanwhile
            replies = group.run(job)
    except RankFailure:
        close_group()
        raise
    return {**combine(replies), "train/group_starts": STARTS["count"],
            "train/group_jobs": group.jobs,
            "train/group_hosts": len({s.host for s in group.slots}),
            "train/group_workers": len({s.worker for s in group.slots} - {None})}
