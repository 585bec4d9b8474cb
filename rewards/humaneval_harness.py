"""The in-sandbox harness for HumanEval-style tasks, shipped into the sandbox as `harness.py`.

It receives a batch of samples (`batch.json`, deleted once read): per sample, the solution's
source, its entry point and the *arguments* of the candidate calls the grader planned. The asserts,
the expected values and the comparisons stay in the grader's process.

Each sample runs in its own forked child of this harness's parent, which never runs candidate
code: the child gets a pipe for its records and one for its prints and no other file descriptor,
installs the tripwires of `rewards/guard.py`, runs the entry point once per planned call under a
per-call alarm, and writes each return value in the typed wire format of `rewards/wire.py` (exact
builtin types only). The parent kills a child's process group at the sample's wall-clock limit and
relays, per sample, the raw record lines (the grader parses them, trusting nothing), up to 8 KiB
of prints, and how the child ended. A batch of one is what `score()` uses; `rollforge eval`
batches samples so that the sandbox and interpreter start-up is paid once per batch.

Parent output, one JSON object per line: {"s", "rec": <raw line>}, {"s", "prints"},
{"s", "end": ok|failed|timeout|memory_exceeded|output_truncated, "code", "t"}, then {"batch_done"}.
Child records: {"flag"}, {"load_error"}, {"loaded"}, {"i", "value"|"error"}, {"done"}.
"""
from pathlib import Path

from rewards.guard import GUARD_SOURCE
from sandbox.fork_server import trust_script

_WIRE_SOURCE = Path(__file__).with_name("wire.py").read_text()

