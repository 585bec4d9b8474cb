"""The zygote: a warm interpreter inside the process sandbox that forks one child per execution.

`sandbox/zygote_host.py` starts it as `python -I -B [-S ...] -c <source> <config>`, the source
being `sandbox/zygote_run.py` and this file, inside the same bubblewrap boundary a plain execution
gets (fresh pid/net/mount/ipc/uts namespaces, read-only root, private /tmp, the workspace at its
mount point), as pid 1 of its pid namespace, uid 0 holding only CAP_SETUID, CAP_SETGID and
CAP_KILL (bounding set included), with no_new_privs. It imports the graders' modules once.

Each execution's child is forked ahead of its request (so that the host can move it into the
execution's cgroups before it runs anything, and the fork is off the request's path). It waits
for the name of its job; then, still uid 0, it reads the job (argv, uid, rlimits) from a file the
host put in the sandbox's /tmp, opens as stdin/stdout/stderr the named pipes the host made there
(the host holds the other ends: capture, caps and the wall clock stay outside the sandbox, as for
a plain execution), removes them, sets its rlimits, drops to the execution's unused uid (which
clears every capability) and runs the program (`sandbox/zygote_run.py`).

The zygote itself never holds an execution's data (its code, input or output): a later child,
a copy of the zygote's memory, finds none of it there. It never runs requested code, installs no
signal handler and no audit hook and starts no thread, so a child starts from a clean interpreter.
Threat model: the code runs as a uid of its own, so it can neither signal nor ptrace the zygote
(uid 0, and pid 1, which its namespace cannot signal) nor read its descriptors. After each
execution the zygote kills every other process of its namespace (`kill(-1)`) and reports state it
cannot reset that the next execution could see (System V IPC objects, sockets, TIME_WAIT
included): the host then retires it. The host empties the workspace and /tmp.

Standard library only, and never `ctypes` or `socket`: a forked child inherits every loaded
module, and the harness's guard (`rewards/guard.py`) flags those imports through an audit hook,
which does not fire for a module that is already loaded.

Protocol, one JSON object per line; requests on the zygote's stdin, answers on its stdout (moved
to other descriptors at start; 0, 1 and 2 are then /dev/null):
  zygote -> {"ready": true, "modules": N, "extra_vm": bytes}      once, at start
  zygote -> {"spawned": pid}                    the next child waits (after start, each result)
  host   -> {"op": "run", "id", "job": name, "deadline_s": s, "notify_start": bool, "script",
             "remember": b64|null}
  zygote -> {"id", "started": true}             with notify_start: its pipes are open
  host   -> {"op": "kill", "id"}                optional: wall clock or output cap reached
  zygote -> {"id", "exit": code|null, "signal": n|null, "setup": "ok"|why, "killed": bool,
             "duration_s", "taint": [reason, ...]}
`job` names /tmp/<job>-job (JSON: argv, orig_argv, uid, rlimits, stdin: bool) and the named
pipes /tmp/<job>-out, -err and, with stdin, -in. `deadline_s` is a backstop in case the host
stops answering. `remember`: the script's bytes, to compile after the result is sent. Anything
else from the host ends the zygote.
"""
import os


