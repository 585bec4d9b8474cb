"""The zygote: a warm interpreter inside the process sandbox that forks one child per execution.

`sandbox/fork_server.py` starts it as `python -I -B [-S ...] -c <this file's source> <config>`
inside the same bubblewrap boundary a plain execution gets (fresh pid/net/mount/ipc/uts
namespaces, read-only root, private /tmp, the workspace at its mount point), as pid 1 of its pid
namespace, uid 0 holding only CAP_SETUID, CAP_SETGID and CAP_KILL (bounding set included), with
no_new_privs. It imports the graders' modules once; each execution is a fork of it.

The child of one execution is forked ahead of its request (so the host can move it into the
execution's cgroups before it runs anything, and the fork is off the request's path): a new
session, its own pipes as fds 0, 1, 2 and no other descriptor; it waits for its job; then its
rlimits; then it drops to the execution's unused uid (which clears every capability), changes to
the workspace and runs the program in the forked interpreter, as `python script.py` or `python
-c code` would, and exits as the interpreter does. The zygote never runs requested code itself,
installs no signal handler and no audit hook and starts no thread, so a child starts from a clean
interpreter; whatever the child does dies with it.

Threat model: the code runs as a uid of its own, so it can neither signal nor ptrace the zygote
(uid 0, and pid 1, which its namespace cannot signal), nor read its descriptors. After each
execution the zygote kills every other process of its namespace (`kill(-1)`) and reports state
that could reach the next execution and that it cannot reset (System V IPC objects, sockets in
TIME_WAIT); the host then retires it. The host empties the workspace and /tmp.

Standard library only, and never `ctypes` or `socket`: a forked child inherits every loaded
module, and the harness's guard (`rewards/guard.py`) flags those imports through an audit hook,
which does not fire for a module that is already loaded.

Protocol, one JSON object per line; requests on the zygote's stdin, answers on its stdout (moved
to other descriptors at start; 0, 1 and 2 are then /dev/null):
  zygote -> {"ready": true, "modules": N}        once, at start, its first child waiting
  host   -> {"op": "run", "id", "argv", "orig_argv", "uid", "stdin": b64|null, "timeout_s",
             "output_bytes", "rlimits": {"RLIMIT_FSIZE": n, ...}, "remember": b64|null}
  zygote -> {"id", "exit": code|null, "signal": n|null, "timed_out", "overflow", "killed",
             "duration_s", "stdout": b64, "stderr": b64, "taint": [reason, ...]}
  zygote -> {"spawned": pid}                     the next child waits
`argv` is the program's own: ["main.py", args...] or ["-c", code, args...]. `remember`: the
script's source, to compile once the result is sent, for later children to reuse when their file
holds exactly these bytes. Anything else from the host ends the zygote.
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

_MARK = b"rollforge-zygote: "  # prefix of a child's set-up failure on its stderr (exit 125)
_IPC_FILES = ("/proc/sysvipc/shm", "/proc/sysvipc/msg", "/proc/sysvipc/sem")


class _Channel:
    """Lines of JSON over two pipes."""

    def __init__(self, rfd, wfd):
        self.rfd, self.wfd, self.buf = rfd, wfd, b""

    def recv(self):
        while b"\n" not in self.buf:
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def send(self, obj):
        view = memoryview((json.dumps(obj) + "\n").encode())
        while view:
            view = view[os.write(self.wfd, view):]


def _b64(data):
    return binascii.b2a_base64(bytes(data), newline=False).decode()


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


def _others():
    return [p for p in os.listdir("/proc") if p.isdigit() and p != "1"]


def _kill_all(pid, box, wait_s=5.0):
    """SIGKILL every process of the namespace but this one, until none is left (or wait_s)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _reap(pid, box)
        if not _others():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)


