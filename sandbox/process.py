"""The embedded default backend: a fresh, hardened process per execution (no daemon needed).

Layers, outermost first, each a small wrapper command (no `preexec_fn`, so `run()` is safe to call
from many threads of a Dask worker):

1. `sh` joins the execution's own cgroup v1 memory and pids groups (where writable);
2. `prlimit` sets rlimits: file size, no core dumps, open files, and, only where the cgroups are
   missing, address space and RLIMIT_NPROC as weaker stand-ins;
3. `bwrap` makes fresh pid/net/mount/ipc/uts namespaces, a root holding only the system libraries
   and the interpreter read-only, a private size-capped /tmp and the workspace at /workspace
   (fallback: `unshare` namespaces over the host's filesystem); a run's base tree
   (`BaseTree`: a repository's extracted files) is bound into the workspace read-only, file by
   file, instead of copied (copied where there is no bubblewrap);
4. `setpriv` (when root) drops to an otherwise unused uid with no capabilities.

Whatever of this the host does not allow is listed in `missing` (and warned about once); see
`sandbox/probe.py`. The workspace lives on tmpfs, so what the code writes counts as its memory.

Fast path (on by default where bubblewrap and root allow it; `fork_server=False` or
ROLLFORGE_FORK_SERVER=0 turn it off): `python script.py` and `python -c` executions are forks of a
warm zygote that lives inside the same boundary, each with its own uid, cgroups, rlimits,
workspace, /tmp and pipes, and the same result record: `sandbox/fork_server.py`,
`sandbox/FORK_SERVER.md`.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Mapping, Sequence

from sandbox.base import BaseTree, ExecResult, Limits, verdict
from sandbox.capture import Captured, run_capped
from sandbox.cgroups import LAUNCH, ExecGroup
from sandbox.probe import HostSupport, note_kill_tree, probe
from sandbox.workspace import (SANDBOX_ENV, check_relpath, collect_files, give_to, make_workspace,
                               remove_tree, write_files)

log = logging.getLogger(__name__)

_LAUNCHER_PROCS = 3  # sh→prlimit→bwrap (outer) and bwrap's init: not the execution's own
FORK_SERVER_ENV = "ROLLFORGE_FORK_SERVER"  # "0" turns the fast path off everywhere (A/B runs)
_fallback_noted: set[str] = set()


def python_flags(fixed_hash_seed: bool = False) -> tuple[str, ...]:
    """The sandbox interpreter's options: isolated mode (-I) and no bytecode written; with
    `fixed_hash_seed`, -s -P in place of -I, whose -E would also drop the sandbox's own
    PYTHONHASHSEED=0 (the environment is the sandbox's, never the caller's, so -E guards
    nothing there). With that seed and address space randomization off (None hashes by its
    address in Python 3.11), hashes and so the order of sets in a run's output are the same on
    every run (the repo kind's problem statements quote pytest's set diffs)."""
    return ("-s", "-P", "-B") if fixed_hash_seed else ("-I", "-B")


def fork_server_unavailable(host: HostSupport, wanted: bool = True) -> str | None:
    """Why the fork-server fast path cannot run here, or None when it can.

    It needs what makes a forked child as isolated as a fresh process: bubblewrap's namespaces
    (the zygote lives inside them) and root, to give each child an unused uid of its own.
    """
    if not wanted:
        return "turned off by config"
    if os.environ.get(FORK_SERVER_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return f"turned off by {FORK_SERVER_ENV}={os.environ[FORK_SERVER_ENV]}"
    if not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"):
        return "needs Linux with pidfd_open (Python 3.9+, kernel 5.3+)"
    if not host.bwrap:
        return "needs bubblewrap (the zygote runs inside its namespaces)"
    if not host.setpriv:
        return "needs root, to run each execution as an unused uid apart from the zygote's"
    return None


def _note_fallback(why: str) -> None:
    if why not in _fallback_noted:
        _fallback_noted.add(why)
        log.warning("process sandbox: fork-server fast path off (%s); every execution starts a "
                    "fresh interpreter", why)


def _site_packages(python: str) -> list[str]:
    """The interpreter's site-packages folders (asked of it, so a venv reports its own)."""
    if python == sys.executable:
        import site
        return [p for p in site.getsitepackages() if os.path.isdir(p)]
    out = subprocess.run([python, "-c", "import site; print('\\n'.join(site.getsitepackages()))"],
                         capture_output=True, text=True, timeout=30).stdout
    return [p for p in out.splitlines() if os.path.isdir(p)]


