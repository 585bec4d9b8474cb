"""Run a prepared command with a wall-clock limit and capped output capture (no preexec_fn)."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence


class CappedReader(threading.Thread):
    """Drains a pipe into memory up to `cap` bytes; calls `on_overflow` once more arrives."""

    def __init__(self, pipe, cap: int, on_overflow: Callable[[], None]) -> None:
        super().__init__(daemon=True)
        self.pipe, self.cap, self.on_overflow = pipe, cap, on_overflow
        self.chunks: list[bytes] = []
        self.size = 0
        self.overflow = False

    def run(self) -> None:
        read = self.pipe.read1 if hasattr(self.pipe, "read1") else self.pipe.read
        while True:
            try:
                chunk = read(65536)
            except (OSError, ValueError):
                break
            if not chunk:
                break
            room = self.cap - self.size
            if room > 0:
                self.chunks.append(chunk[:room])
            self.size += len(chunk)
            if self.size > self.cap and not self.overflow:
                self.overflow = True
                self.on_overflow()

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class Captured:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    overflow: bool
    duration_s: float


def run_capped(argv: Sequence[str], *, cwd: str, env: dict[str, str], stdin: bytes | None,
               timeout_s: float, output_bytes: int, pass_fds: Sequence[int] = (),
               kill_tree: Callable[[], None] = lambda: None,
               started: Callable[[], None] = lambda: None) -> Captured:
    """Start `argv` in a new session, feed stdin, capture capped output, kill the tree at the end.

    `kill_tree` is called in addition to killing the process group (e.g. to kill a cgroup's
    processes); it runs on timeout, on output overflow, and after every normal exit, so nothing
    the execution started outlives it. Raises OSError when the command cannot be started.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(
        list(argv), cwd=cwd, env=env, start_new_session=True, pass_fds=tuple(pass_fds),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    started()

    def stop() -> None:
        kill_group(proc.pid)
        kill_tree()

    readers = [CappedReader(p, output_bytes, stop) for p in (proc.stdout, proc.stderr)]
    for r in readers:
        r.start()
    if stdin is not None:
        writer = threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True)
        writer.start()
    timed_out = not _wait_exit(proc, timeout_s)
    duration = time.perf_counter() - start
    stop()  # also reaps children left running after the main process exited
    proc.wait()
    for r in readers:
        r.join(timeout=2.0)
    for p in (proc.stdout, proc.stderr):
        p.close()
    out, err = readers
    return Captured(proc.returncode, out.text(), err.text(), timed_out,
                    out.overflow or err.overflow, duration)


def _wait_exit(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait up to `timeout_s` for `proc` to exit; True if it did. Polls a pidfd: no sleep loop
    (Popen.wait(timeout) sleeps in growing steps, which adds tens of ms to a short run)."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return proc.poll() is not None
            if poller.poll(left * 1000):
                return True
    finally:
        os.close(fd)


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except (BrokenPipeError, OSError, ValueError):
        pass
