"""The grading plugin's check of compared values (envs/testfile/plugin/__init__.py joins the
parts): every value the rewritten tests compare (rewards/plain_compare.py) goes through
`checked`, which lets plain data through (scalars, containers of plain data, numpy scalars, a
subclass that overrides no method that decides a comparison) and fails the test with
`non_plain_result` otherwise, so the candidate's `__eq__` decides nothing. In "probe" mode (the
repo kind, whose tests compare the repository's own objects) an object passes too when it claims
to equal none of a set of probes drawn as the test runs (a stranger, and random plain values of
each family: ints, floats, strings, bytes, lists, tuples, dicts, sets) beyond what an honest
value can (one of two different small ones), and unittest's assertion methods check their
operands. A value compared with a plain one (`a == b`, an equality assertion) that is not plain
data itself must also say no to values next to the plain one."""

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

    # -- the probe (repo): fresh plain values drawn as the test runs, that no honest value equals
    # A type-aware liar (yes to any list, any int) says no to a stranger; so the value also
    # meets plain values of each family, "wide" ones (from a space no honest value of a package
    # can be expected to hit) and "small" ones (like a test's constants: an honest value may
    # equal one, never two that differ). Drawn from the OS, bound now: nothing the tested code
    # seeds or patches decides them. Their number and order vary, so a liar that counts calls
    # cannot tell the last probe from the test's own comparison.
    urandom, from_bytes, letters = _os.urandom, int.from_bytes, "abcdefghijklmnopqrstuvwxyz"
    SCALARS = (int, float, str, bytes)
    FAMILIES = SCALARS + (list, tuple, dict, set, frozenset)

    pool = [b"", 0]  # the OS's bytes, fetched in blocks: a probe draws a few dozen numbers

    def below(n):
        if pool[1] + 8 > len(pool[0]):
            pool[0], pool[1] = urandom(4096), 0
        i = pool[1]
        pool[1] = i + 8
        return from_bytes(pool[0][i:i + 8], "big") % n

    def shuffle(xs):
        for i in range(len(xs) - 1, 0, -1):
            j = below(i + 1)
            xs[i], xs[j] = xs[j], xs[i]
        return xs

    def scalar(kind, wide):
        if kind is int:
            return below(1 << 62) - (1 << 61) if wide else below(1100) - 64
        if kind is float:  # never integral when wide: it equals no int either
            return (below(1 << 52) + 0.5) / (1 << below(40)) if wide else (below(400) - 40) / 4
        text = "".join([letters[below(26)] for _ in range(16 if wide else 1 + below(2))])
        return text if kind is str else text.encode()

    def value(kind, wide):
        if kind in SCALARS:
            return scalar(kind, wide)
        n = 1 + below(4) if wide else below(6)  # wide: never empty (Counter() == {})
        hashable = (int, str, bytes)
        if kind is dict:
            return {scalar(hashable[below(3)], wide): scalar(SCALARS[below(4)], wide)
                    for _ in range(n)}
        items = [scalar((hashable if kind in (set, frozenset) else SCALARS)[below(3)], wide)
                 for _ in range(n)]
        return kind(items)

    def probes():
        """[(probe, wide)]: a stranger, one wide and two small values of every family, then
        a geometric number more (so no count is the last), in an order of chance."""
        out = [(Stranger(), True)] + [(value(k, w), w) for k in FAMILIES
                                     for w in (True, False, False)]
        while below(8) and len(out) < 96:
            w = bool(below(2))
            out.append((value(FAMILIES[below(len(FAMILIES))], w), w))
        return shuffle(out)

    def says(r):
        """A comparison's result as an assert reads it; None where it cannot be read (an
        honest array's elementwise result, an object that refuses)."""
        try:
            return bool(r)
        except RollforgeTimeout:
            raise
        except Exception:
            return None

    def claims(v, p):
        """Whether `v` says it equals `p`, by any of ==, == reflected and != in an order of
        chance; a comparison that raises says nothing (and counts as a call all the same)."""
        yes = False
        for op in shuffle([0, 1, 2]):
            try:
                r = says(v == p) if op == 0 else says(p == v) if op == 1 else says(v != p)
            except RollforgeTimeout:
                raise
            except Exception:
                continue
            yes = yes or (r is False if op == 2 else r is True)
        return yes

    def lies(v):
        claimed, held = [], []
        for p, wide in probes():
            held.append([p] * below(6))  # its reference count says nothing of where it is from
            if claims(v, p):
                if wide:
                    return True
                claimed.append(p)
        # an honest value equals at most one of values that differ from each other
        return any(a != b for i, a in enumerate(claimed) for b in claimed[:i])

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
        # but one that says it equals a stranger, a wide probe or two different small ones is
        # lying to every test (one that refuses to compare decides nothing)
        return tests_own(type_(v)) or not lies(v)

    # -- pairs: a value compared with a plain one also meets that one's neighbours ------------
    # A liar tuned to what a test's constants look like (yes to any str of their lengths, to
    # any int of their size) says no to every probe above and yes to the test's own constant.
    # Where the rewritten test compares two operands (`a == b`, `a != b`, an equality
    # assertion), the checker sees both, in order (a pair id: k on the left, -k on the right):
    # a value that is not plain data must then also say no to values next to the plain operand
    # (a character, a digit, an element changed, one added), which no value equal to it equals.
    pending = []  # [(pair id, thread, value, is plain)]: left operands awaiting their right
    ident = _thread.get_ident
    inf = float("inf")

    def other_letter(c):
        low = c.lower()
        while True:
            x = letters[below(26)]
            if x != low:
                return x

    def near(e, depth=0):
        """Plain values that differ from plain `e` by a little (a case-blind or a tolerant
        equality still tells them apart)."""
        t = base_of(type_(e))
        if t is bool:
            return [not e]
        if t is int:
            d = 1 + below(1000)
            return [e + d, e - d]
        if t is float:
            if e != e or e == inf or e == -inf:
                return []
            r = (abs(e) + 1.0) * (0.1 + below(900) / 1000)  # 10% to 100% away
            return [e + r, e - r]
        if t is str or t is bytes:
            text = e if t is str else e.decode("latin-1")
            out = [text + letters[below(26)]]
            if text:
                i = below(len(text))
                out.append(text[:i] + other_letter(text[i]) + text[i + 1:])
            return out if t is str else [x.encode("latin-1") for x in out]
        if t is list or t is tuple:
            items = list(e)
            out = [items + [scalar(int, True)]]
            if items and depth < 3:
                i = below(len(items))
                changed = near(items[i], depth + 1)
                if changed:
                    out.append(items[:i] + [changed[0]] + items[i + 1:])
            return [t(x) for x in out]
        if t is dict:
            out = [dict(e)]
            out[0][scalar(str, True)] = 0
            if e and depth < 3:
                k = list(e)[below(len(e))]
                changed = near(e[k], depth + 1)
                if changed:
                    out.append(dict(e))
                    out[1][k] = changed[0]
            return out
        if t is set or t is frozenset:
            return [t(set(e) | {scalar(str, True)})]
        return []  # None, complex, numpy scalars: left to the probe

    def lies_near(v, e):
        for n in near(e):
            if claims(v, n):
                return True
        return False

    def pair(v, is_plain, k):
        me = ident()
        if k > 0:
            if len(pending) > 64:  # left operands whose right side raised: never paired
                del pending[:32]
            pending.append((k, me, v, is_plain))
            return
        for i in range(len(pending) - 1, -1, -1):  # the innermost open comparison first
            if pending[i][0] == -k and pending[i][1] == me:
                u, u_plain = pending[i][2], pending[i][3]
                del pending[i:]
                break
        else:
            return
        if is_plain == u_plain:
            return  # plain against plain decides nothing; two of the package's own: no constant
        liar, const = (u, v) if is_plain else (v, u)
        if not tests_own(type_(liar)) and lies_near(liar, const):
            flag("non_plain_result")
            raise NotPlain("rollforge: a %s that equals values next to the one the test "
                           "expects" % type_(liar).__name__)

    def checked(v, k=0):
        is_plain = plain(v, set(), [100_000])
        if not (is_plain or (mode == "probe" and honest(v))):
            flag("non_plain_result")
            raise NotPlain("rollforge: the tests compare plain values only; got a %s"
                           % type_(v).__name__)
        if k and mode == "probe":
            pair(v, is_plain, k)
        return v

    checked = seal(__rollforge_plain__, checked)  # what the tests and the checks call

    if cfg.get("plain") == "probe":
        # unittest's assertions compare inside the framework: their operands are checked too
        # (before the snapshot, so the wrapped methods are what must still be there after)
        import unittest.case as _uc

        def guard(name, n, k):
            setattr(_uc.TestCase, name, seal(_rollforge_assertion, getattr(_uc.TestCase, name),
                                             fresh=True, _n=n, _c=checked, _k=k))

        # the equality assertions check their operands as a pair (k: a pair id of their own);
        # not assertNotEqual, as `!=` (rewards/plain_compare.py)
        for k, (name, n, eq) in enumerate((
                ("assertEqual", 2, 1), ("assertNotEqual", 2, 0), ("assertTrue", 1, 0),
                ("assertFalse", 1, 0), ("assertIn", 2, 0), ("assertNotIn", 2, 0),
                ("assertListEqual", 2, 1), ("assertTupleEqual", 2, 1), ("assertSetEqual", 2, 1),
                ("assertDictEqual", 2, 1), ("assertSequenceEqual", 2, 1),
                ("assertCountEqual", 2, 1), ("assertGreater", 2, 0), ("assertLess", 2, 0),
                ("assertGreaterEqual", 2, 0), ("assertLessEqual", 2, 0))):
            guard(name, n, eq * ((1 << 40) + k))
'''
