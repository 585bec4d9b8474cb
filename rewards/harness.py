"""The in-sandbox harness for input/output tests, shipped into the sandbox as `harness.py`.

Threat model: the candidate's code runs in the same process as this harness, so it can change
anything here. Nothing it changes matters, because the sandbox receives only the test *inputs*;
the expected outputs stay with the grader, which compares the plain JSON values that come back.
A candidate that exits early, loops, crashes or returns objects that are not plain data simply
produces no matching value for those tests. The tripwires of `rewards/guard.py` are prepended, so
what the candidate tries (files, processes, the grader's modules) is flagged as well as denied.
"""
from rewards.guard import GUARD_SOURCE
from sandbox.fork_server import trust_script

_MAIN_SOURCE = r'''
import json, os, signal, sys

_dumps, _loads, _write, _fdopen = json.dumps, json.loads, os.write, os.fdopen
_PLAIN = (int, float, str, bool, type(None))


def _plain(v, depth=0):
    """Exact plain JSON types only: a subclass of a builtin (which could lie) is refused."""
    t = type(v)
    if depth > 50:
        raise NonPlainResult("result nested too deeply")
    if t in _PLAIN:
        return v
    if t in (list, tuple):
        return [_plain(x, depth + 1) for x in v]
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str:
                raise NonPlainResult("dict key of type %s" % type(k).__name__)
            out[k] = _plain(x, depth + 1)
        return out
    raise NonPlainResult("result of non-plain type %s" % t.__name__)


class _Timeout(BaseException):
    pass


class NonPlainResult(TypeError):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def main():
    entry, per_test = sys.argv[1], float(sys.argv[2])
    with open("inputs.json") as fh:
        inputs = _loads(fh.read())
    os.remove("inputs.json")
    out_fd = os.dup(1)
    # The candidate's own prints go to stderr so they can never be mistaken for results.
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def emit(rec):
        _write(out_fd, (_dumps(rec) + "\n").encode())

    signal.signal(signal.SIGALRM, _alarm)
    _install_guard(lambda flag: emit({"flag": flag}), strict=False)  # numpy/pandas may be used
    snap = _snapshot(globals())
    ns = {"__name__": "solution"}
    try:
        with open("solution.py") as fh:
            src = fh.read()
        exec(compile(src, "solution.py", "exec"), ns)
        fn = ns[entry]
    except BaseException as exc:
        emit({"load_error": type(exc).__name__ + ": " + str(exc)[:300]})
        emit({"done": True})
        return
    emit({"loaded": True})
    for i, args in enumerate(inputs):
        try:
            signal.setitimer(signal.ITIMER_REAL, per_test)
            try:
                value = fn(*args)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            emit({"i": i, "value": _plain(value)})
        except _Timeout:
            emit({"i": i, "error": "Timeout"})
        except RecursionError:
            emit({"i": i, "error": "RecursionError"})
        except BaseException as exc:
            emit({"i": i, "error": type(exc).__name__})
            if isinstance(exc, NonPlainResult):
                emit({"flag": "non_plain_result"})
            if isinstance(exc, (SystemExit, KeyboardInterrupt)):
                break
        finally:
            if signal.getsignal(signal.SIGALRM) is not _alarm:
                emit({"flag": "timeout_evasion"})
                signal.signal(signal.SIGALRM, _alarm)
    for flag in _tampered(snap, globals()):
        emit({"flag": flag})
    emit({"done": True})


main()
'''

HARNESS_SOURCE = GUARD_SOURCE + "\n" + _MAIN_SOURCE
trust_script(HARNESS_SOURCE)  # zygotes may keep it compiled
