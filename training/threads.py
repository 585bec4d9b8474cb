"""How many torch threads the flow's process runs the model with (`threads.torch`).

Why this exists: torch's default is one intra-op thread per core. The policy's ops are small
(a few microseconds of work each), so every op waits at a barrier for all its threads; when
another process holds one of the cores, the thread that shares it is descheduled for a whole
time slice at almost every op. Measured here: sampling at 2 threads next to one busy process
ran at 0.4 tokens/s against 11.8 at 1 thread, 15-30x slower than on a quiet machine, where
2 threads are faster. So the count is chosen, not left to torch: `auto` takes the cores that
other processes leave free, measured just before each stage that runs the model here (the warm
start, sampling, the update in this process, evaluation) and again during the long loops
(`retune`), so a competitor that arrives or leaves mid-run is followed within seconds.

"Other processes" are everything but this process and its descendants: the run's own Dask
workers and sandboxes run between the model's stages, not during them, and the tail of a
rollout stage must not read as a neighbour at the next stage's start (it did, before they were
excluded: `auto` took 1 thread on a quiet machine). The measurement is a background thread
reading /proc twice a second (a few milliseconds each time); the last second decides. Where
/proc is missing (not Linux), `auto` is the core count.
"""
from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import Iterator

# What the user set, read when this module is imported (the flow imports it before it starts
# a Dask LocalCluster: distributed's nanny leaves OMP_NUM_THREADS=1 in the starting process's
# environment for its workers, which must not become the flow's own cap).
USER_OMP = os.environ.get("OMP_NUM_THREADS", "")

WINDOW_S = 1.0
TICK_S = 0.5
SLACK = 0.3  # a core counts as taken when others use more than this fraction of it


def cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _tree_ticks() -> int:
    """CPU ticks of this process and every process under it (the run's Dask workers, their
    sandboxes): utime + stime + the reaped children's cutime + cstime of each, so a sandbox
    that ended between two readings is counted in its parent."""
    me = os.getpid()
    parent, ticks = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        pid = int(name)
        parent[pid] = int(rest[1])
        ticks[pid] = sum(int(x) for x in rest[11:15])
    mine, total = {me}, 0
    for pid in sorted(parent):  # a child's pid is not always above its parent's: walk up
        p, chain = pid, []
        while p not in mine and p in parent and p > 1 and len(chain) < 64:
            chain.append(p)
            p = parent[p]
        if p in mine:
            mine.update(chain)
    return sum(ticks.get(p, 0) for p in mine)


def busy_seconds() -> tuple[float, float] | None:
    """(all cores' busy seconds, this run's CPU seconds: this process and its descendants) so
    far, or None without /proc."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        tree = _tree_ticks()
    except OSError:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy / hz, tree / hz


class _Monitor:
    """Snapshots of (time, busy, mine) every TICK_S, the last few kept."""

    def __init__(self):
        self.snaps: deque = deque(maxlen=int(WINDOW_S / TICK_S) + 2)
        self.lock = threading.Lock()
        self._take()
        threading.Thread(target=self._loop, daemon=True, name="rollforge-cpu-monitor").start()

    def _take(self) -> None:
        b = busy_seconds()
        if b is not None:
            with self.lock:
                self.snaps.append((time.monotonic(), *b))

    def _loop(self) -> None:
        while True:
            time.sleep(TICK_S)
            self._take()

    def others_busy(self) -> float | None:
        """Cores other processes kept busy over about the last WINDOW_S."""
        self._take()
        with self.lock:
            snaps = list(self.snaps)
        if len(snaps) < 2:
            return None
        now = snaps[-1]
        old = next((s for s in snaps if now[0] - s[0] <= WINDOW_S + TICK_S / 2), snaps[0])
        if now[0] - old[0] < 0.1:  # too short to tell: wait for a window's worth once
            time.sleep(0.25)
            return self.others_busy()
        return max(0.0, ((now[1] - old[1]) - (now[2] - old[2])) / (now[0] - old[0]))


_MONITOR: _Monitor | None = None
_SETTING: dict = {}  # the last setting `apply` was given (what `retune` re-applies)
_RESERVED = {"cores": 0}  # cores this run's own trainer ranks compute on (`reserved`)
_RESERVED_LOCK = threading.Lock()


@contextmanager
def reserved(cores: int) -> Iterator[None]:
    """`cores` of this machine are taken by this run's own trainer ranks for the body (an
    update running beside the sampler, rl.overlap): `auto` leaves them out. The ranks are this
    process's children, so the CPU monitor counts them as the run's own, not as neighbours;
    without this the sampler would take every core the neighbours leave and oversubscribe
    the ranks' ones."""
    with _RESERVED_LOCK:
        _RESERVED["cores"] += cores
    try:
        yield
    finally:
        with _RESERVED_LOCK:
            _RESERVED["cores"] -= cores


def choose(setting: int | str, others: float | None, n_cores: int | None = None) -> int:
    """The thread count for `setting` (a count, or "auto") when others keep `others` cores
    busy: "auto" is the cores they leave, less those this run's ranks hold (`reserved`), at
    least 1, at most OMP_NUM_THREADS when set."""
    if setting != "auto":
        return int(setting)
    n = n_cores or cores()
    if USER_OMP.isdigit() and int(USER_OMP) >= 1:
        n = min(n, int(USER_OMP))
    free = (n_cores or cores()) - _RESERVED["cores"]
    if others is not None:
        free -= math.ceil(others - SLACK)
    return max(1, min(n, free))


def apply(setting: int | str) -> dict:
    """Set this process's torch threads for `setting`; what was chosen, as metrics."""
    global _MONITOR
    import torch

    others = None
    if setting == "auto":
        if _MONITOR is None:
            _MONITOR = _Monitor()
        others = _MONITOR.others_busy()
    n = choose(setting, others)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    _SETTING["value"] = setting
    return {"threads/torch": n, "threads/others_busy": math.nan if others is None else others}


@contextmanager
def budget(setting: int | str) -> Iterator[dict]:
    """`setting` applied for the body (a stage that runs the model), `retune` active inside
    it; on leaving, the thread count and setting from before come back, so nothing outside a
    stage (a test, a benchmark calling the trainer) runs under a count it did not choose."""
    import torch

    before, outer = torch.get_num_threads(), dict(_SETTING)
    try:
        yield apply(setting)
    finally:
        _SETTING.clear()
        _SETTING.update(outer)
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def retune() -> None:
    """Re-apply the setting of the enclosing `budget` (during a long loop); nothing outside one
    (a rank of the trainer group, a benchmark or test calling the trainer)."""
    if "value" in _SETTING:
        apply(_SETTING["value"])
