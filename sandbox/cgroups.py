"""Per-execution cgroup v1 `memory` and `pids` groups (where the host lets us write them).

Each execution gets its own child group under the caller's own cgroup (so the host's limits on
the caller still hold): memory (+swap) is capped, the process count is capped, peak memory and
OOM kills are read back, and every process left in the group is killed at the end.

A group can also serve one execution after another (the fork server keeps one per zygote, since
making and removing groups costs more than a short execution): `recycle()` after a run checks it
is empty, gives back the page cache the run left charged to it and restarts the peak, and the
OOM count is read against the count at the run's start; `set_limits()` rewrites only what
changed. Anything that does not work that way makes the caller remove the group and make another.
"""
from __future__ import annotations

import functools
import itertools
import os
import secrets
import signal
import time

# The shell that starts an execution: it writes its own pid into each cgroup's procs file named
# before `--` (so the execution and all it forks are counted from their first instruction), then
# execs the command after it.
LAUNCH = ('while [ "$1" != -- ]; do echo $$ > "$1" || { echo "rollforge-launch: cannot join '
          'cgroup $1" >&2; exit 125; }; shift; done; shift; exec "$@"')

V1_ROOT = "/sys/fs/cgroup"
_counter = itertools.count()
# Most a group may hold charged after a run and still serve the next (kernel memory of a few
# pages: a Python run leaves 60-200 KiB); a recycled group's peak includes it.
LEFTOVER_BYTES = 1 << 20


def _own_path(controller: str) -> str | None:
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if controller in ctrls.split(","):
                    return path
    except OSError:
        return None
    return None


def parent_dir(controller: str) -> str | None:
    """This process's group for `controller` in a v1 hierarchy, or None if there is none."""
    return _parent_dir(controller, os.getpid())


@functools.lru_cache(maxsize=16)
def _parent_dir(controller: str, pid: int) -> str | None:
    # Once per process (`pid` is the key: a forked copy looks again): the process's own group
    # does not change under it, and reading /proc/self/cgroup for every execution costs.
    path = _own_path(controller)
    if path is None:
        return None
    full = os.path.join(V1_ROOT, controller, path.lstrip("/"))
    return full if os.path.isdir(full) else None


def writable(controller: str) -> str | None:
    """Why a child group of `controller` cannot be made here, or None when it can."""
    base = parent_dir(controller)
    if base is None:
        return f"no cgroup v1 '{controller}' hierarchy"
    probe = os.path.join(base, f"rf-probe-{os.getpid()}-{next(_counter)}")
    try:
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError as exc:
        return f"cgroup v1 '{controller}' not writable ({exc.strerror})"
    return None


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)  # (plain descriptors: a few of these per execution)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        data = b""
        while chunk := os.read(fd, 1 << 16):
            data += chunk
        return data
    finally:
        os.close(fd)


def _read_int(path: str) -> int | None:
    try:
        return int(_read(path).split()[0])
    except (OSError, ValueError, IndexError):
        return None