def _vm_bytes():
    """This process's address-space size (what RLIMIT_AS limits)."""
    with open("/proc/self/status", "rb") as fh:
        for line in fh:
            if line.startswith(b"VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


_VM_FRESH = _vm_bytes()  # before any import of ours: what a fresh interpreter holds

import binascii  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

try:  # in the repository; in the sandbox this file follows zygote_run.py in one source
    from sandbox.zygote_run import remember
except ImportError:
    pass

_IPC_FILES = ("/proc/sysvipc/shm", "/proc/sysvipc/msg", "/proc/sysvipc/sem")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
_EXTRA_VM = [0]  # address space the zygote holds beyond a fresh interpreter


class _Channel:
    """Lines of JSON over two pipes."""

    def __init__(self, rfd, wfd):
        self.rfd, self.wfd, self.buf = rfd, wfd, b""

    def pending(self):
        return b"\n" in self.buf

    def recv(self):
        """The next message; None once the host has closed the pipe."""
        while b"\n" not in self.buf:
            chunk = os.read(self.rfd, 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def send(self, obj):
        view = memoryview((json.dumps(obj) + "\n").encode())
        while view:
            view = view[os.write(self.wfd, view):]


def _reap(pid, box):
    """Reap every exited child (orphans come to pid 1); `box` gets `pid`'s wait status."""
    while True:
        try:
            got, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if got == 0:
            return
        if got == pid:
            box.append(status)


def _kill_all(pid, box, wait_s=5.0):
    """SIGKILL every process of the namespace but this one, until none is left (or wait_s)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _reap(pid, box)
        if not [p for p in os.listdir("/proc") if p.isdigit() and p != "1"]:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)


def _read(path, size=4096):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        return os.read(fd, size)
    finally:
        os.close(fd)


def _taint():
    """State an execution left in the shared namespaces that the next one could see: System V
    IPC objects (they outlive their creator) and sockets, TIME_WAIT included (counted per
    network namespace in sockstat; the per-socket tables walk every namespace's and are slow)."""
    out = [path for path in _IPC_FILES if _read(path).count(b"\n") > 1]
    words = _read("/proc/net/sockstat").split()
    for label, key in ((b"sockets:", b"used"), (b"TCP:", b"inuse"), (b"TCP:", b"tw")):
        try:
            at = words.index(label)
            count = int(words[words.index(key, at) + 1])
        except (ValueError, IndexError):
            continue
        if count:
            out.append("%s %s %d" % (label.decode(), key.decode(), count))
    return out


def _become_child(go_r, st_w, mount):
    """In the fork: wait for the job, take its pipes, drop privileges; return the job. A closed
    go pipe (the zygote is going away) ends the child; a failed set-up is reported on st_w."""
    try:
        os.setsid()
        os.dup2(go_r, 3)
        os.dup2(st_w, 4)
        os.closerange(5, 1 << 16)  # the zygote's channel and every other descriptor
        name = b""
        while True:
            chunk = os.read(3, 256)
            if not chunk:
                break
            name += chunk
        if not name:
            os._exit(0)
        os.close(3)
        name = name.decode()
        if not set(name) <= _NAME_CHARS:
            raise ValueError("bad job name %r" % name)
        base = "/tmp/" + name
        job = json.loads(_read(base + "-job", 1 << 24))
        stdin = base + "-in" if job["stdin"] else os.devnull
        for fd, path, flags in ((0, stdin, os.O_RDONLY), (1, base + "-out", os.O_WRONLY),
                                (2, base + "-err", os.O_WRONLY)):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        for suffix in ("-job", "-in", "-out", "-err"):
            try:
                os.unlink(base + suffix)
            except FileNotFoundError:
                pass
        for key, value in job["rlimits"].items():
            if key == "RLIMIT_AS":  # what the zygote holds beyond a fresh interpreter is free
                value += _EXTRA_VM[0]
            resource.setrlimit(getattr(resource, key), (value, value))
        uid = job["uid"]
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # from uid 0 to another: every capability is cleared
        if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid):
            raise OSError("the uid did not change")
        os.chdir(mount)
        os.write(4, b"+")
        os.close(4)
        return job
    except BaseException as exc:
        try:
            os.write(4, ("%s: %s" % (type(exc).__name__, exc)).encode()[:500])
        finally:
            os._exit(125)


class _Child:
    """The next execution's child, forked ahead of its request, waiting for its job's name."""

    spawned = 0

    def __init__(self, mount):
        _Child.spawned += 1
        if _Child.spawned % 256 == 0:  # frozen garbage is never collected: now and then, do
            gc.unfreeze()
            gc.collect()
        gc.freeze()  # its collections then leave the zygote's objects (and pages) alone
        go_r, self.go_w = os.pipe()
        self.st_r, st_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            self.job = _become_child(go_r, st_w, mount)
            return
        self.job = None
        self.st_data = b""
        os.close(go_r)
        os.close(st_w)
        os.set_blocking(self.st_r, False)

    def start(self, name):
        try:
            os.write(self.go_w, name.encode())
        except OSError:
            pass  # it is gone: its exit status says so
        os.close(self.go_w)

    def report(self):
        """Read the child's set-up report as far as it is there; True once it is complete."""
        try:
            while True:
                chunk = os.read(self.st_r, 4096)
                if not chunk:
                    return True
                self.st_data += chunk
        except BlockingIOError:
            return False

    def setup(self):
        """"ok" once it ran the program, else why its set-up failed."""
        self.report()
        os.close(self.st_r)
        data = self.st_data
        return "ok" if data == b"+" else (data.decode("utf-8", "replace") or "no report")


def _supervise(chan, child, req):
    """Run the child's job to its end (or the host's kill) and answer with how it ended."""
    rid = req["id"]
    child.start(req["job"])
    start = time.monotonic()
    deadline = start + req["deadline_s"]
    box = []
    pidfd = os.pidfd_open(child.pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(chan.rfd, select.POLLIN)
    if req.get("notify_start"):  # (else its report is read at the end: one wake-up less)
        poller.register(child.st_r, select.POLLIN)
    killed = exited = False
    while not exited:
        left = deadline - time.monotonic()
        if left <= 0 and not killed:
            killed = True
            _kill_all(child.pid, box, 0.5)
        # A short tick: orphans of the execution come to pid 1 and must be reaped promptly.
        ready = [fd for fd, _ in poller.poll(min(max(left, 0), 0.05) * 1000)]
        _reap(child.pid, box)
        exited = bool(box) or pidfd in ready
        if child.st_r in ready:  # "+" once set up (its stdin, stdout, stderr are open)
            complete = child.report()
            if complete or child.st_data == b"+":
                poller.unregister(child.st_r)
                if child.st_data == b"+" and req.get("notify_start"):
                    chan.send({"id": rid, "started": True})
        if chan.rfd in ready or chan.pending():
            msg = chan.recv()
            if msg is None:
                os._exit(0)  # the host is gone: pid 1 exiting takes the namespace along
            if msg.get("op") != "kill" or msg.get("id") != rid:
                raise ValueError("expected kill %r, got %r" % (rid, msg))
            if not exited and not killed:  # "killed": it was still running
                killed = True
                _kill_all(child.pid, box, 0.5)
    duration = time.monotonic() - start
    os.close(pidfd)
    clean = _kill_all(child.pid, box)
    if not box:
        try:  # only a process stuck in the kernel can still hold it
            box.append(os.waitpid(child.pid, 0)[1])
        except ChildProcessError:
            pass
    status = box[0] if box else None
    chan.send({"id": rid, "exit": os.WEXITSTATUS(status) if status is not None
               and os.WIFEXITED(status) else None,
               "signal": os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status)
               else None,
               "setup": child.setup(), "killed": killed, "duration_s": duration,
               "taint": _taint() if clean else ["a process of the execution did not die"]})


def _serve(config):
    """Answer requests until the host closes stdin; returns only in a forked child."""
    mount = config["mount"]
    chan = _Channel(os.dup(0), os.dup(1))
    log = os.dup(2)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    for name in config["preload"]:
        try:
            __import__(name)
        except Exception:  # the run imports it itself and meets the error there, as it would
            pass
    # Imports load bytecode without compiling: the compiler's first use would set up its state
    # in every child, again and again (about 2 ms each). Use it once here, on our own text.
    exec(compile("def _warm(x):\n    return [x for _ in ()]\n", "<warm-up>", "exec"), {})
    _EXTRA_VM[0] = max(0, _vm_bytes() - _VM_FRESH)
    chan.send({"ready": True, "modules": len(sys.modules), "extra_vm": _EXTRA_VM[0]})
    try:
        while True:
            child = _Child(mount)
            if child.job is not None:
                return child.job
            chan.send({"spawned": child.pid})
            req = chan.recv()
            while req is not None and req.get("op") == "kill":
                req = chan.recv()  # late: its execution had already ended
            if req is None:
                os._exit(0)
            if req.get("op") != "run":
                raise ValueError("expected run, got %r" % (req,))
            _supervise(chan, child, req)
            if req.get("remember"):
                remember(req["script"], binascii.a2b_base64(req["remember"]), mount)
    except BaseException as exc:  # a bad request or a broken channel: the host replaces us
        os.write(log, ("zygote failed: %s: %s\n" % (type(exc).__name__, exc)).encode())
        os._exit(70)
