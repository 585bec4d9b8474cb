"""Arithmetic and control-flow families; each difficulty level is a different problem shape."""
from __future__ import annotations

from envs.io.families.base import Family, Level, leveled, level_of

_int = lambda rng, d: rng.randint(-12, 12) * (1 if d <= 3 else 10 ** (d - 3))  # noqa: E731

POLY = leveled("poly", "x", "arithmetic", _int, [
    Level(lambda r: {"a": r.randint(2, 9), "b": r.randint(1, 20)},
          lambda p: f"Return {p['a']} * x**2 + {p['b']}.",
          lambda p: f"{p['a']} * x ** 2 + {p['b']}",
          lambda p, x: p["a"] * x * x + p["b"]),
    Level(lambda r: {"a": r.randint(2, 9), "b": r.randint(2, 9), "c": r.randint(1, 20)},
          lambda p: f"Return {p['a']} * x**2 - {p['b']} * x + {p['c']}.",
          lambda p: f"{p['a']} * x ** 2 - {p['b']} * x + {p['c']}",
          lambda p, x: p["a"] * x * x - p["b"] * x + p["c"]),
    Level(lambda r: {"a": r.randint(2, 5), "b": r.randint(2, 9), "c": r.randint(2, 9),
                     "e": r.randint(1, 20)},
          lambda p: f"Return {p['a']} * x**3 + {p['b']} * x**2 - {p['c']} * x + {p['e']}.",
          lambda p: f"{p['a']} * x ** 3 + {p['b']} * x ** 2 - {p['c']} * x + {p['e']}",
          lambda p, x: p["a"] * x ** 3 + p["b"] * x * x - p["c"] * x + p["e"]),
])


def _range(r):
    return {"lo": r.randint(-10, 0), "hi": r.randint(1, 12)}


CLAMP = leveled("clamp", "x", "arithmetic", lambda r, d: r.randint(-25, 25) * max(1, d - 2), [
    Level(lambda r: {"lo": r.randint(-10, 10)},
          lambda p: f"Return x, but at least {p['lo']}.",
          lambda p: f"max(x, {p['lo']})", lambda p, x: max(x, p["lo"])),
    Level(_range, lambda p: f"Return x limited to the range {p['lo']} to {p['hi']}.",
          lambda p: f"min(max(x, {p['lo']}), {p['hi']})",
          lambda p, x: min(max(x, p["lo"]), p["hi"])),
    Level(_range,
          lambda p: f"Return how far x is from the range {p['lo']} to {p['hi']} (0 inside it).",
          lambda p: f"max({p['lo']} - x, 0, x - {p['hi']})",
          lambda p, x: max(p["lo"] - x, 0, x - p["hi"])),
])


def _digits_in(r, d):
    n = r.randint(0, 10 ** (2 + d))
    return -n if level_of(d, 3) == 2 and r.random() < 0.5 else n


def _base_digits(n, b):
    out = []
    while n:
        n, rem = divmod(n, b)
        out.insert(0, rem)
    return out or [0]


DIGITS = leveled("digits", "n", "arithmetic", _digits_in, [
    Level(lambda r: {"k": r.randint(1, 3)},
          lambda p: f"Return the last {p['k']} digits of n as an int (n >= 0).",
          lambda p: f"n % {10 ** p['k']}", lambda p, n: n % 10 ** p["k"]),
    Level(lambda r: {"k": r.randint(2, 7)},
          lambda p: f"Return the sum of the digits of n that are at least {p['k']}.",
          lambda p: f"sum(int(c) for c in str(abs(n)) if int(c) >= {p['k']})",
          lambda p, n: sum(int(c) for c in str(abs(n)) if int(c) >= p["k"])),
    Level(lambda r: {"b": r.randint(2, 9)},
          lambda p: f"Return the digits of n in base {p['b']}, most significant first ([0] for 0).",
          lambda p: (f"    out = []\n    while n:\n        n, r = divmod(n, {p['b']})\n"
                     f"        out.insert(0, r)\n    return out or [0]\n"),
          lambda p, n: _base_digits(n, p["b"]), block=True),
])


def _divisors(r, n):
    return dict(zip("abc", r.sample([2, 3, 4, 5, 6, 7, 9, 11], n)))


def _fizz(ks):
    words = ["Fizz", "Buzz", "Bazz"]

    def fn(p, n):
        return "".join(w for k, w in zip(ks, words) if n % p[k] == 0) or str(n)
    return fn


