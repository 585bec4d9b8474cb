"""The grading plugin's pytest hooks (envs/testfile/plugin/__init__.py joins the parts): the
per-test time limit (SIGALRM, or SIGPROF for CPU seconds), collection (the snapshot taken, the
plugin and the test modules out of sys.modules, the checker module there for the collection
only), each test's outcome ranked worst-last into the run's record, and the session's end,
which opens the one window in which the report files may be written."""

GLOBALS = r'''
class RollforgeTimeout(Exception):
    """A test ran past its time limit."""


# pytest's hooks, sealed (seal.py): each calls its `_f`, the function of the same name in
# `_install` below.
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection(session, *, _f=None):
    return (yield from _f(session))


def pytest_collection_finish(session, *, _f=None):
    return _f(session)


def pytest_collectreport(report, *, _f=None):
    return _f(report)


def pytest_internalerror(excrepr, excinfo, *, _f=None):
    return _f(excrepr, excinfo)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item, *, _f=None):
    return (yield from _f(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call, *, _f=None):
    return (yield from _f(item, call))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session, exitstatus, *, _f=None):
    return (yield from _f(session, exitstatus))
'''

BODY = r'''
    def alarm(signum, frame):
        raise RollforgeTimeout("rollforge-timeout: the test ran past %ss%s"
                               % (per_test, " of CPU" if cpu else ""))

    alarm = seal(_rollforge_alarm, alarm)  # the handler pytest_runtest_call checks is in place

    def worst(nodeid, outcome, error=None):
        old = rec["outcomes"].get(nodeid, "passed")
        if RANK[outcome] > RANK[old]:
            rec["outcomes"][nodeid] = outcome
            if error:
                rec["errors"][nodeid] = error
        else:
            rec["outcomes"].setdefault(nodeid, old)

    RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3, "timeout": 4}

    def collection(session):
        snap["objects"], snap["hooks"] = take(), hooks(session.config)  # before the candidate
        snap["path"] = outcome_path()
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

    def collection_finish(session):
        rec["collected"] = [i.nodeid for i in session.items]
        if importers_moved():
            flag("pytest_tampering")  # an import hook could hand pytest tests of its own
        # the tested code was imported during the collection: a patch it made to pytest then
        # could stay through every test and take itself back before the session's end
        if pytest_moved({k: v for k, v in snap["objects"].items()
                         if (k[1] if k[0] == "m" else k[0]).startswith(_PYTEST_PKGS)}):
            flag("pytest_tampering")
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

    def collectreport(report):
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            text = str(getattr(crash, "message", "") or report.longrepr)
            rec["collect_errors"].append([report.nodeid, text[-400:]])
        elif report.skipped:
            rec["collect_errors"].append([report.nodeid, "Skipped"])
            flag("skipped_test")

    def internalerror(excrepr, excinfo):
        rec["internal_error"] = excinfo.typename if excinfo is not None else "INTERNALERROR"
        if excinfo is not None and excinfo.typename in ("SystemExit", "Exit"):
            flag("exit_called")

    def runtest_call(item):
        if getsignal(SIG) is not alarm:
            flag("timeout_evasion")
            setsignal(SIG, alarm)
        tests_intact()
        framework = pytest_state() if snap else None
        setitimer(TIMER, per_test)
        start = cpu_now()
        try:
            return (yield)
        finally:
            setitimer(TIMER, 0)
            tests_intact()
            threads_left()
            if framework is not None and pytest_moved(framework):
                flag("pytest_tampering")
            # each test's CPU seconds (its call, as the limit counts them): the repo builder
            # rejects what runs near the limit, so no decision of its hangs on the load
            used = rnd(cpu_now() - start, 3)
            rec["cpu"][item.nodeid] = larger(used, rec["cpu"].get(item.nodeid, 0.0))
            if getsignal(SIG) is not alarm:
                flag("timeout_evasion")
            setsignal(SIG, alarm)

    def makereport(item, call):
        # Every phase's record is made here (setup, call, teardown): a patch the tested code
        # made in a fixture's setup or teardown and takes back by itself as the next record is
        # made (after the compare around the call) is still in place at this phase's report.
        if snap and outcome_path_moved():
            flag("pytest_tampering")
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

    def sessionfinish(session, exitstatus):
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

    for entry, impl in ((pytest_collection, collection),
                        (pytest_collection_finish, collection_finish),
                        (pytest_collectreport, collectreport),
                        (pytest_internalerror, internalerror),
                        (pytest_runtest_call, runtest_call),
                        (pytest_runtest_makereport, makereport),
                        (pytest_sessionfinish, sessionfinish)):
        seal(entry, impl)
'''
