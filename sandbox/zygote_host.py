"""One zygote seen from the host: its process, its channel, and one execution's pipes.

The zygote (`sandbox/zygote.py`) runs inside the process sandbox's bubblewrap boundary with the
workspace folder `ws` of its spool directory bound at the workspace mount point, in a home cgroup
of its own (where its waiting child can be found by host pid). For each execution the host makes
named pipes and a job file in the zygote's private /tmp (through `/proc/<pid>/root`), holds the
pipes' other ends and does the capture itself, with the same caps and wall clock as a plain run
(`sandbox/capture.py`): the execution's data never passes through the zygote.
"""
from __future__ import annotations

import json
import os
import secrets
import select
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from sandbox.cgroups import LAUNCH, ExecGroup, RecycledGroup
from sandbox.workspace import SANDBOX_ENV, remove_tree

if TYPE_CHECKING:
    from sandbox.process import ProcessSandbox

_HERE = Path(__file__).parent
ZYGOTE_SOURCE = ((_HERE / "zygote_run.py").read_text() + "\n" + (_HERE / "zygote.py").read_text()
                 + '\nif __name__ == "__main__":\n    _config = json.loads(sys.argv[1])\n'
                 '    _run(_serve(_config), _config["mount"])\n')
_CAPS = ("--as-pid-1", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
         "--cap-add", "CAP_KILL", "--cap-add", "CAP_SETPCAP")
START_S = 60.0  # a zygote must be ready within this (machines under load start slowly)
WAIT_S = 10.0  # a zygote that does not fork, read or answer a kill within this is dead
_HOME_PIDS = 16  # the zygote, the outer bubblewrap and one waiting child
SPOOL_PREFIX = "rf-zyg-"  # + the host pid: a spool whose process is gone can be swept


class ZygoteError(Exception):
    """The zygote died, hung or broke the protocol: replace it and retry the execution."""


@dataclass
class Outcome:
    """How one execution ended, as seen from the host."""

    answer: dict  # the zygote's: exit, signal, setup, killed, duration_s, taint
    stdout: bytes
    stderr: bytes
    timed_out: bool  # the wall clock ran out while it ran, and it was killed for it
    overflow: bool  # more output than the cap arrived
    killed: bool  # the host stopped it (wall clock or output cap) while it still ran


