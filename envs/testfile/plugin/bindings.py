"""The grading plugin's first part (envs/testfile/plugin/__init__.py joins the parts): the names
every other part uses, bound at the top of `_install` before any of the candidate's code runs
(it can rebind the modules' attributes afterwards, not these closure cells): the run's config,
the per-test clock, the os, json and signal functions the checks call, the copy of stderr the
flags go to; the run's record (`rec`, written as the summary at the session's end) and `flag`,
which reports a hack flag on that copy of stderr, tagged with the run's nonce."""

GLOBALS = ""

BODY = r'''
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
'''