def _read(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        return os.read(fd, 4096)
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


def _become_child(fds, mount):
    """In the fork: wait for the job, isolate, drop privileges; return the job. A closed job
    pipe (the zygote is going away) ends the child; a failure of the set-up exits with 125."""
    in_r, out_w, err_w, job_r = fds
    try:
        os.setsid()
        for fd, to in ((in_r, 0), (out_w, 1), (err_w, 2), (job_r, 3)):
            os.dup2(fd, to)
        os.closerange(4, 1 << 16)  # the zygote's channel and every other pipe
        data = b""
        while True:
            chunk = os.read(3, 1 << 20)
            if not chunk:
                break
            data += chunk
        if not data:
            os._exit(0)
        os.close(3)
        job = json.loads(data)
        if job["stdin"] is None:
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
        for name, value in job["rlimits"].items():
            if name == "RLIMIT_AS":  # what the zygote holds beyond a fresh interpreter is free
                value += _EXTRA_VM[0]
            resource.setrlimit(getattr(resource, name), (value, value))
        uid = job["uid"]
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # from uid 0 to another: every capability is cleared
        if os.getuid() != uid or os.geteuid() != uid:
            raise OSError("uid did not change")
        os.chdir(mount)
        return job
    except BaseException as exc:
        try:
            os.write(2, _MARK + ("child set-up failed: %r\n" % (exc,)).encode())
        finally:
            os._exit(125)


class _Child:
    """The next execution's child, forked ahead of its request, and the zygote's ends of its
    pipes. It waits on its job pipe; the host moves it into the execution's cgroup meanwhile."""

    spawned = 0

    def __init__(self, mount):
        _Child.spawned += 1
        if _Child.spawned % 256 == 0:  # frozen garbage is never collected: now and then, do
            gc.unfreeze()
            gc.collect()
        gc.freeze()  # its collections then leave the zygote's objects (and pages) alone
        in_r, self.in_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        job_r, self.job_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            self.job = _become_child((in_r, out_w, err_w, job_r), mount)
            return
        self.job = None
        for fd in (in_r, out_w, err_w, job_r):
            os.close(fd)

    def start(self, job):
        """Hand the child its job (the request without stdin). False if it is gone."""
        data = json.dumps(dict(job, stdin=None if job["stdin"] is None else "")).encode()
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.job_w, view):]
            return True
        except OSError:
            return False
        finally:
            os.close(self.job_w)


def _capture(pid, fds, stdin, cap, timeout_s):
    """Feed stdin, capture capped stdout/stderr, enforce the wall clock; then kill the rest."""
    out_r, err_r, in_w = fds
    start = time.monotonic()
    deadline = start + timeout_s
    bufs = {out_r: bytearray(), err_r: bytearray()}
    sizes = {out_r: 0, err_r: 0}
    box = []
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    for fd in (out_r, err_r):
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
    pending = memoryview(stdin) if stdin is not None else None
    if in_w is not None:
        os.set_blocking(in_w, False)
        if len(pending):
            poller.register(in_w, select.POLLOUT)
        else:
            os.close(in_w)
            in_w = None
    timed_out = overflow = exited = False

    def take(fd):
        nonlocal overflow
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        room = cap - sizes[fd]
        if room > 0:
            bufs[fd] += chunk[:room]
        sizes[fd] += len(chunk)
        if sizes[fd] > cap:
            overflow = True
        return True

    open_fds = {out_r, err_r}
    while not exited and not overflow:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        # A short tick: orphans of the execution come to pid 1 and must be reaped promptly.
        for fd, ev in poller.poll(min(left, 0.05) * 1000):
            if fd == pidfd:
                exited = True
            elif fd == in_w:
                try:
                    pending = pending[os.write(in_w, pending[:65536]):]
                except BlockingIOError:
                    continue
                except OSError:
                    pending = pending[:0]
                if not len(pending):
                    poller.unregister(in_w)
                    os.close(in_w)
                    in_w = None
            elif fd in open_fds and not take(fd):
                poller.unregister(fd)
                open_fds.discard(fd)
        _reap(pid, box)
        if box:
            exited = True
    duration = time.monotonic() - start
    killed = not exited  # stopped by us (wall clock or output cap) while still running
    clean = _kill_all(pid, box)
    if not box:  # the kill loop reaps everything; only a process stuck in the kernel remains
        try:
            box.append(os.waitpid(pid, 0)[1])
        except ChildProcessError:
            pass
    for fd in list(open_fds):  # every writer is dead: read to end of file
        os.set_blocking(fd, clean)  # (a survivor could hold a pipe open: then what is there)
        while take(fd):
            if not clean and not select.select([fd], [], [], 0)[0]:
                break
    for fd in (pidfd, out_r, err_r) + ((in_w,) if in_w is not None else ()):
        os.close(fd)
    status = box[0] if box else None
    taint = _taint() if clean else ["a process of the execution could not be killed"]
    return {"exit": os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status)
            else None,
            "signal": os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status)
            else None,
            "timed_out": timed_out, "overflow": overflow, "killed": killed,
            "duration_s": duration, "stdout": _b64(bufs[out_r]), "stderr": _b64(bufs[err_r]),
            "taint": taint}