class Zygote:
    """One zygote process, its spool folder and its home cgroup; one execution at a time.

    Raises OSError when the spool folder cannot be made, ZygoteError when it cannot start.
    """

    def __init__(self, sbx: ProcessSandbox, flags: tuple[str, ...], base: str,
                 preload: tuple[str, ...]) -> None:
        self.flags, self.base = flags, base
        self.key: tuple = (flags, base, ())  # the fork server's key, set by the server
        self.healthy = True
        self.proc: subprocess.Popen | None = None
        self.home: ExecGroup | None = None
        self.groups = RecycledGroup()  # its executions' cgroups, recycled from one to the next
        self.pid = -1
        self.spawned = False  # its next child is forked and waits for a job
        self.remembered: set[bytes] = set()  # digests of the scripts it keeps compiled
        self.tmp_scaffold: frozenset[str] = frozenset()
        self._buf = b""
        self.spool = tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-", dir=base)
        self.ws = os.path.join(self.spool, "ws")
        try:
            os.mkdir(self.ws, 0o700)
            self._start(sbx, preload, ZYGOTE_SOURCE)
        except BaseException:
            self.kill()
            raise

    def _start(self, sbx: ProcessSandbox, preload: tuple[str, ...], source: str) -> None:
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
                "-c", source, json.dumps(config)]
            if self.home is not None:
                cmd = ["/bin/sh", "-c", LAUNCH, "rollforge-launch", *self.home.procs_files(),
                       "--", *cmd]
            with open(os.path.join(self.spool, "zygote.log"), "wb") as log_fh:
                self.proc = subprocess.Popen(
                    cmd, cwd=self.spool, env=dict(SANDBOX_ENV), stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=log_fh, pass_fds=(w_fd,),
                    start_new_session=True)
            os.close(w_fd)
            w_fd = -1
            deadline = time.monotonic() + START_S
            pid = _child_pid(r_fd, deadline)
            if pid is None:
                raise ZygoteError(f"bubblewrap did not start the zygote: {self.log_tail()}")
            self.pid = pid
            ready = self.recv(deadline)
            if ready.get("ready") is not True:
                raise ZygoteError(f"zygote said {str(ready)[:200]} instead of ready")
            # What its private /tmp holds before any execution: bubblewrap's mount points for
            # paths under /tmp (a checkout or venv there), root's, left alone by clean().
            self.tmp_scaffold = frozenset(os.listdir(f"/proc/{pid}/root/tmp"))
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

    def _feed(self) -> None:
        """Read what the zygote has sent; ZygoteError once it is gone."""
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            raise ZygoteError(f"zygote is gone: {self.log_tail()}")
        self._buf += chunk

    def _line(self) -> dict | None:
        if b"\n" not in self._buf:
            return None
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except ValueError:
            raise ZygoteError(f"zygote sent a line that is not JSON: {line[:200]!r}") from None
        if not isinstance(msg, dict):
            raise ZygoteError(f"zygote sent {str(msg)[:200]} instead of an object")
        return msg

    def recv(self, deadline: float) -> dict:
        while True:
            msg = self._line()
            if msg is not None:
                return msg
            if not _wait(self.proc.stdout.fileno(), select.POLLIN, deadline):
                raise ZygoteError("zygote did not answer in time")
            self._feed()

    def wait_spawned(self) -> None:
        """Until the zygote says its next child is forked (it forks after each result)."""
        if not self.spawned:
            msg = self.recv(time.monotonic() + WAIT_S)
            if type(msg.get("spawned")) is not int:
                raise ZygoteError(f"expected the zygote's next child, got {str(msg)[:300]}")
            self.spawned = True

    def child_host_pid(self) -> int:
        """The host pid of the zygote's child that waits to be moved into its cgroup."""
        others = set(self.home.pids()) - {self.proc.pid, self.pid}
        if len(others) != 1:
            raise ZygoteError(f"expected one child in the zygote's group, found {sorted(others)}")
        return others.pop()

    # -- one execution --------------------------------------------------------------------
    def execute(self, request: dict, job: dict, stdin: bytes | None, timeout_s: float,
                cap: int, kill_tree: Callable[[], None]) -> Outcome:
        """Hand `job` to the waiting child through the zygote's /tmp, capture its output with
        `cap` bytes per stream, stop it at `timeout_s`; return how it ended."""
        name = "rf-" + secrets.token_hex(8)
        base = f"/proc/{self.pid}/root/tmp/{name}"
        fds: dict[str, int] = {}
        try:
            try:
                for kind in fds_kinds(stdin):
                    os.mkfifo(f"{base}-{kind}", 0o600)
                with open(os.open(f"{base}-job", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600),
                          "wb") as fh:  # one write, not json.dump's many
                    fh.write(json.dumps(dict(job, stdin=stdin is not None)).encode())
                # Read-write, all three: opening never waits for the other end, and a read
                # finds no end of file before the child opens its end (it says "no data").
                for kind in fds_kinds(stdin):
                    fds[kind] = os.open(f"{base}-{kind}", os.O_RDWR | os.O_NONBLOCK)
            except OSError as exc:
                raise ZygoteError(f"cannot make the execution's pipes: {exc}") from None
            self.spawned = False
            self.send(dict(request, job=name, deadline_s=timeout_s + WAIT_S,
                           notify_start=stdin is not None), time.monotonic() + WAIT_S)
            return self._capture(request["id"], fds, stdin, timeout_s, cap, kill_tree)
        finally:
            for fd in fds.values():
                os.close(fd)

    def _capture(self, rid: int, fds: dict[str, int], stdin: bytes | None, timeout_s: float,
                 cap: int, kill_tree: Callable[[], None]) -> Outcome:
        chan = self.proc.stdout.fileno()

        def kill() -> None:  # the plain path's stop(): the whole tree, at once
            kill_tree()
            self.send({"op": "kill", "id": rid}, time.monotonic() + WAIT_S)

        run = _Running(fds, stdin, cap, kill)
        poller = select.poll()
        for fd in run.bufs:
            poller.register(fd, select.POLLIN)
        poller.register(chan, select.POLLIN)
        if run.in_fd is not None:
            poller.register(run.in_fd, select.POLLOUT)
        deadline = time.monotonic() + timeout_s

        def answer_or_none() -> dict | None:
            while True:
                msg = self._line()
                if msg is None or msg.get("started") is not True:
                    return msg
                run.started = True  # the child has its end of stdin: ours may close

        answer = answer_or_none()
        while answer is None:
            now = time.monotonic()
            if now >= deadline and not run.stopped:
                run.timed_out = True
                run.stop()
            wait = (deadline if not run.stopped else deadline + WAIT_S) - now
            if wait <= 0:
                raise ZygoteError("zygote did not answer after the execution was stopped")
            for fd, _ in poller.poll(wait * 1000):
                if fd == chan:
                    self._feed()
                elif fd == run.in_fd:
                    run.write_stdin(poller)
                else:
                    run.take(fd)
            answer = answer_or_none()
            if run.in_fd is not None and run.started and not len(run.pending):
                os.close(fds.pop("in"))  # all written: the child reads to end of file
                run.in_fd = None
        run.ended = True
        for fd in run.sizes:  # every writer is dead: what is left in the pipes is all there is
            while run.take(fd):
                pass
        return Outcome(answer, bytes(run.bufs[fds["out"]]), bytes(run.bufs[fds["err"]]),
                       run.timed_out, run.overflow, run.stopped)

    # -- between executions ---------------------------------------------------------------
    def clean(self) -> bool:
        """Empty the workspace and the zygote's /tmp; False if something could not be removed."""
        ok = empty_dir(self.ws)
        try:
            os.chown(self.ws, 0, 0)
            os.chmod(self.ws, 0o700)
        except OSError:
            ok = False
        return empty_dir(f"/proc/{self.pid}/root/tmp", keep=self.tmp_scaffold) and ok

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
        self.groups.drop()
        remove_tree(self.spool)


