"""The grading plugin's entry points (envs/testfile/plugin/__init__.py joins the parts): what the
plugin hands out (pytest's hooks, the tests' checker, the signal handler, the thread wrapper,
unittest's guarded assertions) are sealed functions, not closures of `_install`.

Why: the tested code can reach what the plugin hands out (pytest's Config sits in module globals
such as `_pytest.mark.structures.MARK_GEN._config` and on the assertion rewriter in
`sys.meta_path`; from it `config.pluginmanager.get_plugins()` lists the plugin module). A closure's
`__closure__` and a cell's `cell_contents` raise no audit event, and cells are writable: through
one hook the whole of `_install`'s state was the candidate's (the checker's `plain` replaced, the
record edited). An entry point here has no closure and reads no global: it calls its `_f`, a
keyword default set by `seal` at install time, and the audit hook (audit.py) denies reading or
setting an entry point's defaults or code while the tested code is on the stack (`introspection`).
`_install` itself runs with globals of its own (a copy of the module's, with a copy of builtins,
made by the module's last lines): rebinding the module's constants or a builtin changes nothing
the checks read.
"""

GLOBALS = r'''
# The entry points' templates: each calls its `_f` (set by `seal` in `_install`) and reads no
# other name, so nothing the tested code can rebind decides what it does.
def __rollforge_plain__(v, k=0, *, _f=None):
    return _f(v, k)


def _rollforge_alarm(signum, frame, *, _f=None):
    return _f(signum, frame)


def _rollforge_start_thread(function, args, kwargs=None, *, _f=None):
    return _f(function, args, kwargs)


def _rollforge_assertion(self, *args, _f=None, _n=0, _c=None, _k=0, **kw):
    if _k and args[1:2]:  # an equality assertion's two operands, checked as a pair
        return _f(self, _c(args[0], _k), _c(args[1], -_k), *args[2:], **kw)
    return _f(self, *[_c(a) for a in args[:_n]], *args[_n:], **kw)


# An entry point's attributes that would hand out `_install`'s functions (and so their cells).
_SEALED_ATTRS = ("__kwdefaults__", "__defaults__", "__code__")
'''

BODY = r'''
    # -- the entry points: sealed functions, the only functions of the plugin handed out -------
    sealed, keep = set(), []  # their ids; kept alive for the session, so no id is reused

    def seal(entry, impl, fresh=False, **more):
        """`entry` (a template above; with `fresh`, a new copy of it) calling `impl`."""
        if fresh:
            entry = _types.FunctionType(entry.__code__, entry.__globals__, entry.__name__,
                                        entry.__defaults__)
        entry.__kwdefaults__ = dict(more, _f=impl)
        sealed.add(id(entry))
        keep.append(entry)
        return entry
'''
