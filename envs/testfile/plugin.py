"""The grader's pytest plugin for test-file tasks, shipped into the sandbox as `conftest.py`
on every run (envs/testfile/grading.py says what it guards and why), and the pytest config."""
from __future__ import annotations

TEST_MODULE = "test_task"  # the test file's module name in the sandbox
TEST_FILE = f"{TEST_MODULE}.py"

PLUGIN_SOURCE = r'''
"""rollforge's grading plugin: written by the grader on every run (envs/testfile/plugin.py)."""
import _thread, gc as _gc, json as _json, os as _os, signal as _signal
import sys as _sys, time as _time, types as _types
import pytest

_CONFIG = @@CONFIG@@


class RollforgeTimeout(Exception):
    """A test ran past its time limit."""


# The test framework's modules: their state is snapshotted before the candidate runs and compared
# after (a patched `TestCase.run` or pytest hook passes every test).
_FRAMEWORK = ("pytest", "_pytest", "pluggy", "builtins", "conftest", "unittest", "doctest")
_FRAMEWORK_PKGS = ("_pytest.", "pluggy.", "unittest.")
# Events that hand out a frame (whose f_back/f_globals reach the tests' expected values and the
# grader's state) or start a thread that outlives the test: denied while the candidate's code is
# on the stack.
_FRAME_EVENTS = ("sys._getframe", "sys._current_frames", "sys._current_exceptions")
_FRAME_ATTRS = ("tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back")
_THREAD_EVENTS = ("_thread.start_new_thread",)
_CHECKER_MODULE = "_rollforge_plain"  # what the rewritten tests import the checker from
# The methods through which a value decides a comparison, a membership or its truth.
_DECIDING = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__contains__",
             "__bool__", "__len__", "__iter__", "__hash__", "__getitem__", "__instancecheck__")
_IMPORTER = "/_pytest/assertion/rewrite.py"
_NAME_READERS = frozenset({"collections", "typing", "enum", "logging"})

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
    getframe, join, cwd = _sys._getframe, _os.path.join, _os.getcwd()
    type_, type_dict = type, type.__dict__["__dict__"].__get__
    # The candidate's code: its files (a frame of theirs on the stack means it is running) and
    # code it compiled itself ("<string>"), as opposed to the interpreter's and the grader's.
    cand = frozenset(p for n in cfg.get("candidate", ()) for p in (join(cwd, n),
                                                                   realpath(join(cwd, n))))

    stdlib = _os.path.dirname(_os.__file__) + "/"

    def mine(fn):
        return fn in cand or (fn[:1] == "<" and not fn.startswith("<frozen"))

    def candidate_running(event, direct=False):
        """The candidate's code is on the stack (`direct`: it is the caller). A frame that the
        standard library takes only to read its caller's module name (namedtuple, TypeVar,
        Enum, logging) is not counted: honest answers use those."""
        # getframe(0) raises an audit event of its own, which the hook knows by this
        # function's code (no flag in shared state that the tested code could set)
        f = getframe(0).f_back.f_back
        if event == "sys._getframe" and f is not None:
            caller = f.f_code.co_filename
            if caller.startswith(stdlib) and f.f_globals.get("__name__") in _NAME_READERS:
                return False
        if direct:
            return f is not None and mine(f.f_code.co_filename)
        while f is not None:
            fn = f.f_code.co_filename
            if mine(fn):
                return True
            if event == "open" and (fn.startswith("<frozen importlib") or fn.endswith(
                    _IMPORTER)):
                return False  # an import (pickle finding a test's function): not a read of
            f = f.f_back      # the source by the tested code
        return False

    own_code = type_dict(type_(candidate_running))["__code__"].__get__(candidate_running)
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

    tests = frozenset(cfg.get("tests", ()))
    test_paths = frozenset(realpath(join(cwd, n)) for n in tests)

    def reading_tests(p):
        try:
            p = fspath(p)
            if isinstance(p, bytes):
                p = p.decode("utf-8", "replace")
            return isinstance(p, str) and (basename(p) in tests or realpath(p) in test_paths)
        except Exception:
            return False

    def hook(event, args):
        if event == "sys._getframe" and args and args[0].f_code is own_code:
            return
        if (event in _FRAME_EVENTS or event in _THREAD_EVENTS or event == "compile" or (
                event == "object.__getattr__" and len(args) > 1 and args[1] in _FRAME_ATTRS)):
            if event == "compile":  # code compiled under another file's name hides whose it is
                fn = args[1] if len(args) > 1 else None
                if not isinstance(fn, str) or fn[:1] == "<" or fn in cand or realpath(
                        join(cwd, fn)) in cand:
                    return
            if not candidate_running(event, direct=event == "compile"):
                return
            name = "thread_started" if event in _THREAD_EVENTS else "introspection"
            flag(name)
            raise PermissionError("rollforge: %s is denied to the tested code" % event)
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (any(c in mode for c in "wax+") if isinstance(mode, str) else
                       isinstance(flags, int) and bool(flags & wflags))
            targets = (path,) if writing else ()
            if not writing and not reading_tests(path):
                return
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
        if (event == "open" and not writing and reading_tests(path)
                and candidate_running(event)):
            flag("reads_tests")  # the expected values are in the tests
            raise PermissionError("rollforge: the tests are not the tested code's to read")
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

    me = _sys.modules.get("conftest")  # this module, taken out of sys.modules after collection

    def take():
        out = {}
        mods = [(n, m) for n, m in list(_sys.modules.items()) if n != "conftest"]
        for n, m in mods + [("conftest", me)]:
            if n in _FRAMEWORK or n.startswith(_FRAMEWORK_PKGS):
                out[("m", n)] = m
                for k, v in list(getattr(m, "__dict__", {}).items()):
                    out[(n, k)] = v
                    if isinstance(v, type) and getattr(v, "__module__", None) == n:
                        for ck, cv in list(vars(v).items()):
                            out[(n, k, ck)] = cv
        return out

    def importers():
        return (tuple(map(id_, _sys.meta_path)), tuple(map(id_, _sys.path_hooks)))

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
        if hooks(config) != snap["hooks"] or importers() != snap["importers"]:
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

    # -- values the tests compare: plain data only (the candidate's __eq__ decides nothing) ------
    mode = cfg.get("plain")  # None (no rewrite), True (plain data only) or "probe" (repo)
    type_mro = type.__dict__["__mro__"].__get__
    scalars = (type(None), bool, int, float, complex, str, bytes)
    containers = (list, tuple, set, frozenset, dict)
    np = _sys.modules.get("numpy")
    np_scalars = frozenset(getattr(np, "sctypeDict", {}).values()) if np else frozenset()
    id_, iter_dict = id, dict.items

    def base_of(t):
        if t in scalars or t in containers or t in np_scalars:
            return t
        for b in scalars + containers:  # a subclass (namedtuple, IntEnum) that decides nothing
            if b is not bool and b in type_mro(t):
                for c in type_mro(t):
                    if c is b:
                        return b
                    if any(k in type_dict(c) for k in _DECIDING):
                        return None
        return None

    def plain(v, seen, budget):
        b = base_of(type_(v))
        if b is None:
            return False
        if b not in containers:
            return True
        if id_(v) in seen:
            return True
        seen.add(id_(v))
        budget[0] -= 1
        if budget[0] < 0:
            return False
        items = iter_dict(v) if b is dict else ((x, None) for x in b.__iter__(v))
        return all(plain(k, seen, budget) and plain(x, seen, budget) for k, x in items)

    class NotPlain(AssertionError):
        """A compared value that is not plain data: its own methods would decide the test."""

    class Stranger:
        """An object no honest value equals, contains or orders against."""

    def tests_own(t):
        """Every comparing method of the type was written in a test file (a test's own
        AlwaysEquals is the grader's; the tested code cannot compile under a test's name)."""
        found = False
        for c in type_mro(t):
            for k in _DECIDING:
                m = type_dict(c).get(k)
                if type_(m) is fn_type:
                    found = True
                    if realpath(code_of(m).co_filename) not in test_paths:
                        return False
        return found

    def honest(v):
        # a repository's tests compare its own objects: those may have methods of their own,
        # but one that says it equals (or not unequals) a stranger is lying to every test
        if tests_own(type_(v)):
            return True
        try:
            s = Stranger()
            return (v == s) is not True and (s == v) is not True and (v != s) is not False
        except Exception:
            return True  # it refused to compare: it decides nothing

    def checked(v):
        if plain(v, set(), [100_000]) or (mode == "probe" and honest(v)):
            return v
        flag("non_plain_result")
        raise NotPlain("rollforge: the tests compare plain values only; got a %s"
                       % type_(v).__name__)

    # -- the test modules: as collected, for the whole session ---------------------------------
    test_mods = {}

    module_dict = type_dict(type_(_sys))["__dict__"].__get__
    fn_type = type_(_install)
    fn_attrs = tuple((a, type_dict(fn_type)[a].__get__)
                     for a in ("__code__", "__defaults__", "__kwdefaults__", "__closure__"))

    def function_state(key, fn, out):
        for a, get in fn_attrs:
            out[key + (a,)] = get(fn)

    builtin_names = frozenset(type_dict(type_(_sys))["__dict__"].__get__(_sys.modules["builtins"]))

    def module_state(mod):
        """What a test module's tests are made of: its globals (all of them for a task's own
        test file; its functions and classes for a repository's, whose tests keep state of
        their own there), each function's code, defaults and closure, each class's methods.
        Data on classes is left out: unittest and pytest set their own."""
        out = {}
        for k, v in list(module_dict(mod).items()):
            if k == "__warningregistry__":
                continue  # the warnings module's, written when anything warns
            is_fn, is_cls = type_(v) is fn_type, type in type_mro(type_(v))
            if mode == "probe" and not (is_fn or is_cls or k == "__rollforge_plain__"):
                continue
            out[k] = v
            if is_fn:
                function_state((k,), v, out)
            elif is_cls:
                for ck, cv in list(type_dict(v).items()):
                    if type_(cv) is fn_type:
                        out[(k, ck)] = cv
                        function_state((k, ck), cv, out)
        return out

    def tests_intact():
        for mod, before in test_mods.items():
            now = module_state(mod)
            added = set(now) - set(before)
            if (any(now.get(k, now) is not v for k, v in before.items())
                    or (mode != "probe" and added)
                    or any(k in builtin_names for k in added if type_(k) is str)):
                flag("tests_modified")
                return False
            if mode and now.get("__rollforge_plain__") is not checked:
                flag("tests_modified")
                return False
        return True

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection(session):
        snap["objects"], snap["hooks"] = take(), hooks(session.config)  # before the candidate
        snap["importers"] = importers()
        if _sys.modules.get("conftest") is me:
            del _sys.modules["conftest"]  # the tested code gets no name to reach the plugin by
        if cfg.get("preimport"):
            # the candidate's module first, so its import-time code runs before any test module
            # exists; a failure here is raised again by the test module's own import
            try:
                __import__(cfg["preimport"])
            except BaseException:
                pass
        # the checker the rewritten tests import (rewards/plain_compare.py), for the collection
        # only: after it the tested code has no name to reach it by either
        checker = _types.ModuleType(_CHECKER_MODULE)
        checker.check = checked
        _sys.modules[_CHECKER_MODULE] = checker
        return (yield)

    code_of = type_dict(fn_type)["__code__"].__get__

    def pytest_collection_finish(session):
        rec["collected"] = [i.nodeid for i in session.items]
        if importers() != snap["importers"]:
            flag("pytest_tampering")  # an import hook could hand pytest tests of its own
        for item in session.items:
            mod = getattr(item, "module", None)
            if mod is not None and id_(mod) not in map(id_, test_mods):
                test_mods[mod] = module_state(mod)
            fn = getattr(item, "obj", None)
            # a test function compiled from the test file, not planted under its name
            if type_(fn) is fn_type and tests and realpath(
                    code_of(fn).co_filename) not in test_paths:
                flag("tests_modified")
        tests_intact()
        # out of sys.modules: the tested code has no name to reach the tests or the grader by
        _sys.modules.pop(_CHECKER_MODULE, None)
        # (a repository's tests stay: pickling a test's own function finds it by its module)
        for mod in list(test_mods) if mode != "probe" else ():
            name = getattr(mod, "__name__", None)
            if name and _sys.modules.get(name) is mod:
                del _sys.modules[name]

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
        tests_intact()
        setitimer(TIMER, per_test)
        start = cpu_now()
        try:
            return (yield)
        finally:
            setitimer(TIMER, 0)
            tests_intact()
            threads_left()
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

    # Python 3.11 raises no audit event for a new thread: the tested code's starts are denied
    # here, and a thread still alive after a test (started any other way) is flagged
    threads_alive, start_thread = _thread._count, _thread.start_new_thread

    deny_threads = cfg.get("threads") == "deny"  # a repository's own code may use threads

    def start_new_thread(function, args, kwargs=None):
        if deny_threads and candidate_running("thread"):
            flag("thread_started")
            raise PermissionError("rollforge: threads are denied to the tested code")
        return start_thread(function, args, *(() if kwargs is None else (kwargs,)))

    _thread.start_new_thread = _thread.start_new = start_new_thread
    if "threading" in _sys.modules:
        _sys.modules["threading"]._start_new_thread = start_new_thread
    state["threads"] = threads_alive()

    def threads_left():
        if deny_threads and threads_alive() > state["threads"]:
            flag("thread_started")

    if cfg.get("plain") == "probe":
        # unittest's assertions compare inside the framework: their operands are checked too
        # (before the snapshot, so the wrapped methods are what must still be there after)
        import unittest.case as _uc

        def guard(name, n):
            orig = getattr(_uc.TestCase, name)

            def method(self, *args, **kw):
                return orig(self, *[checked(a) for a in args[:n]], *args[n:], **kw)
            setattr(_uc.TestCase, name, method)

        for name, n in (("assertEqual", 2), ("assertNotEqual", 2), ("assertTrue", 1),
                        ("assertFalse", 1), ("assertIn", 2), ("assertNotIn", 2),
                        ("assertListEqual", 2), ("assertTupleEqual", 2), ("assertSetEqual", 2),
                        ("assertDictEqual", 2), ("assertSequenceEqual", 2),
                        ("assertCountEqual", 2), ("assertGreater", 2), ("assertLess", 2),
                        ("assertGreaterEqual", 2), ("assertLessEqual", 2)):
            guard(name, n)
    setsignal(SIG, alarm)
    _sys.addaudithook(hook)
    return checked, (pytest_collection, pytest_collection_finish, pytest_collectreport,
            pytest_internalerror, pytest_runtest_call, pytest_runtest_makereport,
            pytest_sessionfinish)


__rollforge_plain__, (
    pytest_collection, pytest_collection_finish, pytest_collectreport, pytest_internalerror,
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