class _Running:
    """The host's side of one running execution's pipes: stdout and stderr read into buffers
    of at most `cap` bytes each (what comes past the cap is counted, not kept, and stops the
    execution), stdin written from `stdin`; and how it ended, as far as the host knows."""

    def __init__(self, fds: dict[str, int], stdin: bytes | None, cap: int,
                 kill: Callable[[], None]) -> None:
        self.bufs = {fds["out"]: bytearray(), fds["err"]: bytearray()}
        self.sizes = dict.fromkeys(self.bufs, 0)
        self.cap, self.kill = cap, kill
        self.pending = memoryview(stdin) if stdin is not None else None  # stdin not yet written
        self.in_fd = fds.get("in")
        self.overflow = self.stopped = self.timed_out = self.ended = self.started = False

    def stop(self) -> None:
        if not self.stopped and not self.ended:
            self.stopped = True
            self.kill()

    def take(self, fd: int) -> bool:
        """Read what is there; False when nothing is (our own end keeps it open)."""
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return False
        if not chunk:
            return False
        room = self.cap - self.sizes[fd]
        if room > 0:
            self.bufs[fd] += chunk[:room]
        self.sizes[fd] += len(chunk)
        if self.sizes[fd] > self.cap:
            self.overflow = True
            self.stop()
        return True

    def write_stdin(self, poller: select.poll) -> None:
        """Write what the pipe takes of the rest of stdin; once all is written (or the child
        closed its end), stop polling for it."""
        try:
            self.pending = self.pending[os.write(self.in_fd, self.pending[:65536]):]
        except BlockingIOError:
            return
        except OSError:
            self.pending = self.pending[:0]
        if not len(self.pending):
            poller.unregister(self.in_fd)


def sweep_spools(base: str) -> None:
    """Remove the spool folders of host processes that are gone (killed before they could)."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        owner = name[len(SPOOL_PREFIX):].split("-", 1)[0]
        if name.startswith(SPOOL_PREFIX) and owner.isdigit() and not os.path.exists(
                f"/proc/{owner}"):
            remove_tree(os.path.join(base, name))


def fds_kinds(stdin: bytes | None) -> tuple[str, ...]:
    return ("out", "err") + (("in",) if stdin is not None else ())


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


def empty_dir(path: str, keep: frozenset[str] = frozenset()) -> bool:
    """Remove everything inside `path` but the names in `keep` (links are removed, never
    followed)."""
    ok = True
    try:
        names = os.listdir(path)
    except OSError:
        return False
    for name in names:
        if name in keep:
            continue
        p = os.path.join(path, name)
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                ok = remove_tree(p) and ok
            else:
                os.unlink(p)
        except OSError:
            ok = False
    return ok
