"""The faults a chaos run injects (`KINDS`), and the store's own small filesystem that one of
them fills: each kind is one branch of `inject`, which says what it hit or that there was
nothing of that kind to hit at that moment."""
from __future__ import annotations

import contextlib
import errno
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import psutil

from bench.chaos_services import Services, descendants, group_kill, killtree

KINDS = ("flow", "worker", "scheduler", "rank", "sandbox_kill", "server", "disk_full",
         "sandbox_hang", "result_deleted")


@contextlib.contextmanager
def small_fs(path: Path, size_mb: int):
    """A tmpfs of `size_mb` at `path`: the store's own filesystem, which a fault can fill."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> Path:
    """Write zeros at `path` until the filesystem is full (unbuffered: the last partial
    block goes in too); returns the filler."""
    filler = path / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        size = 1 << 20
        while size >= 512:
            try:
                os.write(fd, b"\0" * size)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                size //= 2
    finally:
        os.close(fd)
    return filler


def _sandbox_roots(services: Services) -> list[psutil.Process]:
    """The outermost bubblewrap (or unshare) process of each sandbox tree on the workers."""
    roots = []
    for w in services.worker_processes():
        for p in descendants(w.pid):
            with contextlib.suppress(psutil.NoSuchProcess):
                if p.name() in ("bwrap", "unshare") and p.status() != psutil.STATUS_ZOMBIE \
                        and p.parent().name() not in ("bwrap", "unshare"):
                    roots.append(p)
    return roots


def inject(kind: str, rng: random.Random, services: Services, run: subprocess.Popen,
           run_dir: Path, store: Path, pending: list) -> str | None:
    """Apply one fault; returns what was hit, or None when there was nothing of that kind to
    hit at this moment. `pending` collects (monotonic time, undo) for the faults with a
    second half (a full disk is freed later)."""
    now = time.monotonic()
    if kind == "flow":
        os.kill(run.pid, signal.SIGKILL)
        return f"flow pid {run.pid}"
    if kind == "worker":
        ws = services.worker_processes()
        if not ws:
            return None
        w = rng.choice(ws)
        killtree(w.pid)
        return f"worker pid {w.pid}"
    if kind == "scheduler":
        services.down_until["scheduler"] = now + rng.uniform(1, 8)
        services.scheduler.kill()
        return f"scheduler pid {services.scheduler.pid}"
    if kind == "server":
        services.down_until["server"] = now + rng.uniform(1, 8)
        group_kill(services.server)
        return "prefect server"
    if kind == "rank":
        ranks = [p for p in descendants(run.pid) if "training.rank" in " ".join(p.cmdline())]
        if not ranks:
            return None
        r = rng.choice(ranks)
        r.kill()
        return f"rank pid {r.pid}"
    if kind in ("sandbox_kill", "sandbox_hang"):
        roots = _sandbox_roots(services)
        if not roots:
            return None
        r = rng.choice(roots)
        n = killtree(r.pid, signal.SIGKILL if kind == "sandbox_kill" else signal.SIGSTOP)
        return f"sandbox tree of {n} from pid {r.pid}"
    if kind == "disk_full":
        filler = fill(store)
        pending.append((now + rng.uniform(3, 20), lambda: filler.unlink(missing_ok=True)))
        return "store filled"
    if kind == "result_deleted":
        results = sorted((run_dir / ".prefect-results").glob("*"))
        if not results:
            return None
        victim = rng.choice(results)
        victim.unlink(missing_ok=True)
        return f"result {victim.name}"
    raise ValueError(f"unknown fault kind {kind!r}; expected one of {KINDS}")
