"""The program that runs as pid 1 of every sandbox container, passed with `python3 -c`.

Threat model: the executed code runs in the same container, as the same unprivileged uid. The
server makes itself non-dumpable, so that code can neither read its stdin/stdout through
/proc/1/fd nor ptrace it; as the namespace's init it ignores every signal that code can send. Each
response carries the request's random nonce, which the code never sees, so output it manages to
write cannot pass for a response. Between requests the server kills every other process in the
container and empties /work and /tmp: the next execution starts from a clean container.

Protocol (one line each way): the host writes a JSON request on stdin; the server answers
`\\n@rollforge <json>\\n` on stdout. Bytes are base64 in both directions.
"""

SERVER_SOURCE = r'''
import base64, ctypes, json, os, resource, selectors, shutil, signal, subprocess, sys, time

ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE=0: /proc/1/fd and ptrace closed to code
OUT = os.fdopen(os.dup(1), "wb", buffering=0)
IN = os.fdopen(os.dup(0), "rb", buffering=0)
devnull = os.open("/dev/null", os.O_RDWR)
for fd in (0, 1):
    os.dup2(devnull, fd)
ROOTS = ("/work", "/tmp")


def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def others():
    return [p for p in os.listdir("/proc") if p.isdigit() and p != "1"]


def kill_all():
    """As the namespace's init, kill(-1) reaches every other process in the container."""
    for _ in range(200):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        reap()
        if not others():
            return
        time.sleep(0.001)


def clean():
    for root in ROOTS:
        for name in os.listdir(root):
            path = os.path.join(root, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


def select_ready(f):
    import select as _select
    return bool(_select.select([f], [], [], 0)[0])


def limits(fsize):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def execute(req):
    for rel, data in req["files"].items():
        path = os.path.join("/work", rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(base64.b64decode(data))
    argv = req["argv"]
    if argv[0] == "python":
        argv = ["python3", "-I", "-B"] + argv[1:]
    stdin = base64.b64decode(req["stdin"]) if req["stdin"] is not None else None
    cap = req["output_bytes"]
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, cwd="/work", start_new_session=True,
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=limits(req["file_size_mb"] * 1024 * 1024))
    except OSError as exc:
        return {"returncode": 127, "stdout": "", "stderr": base64.b64encode(
            ("cannot execute %s: %s\n" % (argv[0], exc)).encode()).decode(),
            "timed_out": False, "overflow": False, "duration_s": 0.0, "files": {}}
    if stdin is not None:
        try:
            os.set_blocking(proc.stdin.fileno(), False)
        except OSError:
            pass
    sel = selectors.DefaultSelector()
    bufs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    sizes = {proc.stdout: 0, proc.stderr: 0}
    for p in bufs:
        os.set_blocking(p.fileno(), False)
        sel.register(p, selectors.EVENT_READ)
    pending = memoryview(stdin) if stdin is not None else None
    if pending is not None:
        sel.register(proc.stdin, selectors.EVENT_WRITE)
    deadline = start + req["timeout_s"]
    pidfd = os.pidfd_open(proc.pid)
    sel.register(pidfd, selectors.EVENT_READ)
    timed_out = overflow = exited = False

    def take(f):
        """Read what `f` has now; False once it is closed."""
        nonlocal overflow
        try:
            chunk = os.read(f.fileno(), 65536)
        except BlockingIOError:
            return True
        if not chunk:
            sel.unregister(f)
            return False
        room = cap - sizes[f]
        if room > 0:
            bufs[f] += chunk[:room]
        sizes[f] += len(chunk)
        if sizes[f] > cap:
            overflow = True
        return True

    while not exited and not overflow:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = proc.poll() is None
            break
        for key, _ in sel.select(left):
            f = key.fileobj
            if isinstance(f, int):  # the pidfd: the main process exited
                exited = True
            elif f is proc.stdin:
                try:
                    n = os.write(f.fileno(), pending[:65536])
                    pending = pending[n:]
                except BlockingIOError:
                    continue
                except OSError:
                    pending = pending[:0]
                if not len(pending):
                    sel.unregister(f)
                    f.close()
            else:
                take(f)
    if exited:  # what the main process wrote before it exited (a child may hold the pipes)
        for f in (proc.stdout, proc.stderr):
            while not overflow and f in sel.get_map() and select_ready(f) and take(f):
                pass
    os.close(pidfd)
    duration = time.monotonic() - start
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    code = proc.wait()  # before kill_all(), whose reaping would lose this exit status
    kill_all()
    sel.close()
    for p in (proc.stdout, proc.stderr, proc.stdin):
        if p is not None:
            try:
                p.close()
            except OSError:
                pass
    files = {}
    for rel in req["collect"]:
        path = os.path.join("/work", rel)
        if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) <= cap:
            with open(path, "rb") as fh:
                files[rel] = base64.b64encode(fh.read()).decode()
    return {"returncode": code, "stdout": base64.b64encode(bytes(bufs[proc.stdout])).decode(),
            "stderr": base64.b64encode(bytes(bufs[proc.stderr])).decode(),
            "timed_out": timed_out, "overflow": overflow, "duration_s": duration, "files": files}


def main():
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    buf = b""
    OUT.write(b"\n@rollforge " + json.dumps({"ready": True}).encode() + b"\n")
    while True:
        while b"\n" not in buf:
            chunk = IN.read(1 << 20)
            if not chunk:
                return
            buf += chunk
        line, buf = buf.split(b"\n", 1)
        req = json.loads(line)
        try:
            resp = execute(req)
        except Exception as exc:
            resp = {"server_error": "%s: %s" % (type(exc).__name__, exc)}
        kill_all()
        clean()
        resp["nonce"] = req["nonce"]
        OUT.write(b"\n@rollforge " + json.dumps(resp).encode() + b"\n")


main()
'''
