"""The first eight families (one expression each; difficulty grows constants and inputs).

These are frozen: a tiny byte-level model is trained on them by the default run, so their
parameters, wording, ids, splits and reference bodies must not change.
"""
from __future__ import annotations

from envs.io.families.base import Family


def _const(lo: int, hi_by_level: tuple[int, ...]):
    return lambda rng, d: rng.randint(lo, hi_by_level[min(d, len(hi_by_level)) - 1])


# The draws of a constant and of each input type, shared with verify.py's families (which
# recombine these ones and draw as they do).
K = _const(1, (9, 99, 999))
int_in = lambda rng, d: rng.randint(-20, 20) * (10 ** (d - 1) if d > 1 else 1)  # noqa: E731
list_in = lambda rng, d: [rng.randint(-9, 30) for _ in range(rng.randint(0, 3 + 2 * d))]  # noqa: E731
ALPHA = "abcde"
str_in = lambda rng, d: "".join(rng.choice(ALPHA) for _ in range(rng.randint(0, 4 + 3 * d)))  # noqa: E731

BASIC: list[Family] = [
    Family("add", "x", lambda r, d: {"k": K(r, d)}, lambda p: f"Return x plus {p['k']}.",
           lambda p: f"x + {p['k']}", lambda p, x: x + p["k"], int_in),
    Family("mul", "x", lambda r, d: {"k": K(r, d) + 1}, lambda p: f"Return x times {p['k']}.",
           lambda p: f"x * {p['k']}", lambda p, x: x * p["k"], int_in),
    Family("affine", "x", lambda r, d: {"a": r.randint(2, 9), "b": K(r, d)},
           lambda p: f"Return x times {p['a']} plus {p['b']}.",
           lambda p: f"x * {p['a']} + {p['b']}", lambda p, x: x * p["a"] + p["b"], int_in),
    Family("filter_gt", "xs", lambda r, d: {"k": r.randint(0, 9 * d)},
           lambda p: f"Return the items of xs greater than {p['k']}.",
           lambda p: f"[v for v in xs if v > {p['k']}]",
           lambda p, xs: [v for v in xs if v > p["k"]], list_in),
    Family("sum_plus", "xs", lambda r, d: {"k": K(r, d)},
           lambda p: f"Return the sum of xs plus {p['k']}.",
           lambda p: f"sum(xs) + {p['k']}", lambda p, xs: sum(xs) + p["k"], list_in),
    Family("repeat", "s", lambda r, d: {"k": r.randint(2, 3 + 2 * d)},
           lambda p: f"Return s repeated {p['k']} times.",
           lambda p: f"s * {p['k']}", lambda p, s: s * p["k"], str_in),
    Family("count", "s", lambda r, d: {"c": r.choice(ALPHA)},
           lambda p: f"Return how many times {p['c']!r} occurs in s.",
           lambda p: f"s.count({p['c']!r})", lambda p, s: s.count(p["c"]), str_in),
    Family("prefix", "s", lambda r, d: {"k": r.randint(1, 3 + 2 * d)},
           lambda p: f"Return the first {p['k']} characters of s.",
           lambda p: f"s[:{p['k']}]", lambda p, s: s[: p["k"]], str_in),
]
