"""The grading plugin's record of the test modules (envs/testfile/plugin/__init__.py joins the
parts): as collected, each test module's globals (for a repository's tests, only its functions
and classes), each function's code, defaults and closure, each class's methods; compared before
and after every test (`tests_intact`): a rewritten test, or a checker the tests no longer reach,
is `tests_modified`."""

GLOBALS = ""

BODY = r'''
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
'''
