"""The grading plugin's check of compared values (envs/testfile/plugin/__init__.py joins the
parts): every value the rewritten tests compare (rewards/plain_compare.py) goes through
`checked`, which lets plain data through (scalars, containers of plain data, numpy scalars, a
subclass that overrides no method that decides a comparison) and fails the test with
`non_plain_result` otherwise, so the candidate's `__eq__` decides nothing. In "probe" mode (the
repo kind, whose tests compare the repository's own objects) an object that does not claim to
equal a stranger passes too, and unittest's assertion methods check their operands."""

GLOBALS = r'''
_CHECKER_MODULE = "_rollforge_plain"  # what the rewritten tests import the checker from
# The methods through which a value decides a comparison, a membership or its truth.
_DECIDING = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__contains__",
             "__bool__", "__len__", "__iter__", "__hash__", "__getitem__", "__instancecheck__")
'''

BODY = r'''
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

    checked = seal(__rollforge_plain__, checked)  # what the tests and the checks call

    if cfg.get("plain") == "probe":
        # unittest's assertions compare inside the framework: their operands are checked too
        # (before the snapshot, so the wrapped methods are what must still be there after)
        import unittest.case as _uc

        def guard(name, n):
            setattr(_uc.TestCase, name, seal(_rollforge_assertion, getattr(_uc.TestCase, name),
                                             fresh=True, _n=n, _c=checked))

        for name, n in (("assertEqual", 2), ("assertNotEqual", 2), ("assertTrue", 1),
                        ("assertFalse", 1), ("assertIn", 2), ("assertNotIn", 2),
                        ("assertListEqual", 2), ("assertTupleEqual", 2), ("assertSetEqual", 2),
                        ("assertDictEqual", 2), ("assertSequenceEqual", 2),
                        ("assertCountEqual", 2), ("assertGreater", 2), ("assertLess", 2),
                        ("assertGreaterEqual", 2), ("assertLessEqual", 2)):
            guard(name, n)
'''
