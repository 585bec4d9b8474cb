"""Recursion and small-algorithm families; each difficulty level is a different problem shape.

`__self__` in a body is replaced by the task's own function name (see `base.SELF`).
"""
from __future__ import annotations

from functools import lru_cache

from envs.io.families.base import Level, leveled, level_of


def _seq(seeds, coef):
    @lru_cache(maxsize=None)
    def f(n):
        if n < len(seeds):
            return seeds[n]
        return sum(c * f(n - 1 - i) for i, c in enumerate(coef))
    return f


FIB_LIKE = leveled("fib_like", "n", "recursion", lambda r, d: r.randint(0, 8 + 2 * min(d, 3)), [
    Level(lambda r: {"a": r.randint(0, 5), "b": r.randint(1, 5)},
          lambda p: f"Return f(n): f(0) = {p['a']}, f(1) = {p['b']}, f(n) = f(n-1) + f(n-2).",
          lambda p: (f"    if n < 2:\n        return {p['a']} if n == 0 else {p['b']}\n"
                     f"    return __self__(n - 1) + __self__(n - 2)\n"),
          lambda p, n: _seq((p["a"], p["b"]), (1, 1))(n), block=True),
    Level(lambda r: {"a": r.randint(0, 3), "b": r.randint(1, 3), "c": r.randint(2, 3)},
          lambda p: f"Return f(n): f(0) = {p['a']}, f(1) = {p['b']}, "
                    f"f(n) = f(n-1) + {p['c']} * f(n-2).",
          lambda p: (f"    if n < 2:\n        return {p['a']} if n == 0 else {p['b']}\n"
                     f"    return __self__(n - 1) + {p['c']} * __self__(n - 2)\n"),
          lambda p, n: _seq((p["a"], p["b"]), (1, p["c"]))(n), block=True),
    Level(lambda r: {"a": r.randint(0, 2), "b": r.randint(0, 2), "c": r.randint(1, 3)},
          lambda p: f"Return f(n): f(0), f(1), f(2) = {p['a']}, {p['b']}, {p['c']}; "
                    f"f(n) = f(n-1) + f(n-2) + f(n-3).",
          lambda p: (f"    if n < 3:\n        return [{p['a']}, {p['b']}, {p['c']}][n]\n"
                     f"    return __self__(n - 1) + __self__(n - 2) + __self__(n - 3)\n"),
          lambda p, n: _seq((p["a"], p["b"], p["c"]), (1, 1, 1))(n), block=True),
])


def _nested(r, depth):
    out = []
    for _ in range(r.randint(0, 3)):
        if depth > 0 and r.random() < 0.4:
            out.append(_nested(r, depth - 1))
        else:
            out.append(r.randint(0, 9))
    return out


def _flatten_in(r, d):
    if level_of(d, 3) == 1:
        return [[r.randint(0, 9) for _ in range(r.randint(0, 3))] for _ in range(r.randint(0, 3))]
    return _nested(r, 1 + d)


def _flat(p, xs):
    out = []
    for v in xs:
        out += _flat(p, v) if isinstance(v, list) else [v] if v > p["k"] else []
    return out


def _depth_sum(v, depth):
    return sum(_depth_sum(x, depth + 1) for x in v) if isinstance(v, list) else v * depth


FLATTEN = leveled("flatten", "xs", "recursion", _flatten_in, [
    Level(lambda r: {"k": r.randint(0, 6)},
          lambda p: f"Return the items greater than {p['k']} of the lists in xs, in order.",
          lambda p: f"[v for sub in xs for v in sub if v > {p['k']}]",
          lambda p, xs: [v for sub in xs for v in sub if v > p["k"]]),
    Level(lambda r: {"k": r.randint(0, 6)},
          lambda p: f"Return the numbers greater than {p['k']} in the nested list xs, "
                    f"flattened in order.",
          lambda p: (f"    out = []\n    for v in xs:\n        if isinstance(v, list):\n"
                     f"            out += __self__(v)\n        elif v > {p['k']}:\n"
                     f"            out.append(v)\n    return out\n"),
          _flat, block=True),
    Level(lambda r: {"k": r.randint(1, 3)},
          lambda p: f"Return the sum of each number in nested list xs times its depth "
                    f"(its items are at depth {p['k']}).",
          lambda p: (f"    def walk(v, depth):\n        if isinstance(v, list):\n"
                     f"            return sum(walk(x, depth + 1) for x in v)\n"
                     f"        return v * depth\n"
                     f"    return sum(walk(v, {p['k']}) for v in xs)\n"),
          lambda p, xs: sum(_depth_sum(v, p["k"]) for v in xs), block=True),
])


