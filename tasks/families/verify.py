"""Verification-only families: hidden tests and a docstring example, no reference solution.

Each one recombines wording and code the eight basic families teach ("plus" is `+`, "times"
is `*`, "the sum of xs" is `sum(xs)`, "how many times 'c' occurs in s" is `s.count('c')`) into
a function none of them shows. A policy warm-started on the basic families samples the right
program some of the time but does not reliably produce it, so GRPO groups carry signal; SFT
cannot help, since there is nothing to imitate. `body` is kept only to check the suite itself
(tests/unit/test_task_families.py runs it against the hidden tests); it never reaches a policy.
"""
from __future__ import annotations

from tasks.families.base import Family
from tasks.families.basic import _ALPHA, _K, _int_in, _list_in, _str_in

_SMALL = lambda r, d: r.randint(2, 3 + 2 * d)  # noqa: E731


def _vo(name, arg, draw_params, sentence, body, fn, draw_input) -> Family:
    return Family(name, arg, draw_params, sentence, body, fn, draw_input, category="verify",
                  levels=1, verify_only=True)


VERIFY: list[Family] = [
    _vo("sum_times", "xs", lambda r, d: {"k": r.randint(2, 9)},
        lambda p: f"Return the sum of xs times {p['k']}.",
        lambda p: f"sum(xs) * {p['k']}", lambda p, xs: sum(xs) * p["k"], _list_in),
    _vo("count_plus", "s", lambda r, d: {"c": r.choice(_ALPHA), "k": _K(r, d)},
        lambda p: f"Return how many times {p['c']!r} occurs in s plus {p['k']}.",
        lambda p: f"s.count({p['c']!r}) + {p['k']}", lambda p, s: s.count(p["c"]) + p["k"],
        _str_in),
    _vo("count_times", "s", lambda r, d: {"c": r.choice(_ALPHA), "k": _SMALL(r, d)},
        lambda p: f"Return how many times {p['c']!r} occurs in s times {p['k']}.",
        lambda p: f"s.count({p['c']!r}) * {p['k']}", lambda p, s: s.count(p["c"]) * p["k"],
        _str_in),
    _vo("prefix_repeat", "s", lambda r, d: {"k": r.randint(1, 3 + 2 * d), "m": _SMALL(r, d)},
        lambda p: f"Return the first {p['k']} characters of s repeated {p['m']} times.",
        lambda p: f"s[:{p['k']}] * {p['m']}", lambda p, s: s[: p["k"]] * p["m"], _str_in),
    _vo("add_add", "x", lambda r, d: {"a": _K(r, d), "b": _K(r, d)},
        lambda p: f"Return x plus {p['a']} plus {p['b']}.",
        lambda p: f"x + {p['a']} + {p['b']}", lambda p, x: x + p["a"] + p["b"], _int_in),
    _vo("mul_mul", "x", lambda r, d: {"a": r.randint(2, 9), "b": r.randint(2, 9)},
        lambda p: f"Return x times {p['a']} times {p['b']}.",
        lambda p: f"x * {p['a']} * {p['b']}", lambda p, x: x * p["a"] * p["b"], _int_in),
    _vo("filter_sum", "xs", lambda r, d: {"k": r.randint(0, 12)},
        lambda p: f"Return the sum of the items of xs greater than {p['k']}.",
        lambda p: f"sum([v for v in xs if v > {p['k']}])",
        lambda p, xs: sum(v for v in xs if v > p["k"]), _list_in),
    _vo("sum_plus_times", "xs", lambda r, d: {"a": r.randint(2, 9), "b": _K(r, d)},
        lambda p: f"Return the sum of xs times {p['a']} plus {p['b']}.",
        lambda p: f"sum(xs) * {p['a']} + {p['b']}", lambda p, xs: sum(xs) * p["a"] + p["b"],
        _list_in),
    _vo("repeat_plus", "s", lambda r, d: {"k": _SMALL(r, d), "t": r.choice(_ALPHA) * 2},
        lambda p: f"Return s repeated {p['k']} times plus {p['t']!r}.",
        lambda p: f"s * {p['k']} + {p['t']!r}", lambda p, s: s * p["k"] + p["t"], _str_in),
    _vo("prefix_plus", "s", lambda r, d: {"k": r.randint(1, 3 + 2 * d), "t": r.choice(_ALPHA) * 2},
        lambda p: f"Return the first {p['k']} characters of s plus {p['t']!r}.",
        lambda p: f"s[:{p['k']}] + {p['t']!r}", lambda p, s: s[: p["k"]] + p["t"], _str_in),
]
