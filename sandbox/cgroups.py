"""Per-execution cgroup v1 `memory` and `pids` groups (where the host lets us write them).

Each execution gets its own child group under the caller's own cgroup (so the host's limits on
the caller still hold): memory (+swap) is capped, the process count is capped, peak memory and
OOM kills are read back, and every process left in the group is killed at the end.
"""
from __future__ import annotations

import itertools
import os
import signal
import time

V1_ROOT = "/sys/fs/cgroup"
_counter = itertools.count()


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
    with open(path, "w") as fh:
        fh.write(value)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class ExecGroup:
    """The memory and/or pids groups of one execution. Raises OSError if they cannot be made."""

    def __init__(self, memory_mb: int | None, pids: int | None) -> None:
        name = f"rollforge-{os.getpid()}-{next(_counter)}"
        self.dirs: dict[str, str] = {}
        try:
            if memory_mb is not None:
                d = self._make("memory", name)
                limit = str(memory_mb * 1024 * 1024)
                _write(os.path.join(d, "memory.limit_in_bytes"), limit)
                memsw = os.path.join(d, "memory.memsw.limit_in_bytes")
                if os.path.exists(memsw):  # no escape into swap
                    _write(memsw, limit)
            if pids is not None:
                d = self._make("pids", name)
                _write(os.path.join(d, "pids.max"), str(pids))
        except OSError:
            self.remove()
            raise

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
        d = self.dirs.get("memory")
        if not d:
            return False
        try:
            with open(os.path.join(d, "memory.oom_control")) as fh:
                for line in fh:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value) > 0
        except OSError:
            pass
        return False

    def pids(self) -> list[int]:
        found: set[int] = set()
        for f in self.procs_files():
            try:
                with open(f) as fh:
                    found.update(int(x) for x in fh.read().split())
            except OSError:
                pass
        return sorted(found)

    def kill_all(self, rounds: int = 50) -> None:
        """SIGKILL every process in the groups, repeating while a fork race leaves some behind."""
        for _ in range(rounds):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.002)

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