def _ways(steps, avoid=0):
    @lru_cache(maxsize=None)
    def f(n):
        if avoid and n > 0 and n % avoid == 0:
            return 0
        return 1 if n == 0 else sum(f(n - s) for s in steps if s <= n)
    return f


STAIRS = leveled("stairs", "n", "recursion", lambda r, d: r.randint(0, 10 + min(d, 4)), [
    Level(lambda r: {"a": r.randint(2, 4)},
          lambda p: f"Return the number of ways to climb n stairs with steps of 1 or {p['a']}.",
          lambda p: f"1 if n == 0 else sum(__self__(n - s) for s in (1, {p['a']}) if s <= n)",
          lambda p, n: _ways((1, p["a"]))(n)),
    Level(lambda r: dict(zip("ab", sorted(r.sample(range(2, 6), 2)))),
          lambda p: f"Return the number of ways to climb n stairs with steps of 1, {p['a']} "
                    f"or {p['b']}.",
          lambda p: f"1 if n == 0 else sum(__self__(n - s) for s in (1, {p['a']}, {p['b']}) "
                    f"if s <= n)",
          lambda p, n: _ways((1, p["a"], p["b"]))(n)),
    Level(lambda r: {"a": r.randint(2, 3), "m": r.randint(3, 5)},
          lambda p: f"Return the ways to climb n stairs by steps of 1 or {p['a']}, never on a "
                    f"stair k > 0 with k % {p['m']} == 0.",
          lambda p: (f"    if n > 0 and n % {p['m']} == 0:\n        return 0\n"
                     f"    return 1 if n == 0 else sum(__self__(n - s) for s in (1, {p['a']}) "
                     f"if s <= n)\n"),
          lambda p, n: _ways((1, p["a"]), p["m"])(n), block=True),
])

_EUCLID = "    while b:\n        a, b = b, a % b\n"


def _gcd(a, b):
    while b:
        a, b = b, a % b
    return a


GCD_K = leveled("gcd_k", "x", "algorithms", lambda r, d: r.randint(1, 60 * d), [
    Level(lambda r: {"k": r.choice([6, 8, 9, 10, 12, 14, 15, 18, 20, 24, 30])},
          lambda p: f"Return the greatest common divisor of x and {p['k']}.",
          lambda p: f"    a, b = x, {p['k']}\n{_EUCLID}    return a\n",
          lambda p, x: _gcd(x, p["k"]), block=True),
    Level(lambda r: {"k": r.choice([4, 6, 8, 9, 10, 12, 14, 15, 18])},
          lambda p: f"Return the least common multiple of x and {p['k']} (x >= 1).",
          lambda p: f"    a, b = x, {p['k']}\n{_EUCLID}    return x * {p['k']} // a\n",
          lambda p, x: x * p["k"] // _gcd(x, p["k"]), block=True),
    Level(lambda r: {"k": r.choice([4, 6, 8, 9, 10, 12, 14, 15, 18])},
          lambda p: f"Return how many of 1..x share no factor above 1 with {p['k']}.",
          lambda p: (f"    count = 0\n    for v in range(1, x + 1):\n        a, b = v, {p['k']}\n"
                     f"        while b:\n            a, b = b, a % b\n        count += a == 1\n"
                     f"    return count\n"),
          lambda p, x: sum(_gcd(v, p["k"]) == 1 for v in range(1, x + 1)), block=True),
])