class ExecGroup:
    """The memory and/or pids groups of one execution. Raises OSError if they cannot be made."""

    def __init__(self, memory_mb: int | None, pids: int | None) -> None:
        # a random part too: a group a killed process left behind would otherwise collide with
        # the groups of a later process that is given the same pid
        name = f"rollforge-{os.getpid()}-{next(_counter)}-{secrets.token_hex(3)}"
        self.dirs: dict[str, str] = {}
        self.limits = (memory_mb, pids)
        self._memsw = False
        self._oom_base = 0  # the group's OOM kills before the current run
        self._oom_seen: int | None = None  # the count oom_killed() read after the run
        try:
            if memory_mb is not None:
                d = self._make("memory", name)
                limit = str(memory_mb * 1024 * 1024)
                _write(os.path.join(d, "memory.limit_in_bytes"), limit)
                memsw = os.path.join(d, "memory.memsw.limit_in_bytes")
                if os.path.exists(memsw):  # no escape into swap
                    _write(memsw, limit)
                    self._memsw = True
            if pids is not None:
                d = self._make("pids", name)
                _write(os.path.join(d, "pids.max"), str(pids))
        except OSError:
            self.remove()
            raise

    def set_limits(self, memory_mb: int | None, pids: int | None) -> None:
        """Give a recycled group another run's limits (the same controllers); OSError if not."""
        old_mb, old_pids = self.limits
        if (memory_mb is None) != (old_mb is None) or (pids is None) != (old_pids is None):
            raise OSError(f"group has limits {self.limits}, asked for {(memory_mb, pids)}")
        if memory_mb != old_mb:
            d, limit = self.dirs["memory"], str(memory_mb * 1024 * 1024)
            files = ["memory.limit_in_bytes"] + (["memory.memsw.limit_in_bytes"]
                                                 if self._memsw else [])
            if memory_mb > old_mb:  # memory + swap may never be below memory alone
                files.reverse()
            self.limits = (None, old_pids)  # until both are written
            for f in files:
                _write(os.path.join(d, f), limit)
        if pids != old_pids:
            _write(os.path.join(self.dirs["pids"], "pids.max"), str(pids))
        self.limits = (memory_mb, pids)

    def recycle(self) -> bool:
        """After a run whose processes `kill_all()` found all gone: ready the group for the
        next run (its OOM count and peak restarted). False when it should be removed instead:
        the run left more than a little charged to it (page cache of the files it read, which
        would count as the next run's; reclaiming it in place costs more than a new group)."""
        d = self.dirs.get("memory")
        if d is None:
            return True
        oom = self._oom_seen if self._oom_seen is not None else self._oom_kills()
        self._oom_seen = None
        used = _read_int(os.path.join(d, "memory.usage_in_bytes"))
        if oom is None or used is None or used > LEFTOVER_BYTES:
            return False
        try:
            _write(os.path.join(d, "memory.max_usage_in_bytes"), "0")  # the peak := usage now
        except OSError:
            return False
        self._oom_base = oom
        return True

    def _make(self, controller: str, name: str) -> str:
        base = parent_dir(controller)
        if base is None:
            raise OSError(f"no cgroup v1 {controller} hierarchy")
        d = os.path.join(base, name)
        os.mkdir(d)
        self.dirs[controller] = d
        return d

    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs.values()]

    def adopt(self, pid: int) -> None:
        """Move process `pid` (not its existing children) into every group; OSError if not."""
        for path in self.procs_files():
            _write(path, str(pid))

    def peak_mb(self) -> float | None:
        d = self.dirs.get("memory")
        value = _read_int(os.path.join(d, "memory.max_usage_in_bytes")) if d else None
        return None if value is None else value / (1024 * 1024)

    def oom_killed(self) -> bool:
        """Whether the OOM killer struck in this group since the current run began."""
        kills = self._oom_seen = self._oom_kills()
        return kills is not None and kills > self._oom_base

    def _oom_kills(self) -> int | None:
        d = self.dirs.get("memory")
        if not d:
            return 0
        try:
            for line in _read(os.path.join(d, "memory.oom_control")).splitlines():
                key, _, value = line.partition(b" ")
                if key == b"oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return None

    def pids(self) -> list[int]:
        found: set[int] = set()
        for f in self.procs_files():
            try:
                found.update(int(x) for x in _read(f).split())
            except OSError:
                pass
        return sorted(found)

    def kill_all(self, rounds: int = 50) -> bool:
        """SIGKILL every process in the groups, repeating while a fork race leaves some behind;
        True once none is left (nothing can enter an empty group but by a host root's write)."""
        for _ in range(rounds):
            pids = self.pids()
            if not pids:
                return True
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.002)
        return not self.pids()

    def remove(self) -> None:
        for d in list(self.dirs.values()):
            for _ in range(100):  # a killed process leaves its group a moment later
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)
        self.dirs.clear()


class RecycledGroup:
    """The groups of one execution after another (a fork server's zygote keeps one): made for
    the first, recycled for the next ones, since making and removing groups costs more than a
    short execution."""

    def __init__(self) -> None:
        self.group: ExecGroup | None = None

    def take(self, memory_mb: int | None, pids: int | None) -> ExecGroup:
        """The group for the next execution, with these limits; OSError if none can be had."""
        if self.group is not None:
            try:
                self.group.set_limits(memory_mb, pids)
                return self.group
            except OSError:
                self.drop()
        self.group = ExecGroup(memory_mb, pids)
        return self.group

    def release(self, reusable: bool) -> None:
        """After an execution: keep the group for the next one if `reusable` (its processes
        all killed, its owner still in use) and it can be recycled; else remove it."""
        if self.group is not None and not (reusable and self.group.recycle()):
            self.drop()

    def drop(self) -> None:
        group, self.group = self.group, None
        if group is not None:
            group.kill_all()
            group.remove()