def _execute(chan, req, child):
    """Run `req` in the waiting child and answer with its result."""
    stdin = binascii.a2b_base64(req["stdin"]) if req["stdin"] is not None else None
    if stdin is None:
        os.close(child.in_w)
        child.in_w = None
    if not child.start(req):
        _kill_all(child.pid, [])
        for fd in (child.out_r, child.err_r, child.in_w):
            if fd is not None:
                os.close(fd)
        chan.send({"id": req["id"], "error": "the waiting child was gone"})
        return
    resp = _capture(child.pid, (child.out_r, child.err_r, child.in_w), stdin,
                    req["output_bytes"], req["timeout_s"])
    resp["id"] = req["id"]
    chan.send(resp)
    if req.get("remember"):
        _remember(req["argv"][0], binascii.a2b_base64(req["remember"]))


_CODE = {}  # (file name, source bytes) -> code object, compiled here, inherited by children
_CODE_MAX = 32


def _remember(script, source):
    """Compile a script the host has seen before (a grader's harness, typically), so that the
    children find it compiled. Not if compiling warns: the child's own compile must say so."""
    import warnings

    filename = script if script.startswith("/") else _MOUNT[0] + "/" + script
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            code = compile(source, filename, "exec", dont_inherit=True)
    except Exception:
        return
    if caught:
        return
    _CODE[(filename, source)] = code
    while len(_CODE) > _CODE_MAX:
        del _CODE[next(iter(_CODE))]


_MOUNT = ["/workspace"]
_EXTRA_VM = [0]


def _serve(config):
    """Answer requests until the host closes stdin; returns only in a forked child."""
    _MOUNT[0] = config["mount"]
    chan = _Channel(os.dup(0), os.dup(1))
    log = os.dup(2)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    for name in config["preload"]:
        try:
            __import__(name)
        except ImportError:
            pass
    _EXTRA_VM[0] = max(0, _vm_bytes() - _VM_FRESH)
    hello = {"ready": True, "modules": len(sys.modules), "extra_vm": _EXTRA_VM[0]}
    try:
        while True:
            child = _Child(config["mount"])
            if child.job is not None:
                return child.job
            chan.send(hello)  # first "ready", then "spawned" after each result
            hello = {"spawned": child.pid}
            req = chan.recv()
            if req is None or req.get("op") != "run":
                os._exit(0 if req is None else 71)  # the host replaces a zygote it confused
            _execute(chan, req, child)
    except BaseException as exc:  # a bad request or a broken channel: the host replaces us
        os.write(log, ("zygote failed: %s: %s\n" % (type(exc).__name__, exc)).encode())
        os._exit(70)


