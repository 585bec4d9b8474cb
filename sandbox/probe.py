"""What isolation this host allows, found once when a process sandbox is made.

Each protection is either applied or listed as missing with the reason, so a weaker sandbox
(a laptop without root or bubblewrap) says so instead of silently protecting less.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

from sandbox import cgroups

# Every protection the process backend knows, in the order the docs list them.
ALL_PROTECTIONS = (
    "namespaces",      # fresh pid, net, mount, ipc, uts namespaces per execution
    "readonly_root",   # only the interpreter and system libraries visible, read-only
    "private_tmp",     # a private, size-capped /tmp
    "memory_cgroup",   # memory (+swap) of the whole execution capped; peak and OOM reported
    "pids_cgroup",     # process/thread count of the whole execution capped
    "private_uid",     # runs as an otherwise unused uid: no access to the caller's files
    "rlimits",         # file size, core dumps, open files (+ address space/nproc as fallbacks)
    "kill_tree",       # the whole process tree is killed at the limit and after exit
    "output_cap",      # captured stdout/stderr capped; the run is stopped past the cap
)


def _works(argv: list[str]) -> str | None:
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if proc.returncode != 0:
        return proc.stderr.decode(errors="replace").strip()[-200:] or f"exit {proc.returncode}"
    return None


@dataclass(frozen=True)
class HostSupport:
    bwrap: str | None  # path of a working bubblewrap
    unshare: str | None  # path of a working `unshare` (fallback for namespaces)
    setpriv: str | None  # path of setpriv, when we are root and can drop to another uid
    prlimit: str | None
    memory_cgroup: bool
    pids_cgroup: bool
    missing: dict[str, str] = field(default_factory=dict)  # protection -> why it is missing

    @property
    def applied(self) -> tuple[str, ...]:
        return tuple(p for p in ALL_PROTECTIONS if p not in self.missing)


def probe(use_bwrap: bool = True, use_cgroups: bool = True) -> HostSupport:
    missing: dict[str, str] = {}
    root = os.geteuid() == 0
    bwrap = shutil.which("bwrap") if use_bwrap else None
    if bwrap:
        trial = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                 "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"]
        if not root:
            trial[1:1] = ["--unshare-user"]
        why = _works(trial)
        if why:
            missing["readonly_root"] = f"bubblewrap does not work here: {why}"
            bwrap = None
    else:
        missing["readonly_root"] = ("bubblewrap disabled by config" if not use_bwrap
                                    else "bubblewrap (bwrap) is not installed")
    if not bwrap:
        missing["private_tmp"] = "needs bubblewrap"
    unshare = None
    if not bwrap:
        unshare = shutil.which("unshare")
        if unshare:
            trial = [unshare, "--pid", "--fork", "--kill-child", "--net", "--ipc", "--uts",
                     "--mount", "--mount-proc", "true"]
            if not root:
                trial[1:1] = ["--map-root-user"]
            if _works(trial):
                unshare = None
        if not unshare:
            missing["namespaces"] = "neither bubblewrap nor unshare can create namespaces here"
    setpriv = shutil.which("setpriv") if root else None
    if not setpriv:
        missing["private_uid"] = ("not root: cannot switch to an unused uid" if not root
                                  else "setpriv is not installed")
    mem_why = cgroups.writable("memory") if use_cgroups else "cgroups disabled by config"
    pids_why = cgroups.writable("pids") if use_cgroups else "cgroups disabled by config"
    if mem_why:
        missing["memory_cgroup"] = f"{mem_why}; using a per-process address-space rlimit"
    if pids_why:
        missing["pids_cgroup"] = (f"{pids_why}; using RLIMIT_NPROC of the private uid" if setpriv
                                  else f"{pids_why}; no private uid, so no process limit")
    prlimit = shutil.which("prlimit")
    if not prlimit:
        missing["rlimits"] = "prlimit (util-linux) is not installed"
    return HostSupport(bwrap, unshare, setpriv, prlimit, mem_why is None, pids_why is None,
                       missing)


def note_kill_tree(host: HostSupport) -> HostSupport:
    """Without a pid namespace or a pids cgroup only the process group can be killed."""
    if host.bwrap or host.unshare or host.pids_cgroup or host.memory_cgroup:
        return host
    missing = dict(host.missing)
    missing["kill_tree"] = "no pid namespace or cgroup: a child that calls setsid() can survive"
    return HostSupport(host.bwrap, host.unshare, host.setpriv, host.prlimit, host.memory_cgroup,
                       host.pids_cgroup, missing)