_MAIN_SOURCE = r'''
import _thread, gc as _gc, json as _json, select as _select, signal as _signal, time as _time

_dumps, _loads, _write, _mono, _sleep = (_json.dumps, _json.loads, _os.write, _time.monotonic,
                                         _time.sleep)
_setitimer, _getsignal, _ITIMER = _signal.setitimer, _signal.getsignal, _signal.ITIMER_REAL
_fired = [False]
_PRINTS_CAP = 8192
_RECORDS_CAP = 4 << 20


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    _fired[0] = True
    raise _Timeout()


def _child(item, per_test, rec_fd, snap):
    """One sample, in its own process: load the solution, answer each planned call. `snap`:
    the builtins and harness globals as the parent saw them (it never runs candidate code)."""
    lock, stopped = _thread.allocate_lock(), [False]

    def emit(rec):
        with lock:  # the watchdog writes too; nothing may follow "done"
            if not stopped[0]:
                _write(rec_fd, (_dumps(rec) + "\n").encode())
                if "done" in rec:
                    stopped[0] = True

    def emit_flag(flag):
        emit({"flag": flag})

    def watchdog():
        # Notices the per-call alarm being switched off while the candidate still runs (a
        # child stuck past its limit is then killed by the parent, but would carry no flag).
        while not stopped[0]:
            _sleep(0.05)
            if _getsignal(_signal.SIGALRM) is not _alarm:
                emit_flag("timeout_evasion")
                return

    _signal.signal(_signal.SIGALRM, _alarm)
    _install_guard(emit_flag)
    _thread.start_new_thread(watchdog, ())
    entry, calls = item["entry"], item["calls"]
    ns = {"__name__": "solution"}
    try:
        exec(compile(item["source"], "solution.py", "exec"), ns)
        fn = ns[entry]
    except BaseException as exc:
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            emit_flag("exit_called")
        emit({"load_error": type(exc).__name__ + ": " + str(exc)[:300]})
        emit({"done": True})
        return
    emit({"loaded": True})
    for i, call in enumerate(calls):
        try:
            args, kwargs = decode(call)
            _fired[0] = False
            t0 = _mono()
            _setitimer(_ITIMER, per_test)
            try:
                value = fn(*args, **kwargs)
            finally:
                _setitimer(_ITIMER, 0)
            if _fired[0] or _mono() - t0 > per_test + 0.5:
                emit_flag("timeout_evasion")  # it swallowed the alarm or switched it off
                emit({"i": i, "error": "Timeout"})
            else:
                emit({"i": i, "value": encode(value)})
        except _Timeout:
            emit({"i": i, "error": "Timeout"})
        except BaseException as exc:
            emit({"i": i, "error": type(exc).__name__})
            if isinstance(exc, NonPlainResult):
                emit_flag("non_plain_result")
            if isinstance(exc, (SystemExit, KeyboardInterrupt)):
                emit_flag("exit_called")
                break
        finally:
            if _getsignal(_signal.SIGALRM) is not _alarm:
                emit_flag("timeout_evasion")
                _signal.signal(_signal.SIGALRM, _alarm)
    for flag in _tampered(snap, globals()):
        emit_flag(flag)
    emit({"done": True})


def _run_one(k, item, per_test, limit_s, out, snap):
    rec_r, rec_w = _os.pipe()
    txt_r, txt_w = _os.pipe()
    t0 = _mono()
    pid = _os.fork()
    if pid == 0:  # the sample's own process
        code, prints = 0, None
        try:
            _os.setpgid(0, 0)
            _os.dup2(txt_w, 1)
            _os.dup2(txt_w, 2)
            _os.dup2(rec_w, 3)
            _os.closerange(4, 4096)  # the parent's stdout and the other samples' pipes
            prints = open(1, "w", buffering=1, closefd=False)
            _sys.stdout = _sys.stderr = prints
            _child(item, per_test, 3, snap)
        except BaseException:
            code = 70
        finally:
            try:
                prints.flush()
            except BaseException:
                pass
            _os._exit(code)
    _os.close(rec_w)
    _os.close(txt_w)
    poller = _select.poll()
    kinds = {rec_r: "rec", txt_r: "txt"}
    for fd in kinds:
        poller.register(fd, _select.POLLIN)
    bufs = {"rec": bytearray(), "txt": bytearray()}
    end, open_pipes = None, 2
    while open_pipes:
        left = t0 + limit_s - _mono()
        if left <= 0:
            end = "timeout"
            break
        for fd, _ in poller.poll(left * 1000):
            chunk = _os.read(fd, 65536)
            if not chunk:
                poller.unregister(fd)
                open_pipes -= 1
                continue
            kind = kinds[fd]
            buf = bufs[kind]
            if kind == "txt":
                buf += chunk[:max(0, _PRINTS_CAP - len(buf))]
            else:
                buf += chunk
                if len(buf) > _RECORDS_CAP:
                    end = "output_truncated"
                    open_pipes = 0
                    break
    try:
        _os.killpg(pid, _signal.SIGKILL)
    except OSError:
        pass
    _, status = _os.waitpid(pid, 0)
    _os.close(rec_r)
    _os.close(txt_r)
    code = _os.waitstatus_to_exitcode(status)
    if end is None:  # SIGKILL that the parent did not send: the memory cgroup's OOM killer
        end = "ok" if code == 0 else "memory_exceeded" if code == -9 else "failed"
    lines = [{"s": k, "rec": line}
             for line in bytes(bufs["rec"]).decode("utf-8", "replace").splitlines()]
    lines.append({"s": k, "prints": bytes(bufs["txt"]).decode("utf-8", "replace")})
    lines.append({"s": k, "end": end, "code": code, "t": _mono() - t0})
    out(lines)  # one write a sample: the grader wakes once for it


def main():
    per_test, limit_s = float(_sys.argv[1]), float(_sys.argv[2])
    with open("batch.json") as fh:
        batch = _loads(fh.read())
    _os.remove("batch.json")
    if len(batch) > 1:  # what HumanEval prompts and solutions import: once, for every fork
        import typing, re, math, collections, itertools, functools, string, heapq
        # The compiler's first use sets up state a forked child would otherwise build for
        # itself, sample after sample (about 2 ms each): use it once here, on our own text.
        exec(compile("def _warm(x):\n    return [x for _ in ()]\n", "warm.py", "exec"), {})

    def out(recs):
        data = memoryview("".join(_dumps(r) + "\n" for r in recs).encode())
        while data:
            data = data[_write(1, data):]

    # Taken here, where no candidate code ever runs, and inherited by every sample's process:
    # what each one's builtins and harness globals are compared with at its end.
    snap = _snapshot(globals())
    # Every object so far is the parent's: a sample's garbage collections leave them alone
    # (walking them would copy their pages into the child, sample after sample).
    _gc.freeze()
    for k, item in enumerate(batch):
        _run_one(k, item, per_test, limit_s, out, snap)
    out([{"batch_done": True}])


main()
'''

HARNESS_SOURCE = _WIRE_SOURCE + "\n" + GUARD_SOURCE + "\n" + _MAIN_SOURCE
trust_script(HARNESS_SOURCE)  # zygotes may keep it compiled