def _run(job, mount):
    """In the child: run the program as the interpreter runs `script.py` or `-c code`."""
    import builtins

    argv = job["argv"]
    sys.argv[:] = argv[1:] if argv[0] == "-c" else argv
    if argv[0] == "-c":
        sys.argv[0] = "-c"
    sys.orig_argv[:] = job["orig_argv"]
    main = type(sys)("__main__")
    d = main.__dict__
    d.update(__annotations__={}, __builtins__=builtins)
    if argv[0] == "-c":
        d["__loader__"] = sys.modules["__main__"].__loader__  # the BuiltinImporter, as for -c
        filename, source = "<string>", argv[1]
    else:
        filename = argv[0] if argv[0].startswith("/") else mount + "/" + argv[0]
        loader = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", filename)
        d.update(__file__=filename, __cached__=None, __loader__=loader)
    sys.modules["__main__"] = main
    code = 0
    try:
        if argv[0] != "-c":
            with open(filename, "rb") as fh:
                source = fh.read()
        program = _CODE.get((filename, source)) if argv[0] != "-c" else None
        if program is None:
            program = compile(source, filename, "exec", dont_inherit=True)
        _CODE.clear()
        del argv, job, source, filename
        exec(program, d)
    except SystemExit as exc:  # what the interpreter's handle_system_exit does
        code = _exit_code(exc.code)
    except BaseException as exc:  # what the interpreter's PyErr_Print does, minus this frame
        err = exc.with_traceback(exc.__traceback__.tb_next)
        code = 1
        _print_exception(err)
        if isinstance(err, KeyboardInterrupt):
            code = -signal.SIGINT  # the interpreter then dies by SIGINT
        del err
    _finalize(d, code)


def _exit_code(value):
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    try:
        sys.stderr.write(str(value) + "\n")
    except BaseException:
        pass
    return 1


def _print_exception(err):
    sys.last_type, sys.last_value, sys.last_traceback = type(err), err, err.__traceback__
    try:
        sys.excepthook(type(err), err, err.__traceback__)
    except BaseException as hook_exc:
        sys.stderr.write("Error in sys.excepthook:\n")
        sys.__excepthook__(type(hook_exc), hook_exc, hook_exc.__traceback__)
        sys.stderr.write("\nOriginal exception was:\n")
        sys.__excepthook__(type(err), err, err.__traceback__)


def _finalize(main_dict, code):
    """The observable part of the interpreter's exit (non-daemon threads joined, atexit
    callbacks, stdio flushed, the program's own objects released), then _exit: tearing down
    every inherited module would copy the zygote's whole heap, page by page, for nothing."""
    import atexit

    if "threading" in sys.modules:
        sys.modules["threading"]._shutdown()
    atexit._run_exitfuncs()
    if not _flush(sys.stdout, unraisable=True):
        code = 120 if code >= 0 else code
    for key in [k for k in main_dict if k.startswith("_") and k != "__builtins__"]:
        main_dict[key] = None  # the interpreter's own order: underscored names first
    for key in [k for k in main_dict if k != "__builtins__"]:
        main_dict[key] = None
    del main_dict
    gc.collect()  # the program's own cycles (the zygote's objects are frozen, left untouched)
    _flush(sys.stdout, unraisable=False)
    _flush(sys.stderr, unraisable=False)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    try:
        os._exit(code & 0xFF)
    except (OverflowError, TypeError):
        os._exit(255)


def _flush(stream, unraisable):
    if stream is None or getattr(stream, "closed", True):
        return True
    try:
        stream.flush()
        return True
    except BaseException as exc:
        if unraisable:
            try:
                sys.stderr.write("Exception ignored in: %r\n" % (stream,))
                sys.__excepthook__(type(exc), exc, exc.__traceback__)
            except BaseException:
                pass
        return False


if __name__ == "__main__":
    _config = json.loads(sys.argv[1])
    _run(_serve(_config), _config["mount"])