def _interpreter_paths(python: str) -> tuple[str, str]:
    # By path, not by the resolved file: two venvs of one base interpreter resolve to the same
    # binary but have different prefixes (and site-packages).
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        return sys.base_prefix, sys.prefix
    code = "import sys; print(sys.base_prefix); print(sys.prefix)"  # noqa: the interpreter's own
    out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    return out[0], out[1]


class ProcessSandbox:
    """Runs each execution as a fresh, namespaced, resource-capped process tree."""

    name = "process"

    def __init__(self, python: str | None = None, *, use_bwrap: bool = True,
                 use_cgroups: bool = True, tmp_mb: int = 64, strict: bool = False,
                 host: HostSupport | None = None, site_packages: bool = False,
                 fork_server: bool = True, preload: Sequence[str] | None = None,
                 fixed_hash_seed: bool = False) -> None:
        self.python = python or sys.executable
        # "python" in an argv: the interpreter, its options and, for a fixed hash seed, address
        # space randomization off for it (`setarch -R`: None's hash is its address)
        setarch = shutil.which("setarch") if fixed_hash_seed else None
        self._python_cmd = ([setarch, "-R"] if setarch else []) + [
            self.python, *python_flags(fixed_hash_seed)]
        self.site_packages = site_packages
        self.tmp_mb = tmp_mb
        self.host = note_kill_tree(host or probe(use_bwrap=use_bwrap, use_cgroups=use_cgroups))
        self.protections: tuple[str, ...] = self.host.applied
        self.missing: dict[str, str] = dict(self.host.missing)
        if self.missing:
            msg = "; ".join(f"{k}: {v}" for k, v in self.missing.items())
            if strict:
                raise RuntimeError(f"process sandbox cannot apply every protection: {msg}")
            log.warning("process sandbox runs with weaker isolation: %s", msg)
        self._binds = self._bind_args() if self.host.bwrap else []
        # Where the workspace appears inside bwrap: a path that hides none of the interpreter.
        self.mount = next(m for m in ("/workspace", "/sandbox-workspace", "/rf-workspace")
                          if not any(b.startswith(m) for b in self._binds))
        self.fork_server = None  # the fast path (sandbox/fork_server.py), where it can run
        why_not = fork_server_unavailable(self.host, fork_server)
        if why_not:
            if fork_server:
                _note_fallback(why_not)
        else:
            from sandbox.fork_server import PRELOAD, ForkServer
            self.fork_server = ForkServer(self, PRELOAD if preload is None else tuple(preload))

    # -- argv -----------------------------------------------------------------------------
    def _bind_args(self) -> list[str]:
        args: list[str] = []
        for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            path = "/" + top
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
        base, prefix = _interpreter_paths(self.python)
        binds = [] if base.startswith("/usr/") else [base]
        if prefix != base:  # a venv: its bin/ and pyvenv.cfg only, not its site-packages
            binds += [os.path.join(prefix, "bin"), os.path.join(prefix, "pyvenv.cfg")]
            if self.site_packages:  # read-only, for tasks that need e.g. pandas
                binds += [p for p in _site_packages(self.python) if p.startswith(prefix)]
        made: set[str] = set()
        for path in binds:
            # bwrap would make the missing parents 0700 root, closing them to the private uid.
            parents = []
            parent = os.path.dirname(path)
            while parent not in ("/", "") and parent not in made:
                parents.append(parent)
                made.add(parent)
                parent = os.path.dirname(parent)
            for d in reversed(parents):
                args += ["--perms", "0755", "--dir", d]
            args += ["--ro-bind", path, path]
        return args

    def _command(self, argv: Sequence[str]) -> list[str]:
        argv = list(argv)
        if argv and argv[0] == "python":
            argv = [*self._python_cmd, *argv[1:]]
        return argv

    def bwrap_prefix(self, workdir: str, status_fd: int | None, extra: Sequence[str] = (),
                     die_with_parent: bool = True, over: Sequence[str] = ()) -> list[str]:
        """bubblewrap's arguments up to its `--`: fresh namespaces, the read-only root with the
        interpreter, the private /tmp and `workdir` at the workspace mount point (`over`: mounts
        inside it, a base tree's read-only files).

        `die_with_parent` ties bubblewrap to the *thread* that started it (PR_SET_PDEATHSIG):
        right for a run that thread waits for, wrong for a server that outlives it."""
        h = self.host
        ns = [h.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
              "--unshare-cgroup-try", "--new-session", "--hostname", "sandbox", *extra]
        if die_with_parent:
            ns.insert(6, "--die-with-parent")
        if os.geteuid() != 0:
            ns.append("--unshare-user")
        if status_fd is not None:
            ns += ["--json-status-fd", str(status_fd)]
        # The private /tmp first, the interpreter's binds after it: an interpreter that
        # lives under /tmp (a checkout there) stays visible on top of the fresh tmpfs.
        ns += ["--proc", "/proc", "--dev", "/dev",
               "--perms", "1777", "--size", str(self.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp"]
        ns += self._binds
        ns += ["--bind", workdir, self.mount, *over, "--remount-ro", "/", "--chdir", self.mount,
               "--setenv", "HOME", self.mount, "--"]
        return ns

    def _wrap(self, argv: list[str], limits: Limits, workdir: str, uid: int | None,
              group: ExecGroup | None, status_fd: int | None,
              over: Sequence[str] = ()) -> list[str]:
        h = self.host
        inner = argv
        if uid is not None:
            inner = [h.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--", *inner]
        if h.bwrap:
            inner = self.bwrap_prefix(workdir, status_fd, over=over) + inner
        elif h.unshare:
            ns = [h.unshare, "--pid", "--fork", "--kill-child", "--net", "--ipc", "--uts",
                  "--mount", "--mount-proc"]
            if os.geteuid() != 0:
                ns.append("--map-root-user")
            inner = ns + ["--", *inner]
        if h.prlimit:
            rl = [h.prlimit, f"--fsize={limits.file_size_mb * 1024 * 1024}", "--core=0",
                  "--nofile=256"]
            if not h.memory_cgroup:
                rl.append(f"--as={limits.memory_mb * 1024 * 1024}")
            if not h.pids_cgroup and uid is not None:
                rl.append(f"--nproc={limits.pids}")
            inner = rl + ["--", *inner]
        if group is not None:
            inner = ["/bin/sh", "-c", LAUNCH, "rollforge-launch", *group.procs_files(), "--",
                     *inner]
        return inner

    # -- run ------------------------------------------------------------------------------
    def run(
        self,
        files: Mapping[str, str | bytes],
        argv: Sequence[str],
        limits: Limits = Limits(),
        stdin: bytes | None = None,
        collect: Sequence[str] = (),
        base: BaseTree | None = None,
        preload: Sequence[str] = (),
    ) -> ExecResult:
        if not argv:
            raise ValueError("argv must name a command, got an empty sequence")
        for rel in list(files) + list(collect) + list(base.paths if base else ()):
            check_relpath(rel)  # bad input from the caller: refused, not an infra_error
        if self.fork_server is not None and base is None:
            plan = self.fork_server.plan(files, self._command(argv))
            if plan is not None:
                return self.fork_server.run(files, plan, limits, stdin, collect, preload)
        held = _Held()
        try:
            return self._run_fresh(held, files, argv, limits, stdin, collect, base)
        finally:
            held.release()

    def _infra(self, why: str, duration: float = 0.0) -> ExecResult:
        return ExecResult("infra_error", None, "", "", duration, self.name, error=why)

    def _run_fresh(self, held: _Held, files: Mapping[str, str | bytes], argv: Sequence[str],
                   limits: Limits, stdin: bytes | None, collect: Sequence[str],
                   base: BaseTree | None) -> ExecResult:
        """One execution as a fresh process tree. What it makes goes into `held`, which the
        caller releases however this returns."""
        try:
            held.workdir = make_workspace()
            over = self._fill_workspace(held.workdir, files, base)
        except OSError as exc:
            return self._infra(f"workspace: {exc}")
        try:
            cmd = self._launcher(held, argv, limits, over)
        except OSError as exc:
            return self._infra(f"sandbox setup: {exc}")
        try:
            cap = run_capped(cmd, cwd=held.workdir, env=dict(SANDBOX_ENV, HOME=held.workdir)
                             if not self.host.bwrap else dict(SANDBOX_ENV),
                             stdin=stdin, timeout_s=limits.timeout_s,
                             output_bytes=limits.output_bytes,
                             pass_fds=(held.w_fd,) if held.w_fd is not None else (),
                             kill_tree=held.group.kill_all if held.group else (lambda: None),
                             started=held.close_write_end)
        except OSError as exc:
            return self._infra(f"sandbox start: {exc}")
        return self._result(cap, held, collect, limits)

    def _fill_workspace(self, workdir: str, files: Mapping[str, str | bytes],
                        base: BaseTree | None) -> list[str]:
        """Writes `files` into the workspace and puts the base tree under them: bound in
        read-only file by file under bubblewrap (its bind arguments are returned), else copied."""
        write_files(workdir, files)
        if base is not None and self.host.bwrap:
            return _base_binds(workdir, base, files, self.mount)
        if base is not None:  # no mount namespace of our own: a copy
            names = {check_relpath(k) for k in files}
            write_files(workdir, base.read(skip=names))
        return []

    def _launcher(self, held: _Held, argv: Sequence[str], limits: Limits,
                  over: Sequence[str]) -> list[str]:
        """The full command line of the execution, with what it runs as: an unused uid that
        owns the workspace (as root), its own cgroups, bubblewrap's status pipe."""
        uid = None
        if self.host.setpriv:
            uid = 2_000_000 + secrets.randbelow(1_000_000_000)
            give_to(held.workdir, uid)
        if self.host.memory_cgroup or self.host.pids_cgroup:
            held.group = ExecGroup(limits.memory_mb if self.host.memory_cgroup else None,
                                   limits.pids + _LAUNCHER_PROCS if self.host.pids_cgroup
                                   else None)
        if self.host.bwrap:
            held.r_fd, held.w_fd = os.pipe()
        return self._wrap(self._command(argv), limits, held.workdir, uid, held.group, held.w_fd,
                          over)

    def _result(self, cap: Captured, held: _Held, collect: Sequence[str],
                limits: Limits) -> ExecResult:
        """The record of a finished run: infra_error when the sandbox itself did not start,
        else the program's verdict, exit code, memory peak and collected files."""
        group = held.group
        status_lines = _read_status(held.r_fd) if held.r_fd is not None else None
        if cap.returncode == 125 and "rollforge-launch:" in cap.stderr:
            return self._infra(cap.stderr.strip()[-300:], cap.duration_s)
        if status_lines is not None and not any("child-pid" in s for s in status_lines) \
                and not cap.timed_out:
            return self._infra(f"bwrap could not start the sandbox: {cap.stderr.strip()[-300:]}",
                               cap.duration_s)
        code = cap.returncode
        for s in status_lines or ():
            if "exit-code" in s:
                code = s["exit-code"]
        # The program ran: what fails from here on reads what it left, which it controls,
        # so it is the execution's own result, never infra_error (nor an exception).
        try:
            status = verdict(timed_out=cap.timed_out,
                             oom=group.oom_killed() if group else False,
                             overflow=cap.overflow, exit_code=code, stderr=cap.stderr)
            got = collect_files(held.workdir, collect, limits.output_bytes)
            return ExecResult(got.verdict(status), code, cap.stdout, cap.stderr,
                              cap.duration_s, self.name,
                              peak_memory_mb=group.peak_mb() if group else None,
                              error=got.error, files=got.files)
        except Exception as exc:  # noqa: BLE001 -- whatever it is, the program caused it
            return ExecResult("failed", code, cap.stdout, cap.stderr, cap.duration_s,
                              self.name, error=f"after the run: {type(exc).__name__}: "
                                               f"{str(exc)[:300]}")

    def close(self) -> None:
        if self.fork_server is not None:
            self.fork_server.close()


@dataclass
class _Held:
    """What one fresh execution holds until it is over: its workspace, its cgroups and the pipe
    bubblewrap writes its status lines to."""

    workdir: str | None = None
    group: ExecGroup | None = None
    r_fd: int | None = None
    w_fd: int | None = None

    def close_write_end(self) -> None:
        """Once the launcher is started it holds the write end; ours goes."""
        if self.w_fd is not None:
            os.close(self.w_fd)
            self.w_fd = None

    def release(self) -> None:
        for fd in (self.r_fd, self.w_fd):
            if fd is not None:
                os.close(fd)
        if self.group is not None:
            self.group.kill_all()
        if self.workdir is not None:  # before the group goes: its tmpfs pages are charged there
            remove_tree(self.workdir)
        if self.group is not None:
            self.group.remove()


def _base_binds(workdir: str, base: BaseTree, files: Mapping[str, object],
                mount: str) -> list[str]:
    """The workspace's side of a base tree: its folders made here (so they are the run's own,
    writable, like a copy's) with an empty placeholder where each base file goes, and
    bubblewrap's arguments that bind each file there read-only. A file of `files` takes its
    base file's place. Costs a mkdir per folder and a create per file, never their bytes."""
    mine = {check_relpath(k) for k in files}
    args: list[str] = []
    made: set[str] = set()
    for rel in base.paths:
        rel = check_relpath(rel)
        if rel in mine:
            continue
        parent = os.path.dirname(rel)
        if parent and parent not in made:
            os.makedirs(os.path.join(workdir, parent), exist_ok=True)
            made.add(parent)
        os.close(os.open(os.path.join(workdir, rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        args += ["--ro-bind", os.path.join(base.root, rel), os.path.join(mount, rel)]
    return args


def _read_status(fd: int) -> list[dict]:
    os.set_blocking(fd, False)
    chunks = []
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    except BlockingIOError:
        pass
    out = []
    for line in b"".join(chunks).decode(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out