def _fizz_body(ks):
    words = ["Fizz", "Buzz", "Bazz"]

    def body(p):
        parts = [f"({w!r} if n % {p[k]} == 0 else '')" for k, w in zip(ks, words)]
        return " + ".join(parts) + " or str(n)"
    return body


FIZZBUZZ = leveled("fizzbuzz", "n", "control", lambda r, d: r.randint(1, 40 * d), [
    Level(lambda r: _divisors(r, 1),
          lambda p: f"Return 'Fizz' if {p['a']} divides n, else str(n).",
          lambda p: f"'Fizz' if n % {p['a']} == 0 else str(n)", _fizz("a")),
    Level(lambda r: _divisors(r, 2),
          lambda p: f"Return 'Fizz' if {p['a']} divides n, plus 'Buzz' if {p['b']} does; "
                    f"if neither, str(n).",
          _fizz_body("ab"), _fizz("ab")),
    Level(lambda r: _divisors(r, 3),
          lambda p: f"Return 'Fizz' if {p['a']} divides n, plus 'Buzz' if {p['b']} does, "
                    f"plus 'Bazz' if {p['c']} does; if none, str(n).",
          _fizz_body("abc"), _fizz("abc")),
])


def _grade3(p, x):
    if x < 0 or x > 100:
        return "?"
    return "A" if x >= p["t3"] else "B" if x >= p["t2"] else "C" if x >= p["t1"] else "F"


GRADE = leveled("grade", "x", "control",
                lambda r, d: r.randint(-15, 115) if level_of(d, 3) == 3 else r.randint(0, 100), [
    Level(lambda r: {"t": r.randint(20, 80)},
          lambda p: f"Return 'high' if x is at least {p['t']}, else 'low'.",
          lambda p: f"'high' if x >= {p['t']} else 'low'",
          lambda p, x: "high" if x >= p["t"] else "low"),
    Level(lambda r: {"t1": r.randint(15, 45), "t2": r.randint(55, 85)},
          lambda p: f"Return 'low' below {p['t1']}, 'high' from {p['t2']} on, else 'mid'.",
          lambda p: f"'low' if x < {p['t1']} else 'high' if x >= {p['t2']} else 'mid'",
          lambda p, x: "low" if x < p["t1"] else "high" if x >= p["t2"] else "mid"),
    Level(lambda r: {"t1": r.randint(20, 40), "t2": r.randint(45, 65), "t3": r.randint(70, 90)},
          lambda p: f"Return 'A' from {p['t3']}, 'B' from {p['t2']}, 'C' from {p['t1']}, "
                    f"else 'F'; '?' if x < 0 or x > 100.",
          lambda p: (f"    if x < 0 or x > 100:\n        return '?'\n"
                     f"    return 'A' if x >= {p['t3']} else 'B' if x >= {p['t2']} "
                     f"else 'C' if x >= {p['t1']} else 'F'\n"),
          _grade3, block=True),
])

LOOP_SUM = leveled("loop_sum", "n", "control", lambda r, d: r.randint(0, 30 * d), [
    Level(lambda r: {"k": r.randint(2, 9)},
          lambda p: f"Return the sum of the multiples of {p['k']} below n.",
          lambda p: f"sum(range(0, n, {p['k']}))", lambda p, n: sum(range(0, n, p["k"]))),
    Level(lambda r: dict(zip("ab", r.sample(range(2, 10), 2))),
          lambda p: f"Return the sum of the numbers below n divisible by {p['a']} or {p['b']}.",
          lambda p: f"sum(v for v in range(n) if v % {p['a']} == 0 or v % {p['b']} == 0)",
          lambda p, n: sum(v for v in range(n) if v % p["a"] == 0 or v % p["b"] == 0)),
    Level(lambda r: dict(zip("abc", r.sample(range(2, 10), 3))),
          lambda p: f"Return the sum of the numbers below n divisible by {p['a']} or {p['b']} "
                    f"but not by {p['c']}.",
          lambda p: (f"sum(v for v in range(n) if (v % {p['a']} == 0 or v % {p['b']} == 0) "
                     f"and v % {p['c']} != 0)"),
          lambda p, n: sum(v for v in range(n) if (v % p["a"] == 0 or v % p["b"] == 0)
                           and v % p["c"] != 0)),
])

NUMBERS: list[Family] = [POLY, CLAMP, DIGITS, FIZZBUZZ, GRADE, LOOP_SUM]
