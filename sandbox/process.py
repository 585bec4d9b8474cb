"""The embedded default backend: a fresh process per execution in a throw-away directory.

Protections applied here: a private temporary working directory, an environment with nothing of
the host's, Python's isolated mode, rlimits (address space, file size, core dumps, open files),
a new session so the whole process group is killed at the wall-clock limit, and a cap on captured
output (the run is stopped once it is exceeded).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Mapping, Sequence

from sandbox.base import ExecResult, Limits

_PRLIMIT = shutil.which("prlimit")


def _write_files(root: str, files: Mapping[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = os.path.normpath(os.path.join(root, rel))
        if not path.startswith(root + os.sep):
            raise ValueError(f"file path {rel!r} escapes the workspace")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        mode = "wb" if isinstance(content, bytes) else "w"
        with open(path, mode) as fh:
            fh.write(content)


class _CappedReader(threading.Thread):
    """Drains a pipe into memory up to `cap` bytes; sets `overflow` once more arrives."""

    def __init__(self, pipe, cap: int, on_overflow) -> None:
        super().__init__(daemon=True)
        self.pipe, self.cap, self.on_overflow = pipe, cap, on_overflow
        self.chunks: list[bytes] = []
        self.size = 0
        self.overflow = False

    def run(self) -> None:
        while True:
            chunk = self.pipe.read1(65536) if hasattr(self.pipe, "read1") else self.pipe.read(65536)
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


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class ProcessSandbox:
    """Runs each execution as a fresh subprocess with rlimits in a temporary directory."""

    name = "process"

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def _argv(self, argv: Sequence[str], limits: Limits) -> list[str]:
        argv = list(argv)
        if argv and argv[0] == "python":
            argv = [self.python, "-I", "-B", *argv[1:]]
        if _PRLIMIT:
            mem = limits.memory_mb * 1024 * 1024
            fsize = limits.file_size_mb * 1024 * 1024
            argv = [_PRLIMIT, f"--as={mem}", f"--fsize={fsize}", "--core=0", "--nofile=256",
                    f"--nproc={limits.pids}", "--", *argv]
        return argv

    def run(
        self,
        files: Mapping[str, str | bytes],
        argv: Sequence[str],
        limits: Limits = Limits(),
        stdin: bytes | None = None,
        collect: Sequence[str] = (),
    ) -> ExecResult:
        start = time.perf_counter()
        try:
            workdir = tempfile.mkdtemp(prefix="rf-sbx-")
        except OSError as exc:
            return ExecResult("infra_error", None, "", "", 0.0, self.name, error=f"workspace: {exc}")
        try:
            try:
                _write_files(workdir, files)
                proc = subprocess.Popen(
                    self._argv(argv, limits), cwd=workdir, start_new_session=True,
                    stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    env={"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
                         "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"},
                )
            except (OSError, ValueError) as exc:
                return ExecResult("infra_error", None, "", "", time.perf_counter() - start,
                                  self.name, error=f"start: {exc}")
            readers = [_CappedReader(p, limits.output_bytes, lambda: _kill_group(proc))
                       for p in (proc.stdout, proc.stderr)]
            for r in readers:
                r.start()
            if stdin is not None:
                try:
                    proc.stdin.write(stdin)
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
            timed_out = False
            try:
                proc.wait(timeout=limits.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            _kill_group(proc)  # also reaps children left running after the main process exited
            proc.wait()
            for r in readers:
                r.join(timeout=2.0)
            duration = time.perf_counter() - start
            out, err = readers
            code = proc.returncode
            if timed_out:
                status = "timeout"
            elif out.overflow or err.overflow:
                status = "output_truncated"
            elif code == 0:
                status = "ok"
            elif "MemoryError" in err.text()[-2000:]:
                status = "memory_exceeded"
            else:
                status = "failed"
            collected = {}
            for rel in collect:
                path = os.path.join(workdir, rel)
                if os.path.isfile(path) and os.path.getsize(path) <= limits.output_bytes:
                    with open(path, errors="replace") as fh:
                        collected[rel] = fh.read()
            return ExecResult(status, code, out.text(), err.text(), duration, self.name,
                              files=collected)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def close(self) -> None:
        pass
