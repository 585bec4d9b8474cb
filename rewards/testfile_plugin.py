"""The grader's pytest plugin for test-file tasks, shipped into the sandbox as `conftest.py`
on every run (rewards/testfile_tests.py says what it guards and why), and the pytest config."""
from __future__ import annotations

TEST_MODULE = "test_task"  # the test file's module name in the sandbox
TEST_FILE = f"{TEST_MODULE}.py"

PLUGIN_SOURCE = r'''
"""rollforge's grading plugin: written by the grader on every run (rewards/testfile_plugin.py)."""
import _thread, gc as _gc, json as _json, os as _os, signal as _signal
import sys as _sys, time as _time
import pytest

_CONFIG = @@CONFIG@@


class RollforgeTimeout(Exception):
    """A test ran past its time limit."""


_PROCESS_EVENTS = ("os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                   "os.kill", "os.killpg", "subprocess.Popen", "pty.spawn", "signal.pthread_kill")


def _install(cfg):
    # Everything the checks use is bound here, before the candidate runs: it can rebind the
    # modules' names afterwards, not these.
    nonce, per_test, summary_name = cfg["nonce"], cfg["per_test"], cfg["summary"]
    writable = frozenset(cfg["writable"])
    names = frozenset(cfg["protected"]) | writable
    paths = frozenset(_os.path.join(_os.getcwd(), n) for n in names)
    wflags = _os.O_WRONLY | _os.O_RDWR | _os.O_CREAT | _os.O_TRUNC
    # The per-test limit: wall-clock seconds (SIGALRM), or with "clock": "cpu" the process's CPU
    # seconds (SIGPROF), which a loaded machine does not use up: the repo kind's builder keeps or
    # rejects a mutant by it, so the same command keeps the same mutants at any load.
    cpu = cfg.get("clock", "wall") == "cpu"
    SIG, TIMER = ((_signal.SIGPROF, _signal.ITIMER_PROF) if cpu
                  else (_signal.SIGALRM, _signal.ITIMER_REAL))
    gc_collect, gc_disable, gc_enable = _gc.collect, _gc.disable, _gc.enable
    write, dup, realpath, basename, fspath = (_os.write, _os.dup, _os.path.realpath,
                                               _os.path.basename, _os.fspath)
    getident, main, dumps, fopen = _thread.get_ident, _thread.get_ident(), _json.dumps, open
    setitimer, getsignal, setsignal = _signal.setitimer, _signal.getsignal, _signal.signal
    cpu_now = _time.process_time  # the clock ITIMER_PROF counts: the process's CPU seconds
    rnd, larger = round, max
    err = dup(2)
    write(err, ("ROLLFORGE-LOADED %s\n" % nonce).encode())  # before any of the candidate's code
    state = {"open": False, "sealed": False}
    seen, rec = [], {"nonce": nonce, "collected": [], "outcomes": {}, "errors": {},
                     "collect_errors": [], "internal_error": None, "exitstatus": None,
                     "cpu": {}, "cpu_total": 0.0}
    snap = {}

    def flag(name):
        if name not in seen:
            seen.append(name)
            try:
                write(err, ("ROLLFORGE-FLAG %s %s\n" % (nonce, name)).encode())
            except OSError:
                pass

    def grader_file(p):
        try:
            p = fspath(p)
            if isinstance(p, bytes):
                p = p.decode("utf-8", "replace")
            return isinstance(p, str) and (basename(p) in names or realpath(p) in paths)
        except Exception:
            return False

    def hook(event, args):
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (any(c in mode for c in "wax+") if isinstance(mode, str) else
                       isinstance(flags, int) and bool(flags & wflags))
            targets = (path,) if writing else ()
        elif event in ("os.remove", "os.rename", "os.link", "os.symlink", "os.truncate",
                       "os.chmod", "os.chown", "os.mkdir", "os.rmdir", "os.utime",
                       "shutil.rmtree", "shutil.move"):
            targets = tuple(args)[:2]
        elif event == "shutil.copyfile":
            targets = tuple(args)[1:2]
        elif event in _PROCESS_EVENTS:
            flag("process_control")
            raise PermissionError("rollforge: no processes from the tests (%s)" % event)
        elif event in ("sys.settrace", "sys.setprofile", "gc.get_objects", "gc.get_referrers",
                       "gc.get_referents", "sys._current_frames"):
            flag("introspection")
            raise PermissionError("rollforge: %s is denied" % event)
        elif event == "import" and str(args[0]).split(".")[0] in ("ctypes", "_ctypes"):
            flag("forbidden_import")
            raise PermissionError("rollforge: ctypes is denied")
        else:
            return
        if event == "open" and writing and isinstance(path, str) and path.startswith("/proc/"):
            flag("introspection")
            raise PermissionError("rollforge: writing %s is denied" % path)
        for t in targets:
            if grader_file(t):
                ours = fspath(t) if not isinstance(t, int) else ""
                ours = basename(ours.decode() if isinstance(ours, bytes) else ours)
                if (state["open"] and not state["sealed"] and getident() == main
                        and ours in writable and event == "open"):
                    continue
                flag("forged_report" if ours in writable else "tests_modified")
                raise PermissionError("rollforge: %s belongs to the grader" % ours)

    def alarm(signum, frame):
        raise RollforgeTimeout("rollforge-timeout: the test ran past %ss%s"
                               % (per_test, " of CPU" if cpu else ""))

    def take():
        out = {}
        for n, m in list(_sys.modules.items()):
            if n in ("pytest", "_pytest", "pluggy", "builtins", "conftest") or n.startswith(
                    ("_pytest.", "pluggy.")):
                out[("m", n)] = m
                for k, v in list(getattr(m, "__dict__", {}).items()):
                    out[(n, k)] = v
                    if isinstance(v, type) and getattr(v, "__module__", None) == n:
                        for ck, cv in list(vars(v).items()):
                            out[(n, k, ck)] = cv
        return out

    def hooks(config):
        pm = config.pluginmanager
        return (frozenset(map(id, pm.get_plugins())),
                {h: tuple(i.function for i in getattr(pm.hook, h).get_hookimpls())
                 for h in dir(pm.hook) if not h.startswith("_")})

    def tampered(config):
        now = take()
        missing = object()
        changed = [k for k, v in snap["objects"].items() if now.get(k, missing) is not v]
        if any(k[0] == "builtins" or k == ("m", "builtins") for k in changed):
            flag("builtins_tampering")
        if any(not (k[0] == "builtins" or k == ("m", "builtins")) for k in changed):
            flag("pytest_tampering")
        if hooks(config) != snap["hooks"]:
            flag("pytest_tampering")
        if getsignal(SIG) is not alarm:
            flag("timeout_evasion")

    def worst(nodeid, outcome, error=None):
        old = rec["outcomes"].get(nodeid, "passed")
        if RANK[outcome] > RANK[old]:
            rec["outcomes"][nodeid] = outcome
            if error:
                rec["errors"][nodeid] = error
        else:
            rec["outcomes"].setdefault(nodeid, old)

    RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3, "timeout": 4}

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection(session):
        snap["objects"], snap["hooks"] = take(), hooks(session.config)  # before the candidate
        return (yield)

    def pytest_collection_finish(session):
        rec["collected"] = [i.nodeid for i in session.items]

    def pytest_collectreport(report):
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            text = str(getattr(crash, "message", "") or report.longrepr)
            rec["collect_errors"].append([report.nodeid, text[-400:]])
        elif report.skipped:
            rec["collect_errors"].append([report.nodeid, "Skipped"])
            flag("skipped_test")

    def pytest_internalerror(excrepr, excinfo):
        rec["internal_error"] = excinfo.typename if excinfo is not None else "INTERNALERROR"
        if excinfo is not None and excinfo.typename in ("SystemExit", "Exit"):
            flag("exit_called")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(item):
        if getsignal(SIG) is not alarm:
            flag("timeout_evasion")
            setsignal(SIG, alarm)
        setitimer(TIMER, per_test)
        start = cpu_now()
        try:
            return (yield)
        finally:
            setitimer(TIMER, 0)
            # each test's CPU seconds (its call, as the limit counts them): the repo builder
            # rejects what runs near the limit, so no decision of its hangs on the load
            used = rnd(cpu_now() - start, 3)
            rec["cpu"][item.nodeid] = larger(used, rec["cpu"].get(item.nodeid, 0.0))
            if getsignal(SIG) is not alarm:
                flag("timeout_evasion")
            setsignal(SIG, alarm)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(item, call):
        report = yield
        exc = call.excinfo
        if exc is None:
            worst(item.nodeid, "passed")
        elif exc.errisinstance(RollforgeTimeout):
            worst(item.nodeid, "timeout", "Timeout")
        elif exc.errisinstance(pytest.skip.Exception):
            worst(item.nodeid, "skipped")
            flag("skipped_test")
        elif exc.errisinstance((AssertionError, pytest.fail.Exception)) and call.when == "call":
            worst(item.nodeid, "failed")
        else:
            worst(item.nodeid, "error", exc.typename)
            if exc.typename in ("SystemExit", "Exit", "KeyboardInterrupt"):
                flag("exit_called")
        return report

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(session, exitstatus):
        if state["sealed"]:
            return (yield)
        if snap:
            tampered(session.config)
        gc_collect()  # no finalizer of the candidate's runs while the report files are open
        gc_disable()
        state["open"] = True
        try:
            return (yield)
        finally:
            rec["exitstatus"] = int(session.exitstatus)
            rec["cpu_total"] = rnd(cpu_now(), 3)
            rec["flags"] = list(seen)
            try:
                with fopen(summary_name, "w") as fh:
                    fh.write(dumps(rec))
            finally:
                state["open"], state["sealed"] = False, True
                gc_enable()

    setsignal(SIG, alarm)
    _sys.addaudithook(hook)
    return (pytest_collection, pytest_collection_finish, pytest_collectreport,
            pytest_internalerror, pytest_runtest_call, pytest_runtest_makereport,
            pytest_sessionfinish)


(pytest_collection, pytest_collection_finish, pytest_collectreport, pytest_internalerror,
 pytest_runtest_call, pytest_runtest_makereport, pytest_sessionfinish) = _install(_CONFIG)
del _install, _CONFIG
'''

INI_SOURCE = f"""[pytest]
python_files = {TEST_FILE}
python_classes = Test*
python_functions = test_*
junit_family = xunit2
junit_logging = no
"""

