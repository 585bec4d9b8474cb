"""Verification-only families: hidden tests and a docstring example, no reference solution.

Each one recombines wording and code the eight basic families teach ("plus" is `+`, "times"
is `*`, "the sum of xs" is `sum(xs)`, "how many times 'c' occurs in s" is `s.count('c')`) into
a function none of them shows. A policy warm-started on the basic families samples the right
program some of the time but does not reliably produce it, so GRPO groups carry signal; SFT
cannot help, since there is nothing to imitate. `body` is kept only to check the suite itself
(tests/unit/test_task_families.py runs it against the hidden tests); it never reaches a policy.
"""
from __future__ import annotations

from envs.io.families.base import Family
from envs.io.families.basic import ALPHA, BASIC, K, int_in, list_in, str_in

_SMALL = lambda r, d: r.randint(2, 3 + 2 * d)  # noqa: E731


def _vo(name, arg, draw_params, sentence, body, fn, draw_input, split_as=None,
        function_name=None) -> Family:
    return Family(name, arg, draw_params, sentence, body, fn, draw_input, category="verify",
                  levels=1, verify_only=True, split_as=split_as, function_name=function_name)


VERIFY: list[Family] = [
    _vo("sum_times", "xs", lambda r, d: {"k": r.randint(2, 9)},
        lambda p: f"Return the sum of xs times {p['k']}.",
        lambda p: f"sum(xs) * {p['k']}", lambda p, xs: sum(xs) * p["k"], list_in),
    _vo("count_plus", "s", lambda r, d: {"c": r.choice(ALPHA), "k": K(r, d)},
        lambda p: f"Return how many times {p['c']!r} occurs in s plus {p['k']}.",
        lambda p: f"s.count({p['c']!r}) + {p['k']}", lambda p, s: s.count(p["c"]) + p["k"],
        str_in),
    _vo("count_times", "s", lambda r, d: {"c": r.choice(ALPHA), "k": _SMALL(r, d)},
        lambda p: f"Return how many times {p['c']!r} occurs in s times {p['k']}.",
        lambda p: f"s.count({p['c']!r}) * {p['k']}", lambda p, s: s.count(p["c"]) * p["k"],
        str_in),
    _vo("prefix_repeat", "s", lambda r, d: {"k": r.randint(1, 3 + 2 * d), "m": _SMALL(r, d)},
        lambda p: f"Return the first {p['k']} characters of s repeated {p['m']} times.",
        lambda p: f"s[:{p['k']}] * {p['m']}", lambda p, s: s[: p["k"]] * p["m"], str_in),
    _vo("add_add", "x", lambda r, d: {"a": K(r, d), "b": K(r, d)},
        lambda p: f"Return x plus {p['a']} plus {p['b']}.",
        lambda p: f"x + {p['a']} + {p['b']}", lambda p, x: x + p["a"] + p["b"], int_in),
    _vo("mul_mul", "x", lambda r, d: {"a": r.randint(2, 9), "b": r.randint(2, 9)},
        lambda p: f"Return x times {p['a']} times {p['b']}.",
        lambda p: f"x * {p['a']} * {p['b']}", lambda p, x: x * p["a"] * p["b"], int_in),
    _vo("filter_sum", "xs", lambda r, d: {"k": r.randint(0, 12)},
        lambda p: f"Return the sum of the items of xs greater than {p['k']}.",
        lambda p: f"sum([v for v in xs if v > {p['k']}])",
        lambda p, xs: sum(v for v in xs if v > p["k"]), list_in),
    _vo("sum_plus_times", "xs", lambda r, d: {"a": r.randint(2, 9), "b": K(r, d)},
        lambda p: f"Return the sum of xs times {p['a']} plus {p['b']}.",
        lambda p: f"sum(xs) * {p['a']} + {p['b']}", lambda p, xs: sum(xs) * p["a"] + p["b"],
        list_in),
    _vo("repeat_plus", "s", lambda r, d: {"k": _SMALL(r, d), "t": r.choice(ALPHA) * 2},
        lambda p: f"Return s repeated {p['k']} times plus {p['t']!r}.",
        lambda p: f"s * {p['k']} + {p['t']!r}", lambda p, s: s * p["k"] + p["t"], str_in),
    _vo("prefix_plus", "s", lambda r, d: {"k": r.randint(1, 3 + 2 * d), "t": r.choice(ALPHA) * 2},
        lambda p: f"Return the first {p['k']} characters of s plus {p['t']!r}.",
        lambda p: f"s[:{p['k']}] + {p['t']!r}", lambda p, s: s[: p["k"]] + p["t"], str_in),
]


# Reworded: each is one of the basic families' programs, asked for in words the basic families
# never use ("exceeding" for "greater than", "written k times" for "repeated k times"), with the
# inputs of that family and, for the filter and repeat ones, a constant drawn from a somewhat
# wider range (so that held-out tasks are more than one or two; a prefix longer than the longest
# input would let `return s` pass, so those keep the base range). A policy warm-started on the
# basic families knows every program these need; what it lacks is the meaning of the new words,
# and no demonstration shows it. Its samples pick among the programs it knows, so some are right
# and a group's rewards differ: the signal GRPO learns from, and imitating the references cannot
# supply.
_FILTER_K = lambda r, d: {"k": r.randint(0, 9 + 6 * d)}  # noqa: E731
_REPEAT_K = lambda r, d: {"k": r.randint(2, 4 + 4 * d)}  # noqa: E731


def _reword(name: str, like: str, sentence=None, draw=None, function_name=None) -> Family:
    """Basic family `like`'s program under `name`, asked for by `sentence` (default: its own),
    its prompts naming the function `function_name` (default: `name`)."""
    base = next(f for f in BASIC if f.name == like)
    return _vo(name, base.arg, draw or base.draw_params, sentence or base.sentence, base.body,
               base.fn, base.draw_input, split_as=like, function_name=function_name)


REWORDED: list[Family] = [
    _reword("increased", "add", lambda p: f"Return x increased by {p['k']}."),
    _reword("more_than", "add", lambda p: f"Return {p['k']} more than x."),
    _reword("multiplied", "mul", lambda p: f"Return x multiplied by {p['k']}."),
    _reword("sum_increased", "sum_plus", lambda p: f"Return the sum of xs increased by {p['k']}."),
    _reword("larger", "filter_gt", lambda p: f"Return the elements of xs larger than {p['k']}.",
            _FILTER_K),
    _reword("bigger", "filter_gt", lambda p: f"Return the items of xs bigger than {p['k']}.",
            _FILTER_K),
    _reword("exceeding", "filter_gt", lambda p: f"Return the items of xs exceeding {p['k']}.",
            _FILTER_K),
    _reword("written", "repeat", lambda p: f"Return s written {p['k']} times.", _REPEAT_K),
    _reword("s_times", "repeat", lambda p: f"Return s, {p['k']} times over.", _REPEAT_K),
    _reword("count_of", "count", lambda p: f"Return the count of {p['c']!r} in s."),
    _reword("first_chars", "prefix", lambda p: f"Return the first {p['k']} chars of s."),
    _reword("leading", "prefix", lambda p: f"Return the leading {p['k']} characters of s."),
    _reword("start", "prefix", lambda p: f"Return the start of s, {p['k']} characters at most."),
]


# Renamed: a basic family's task word for word, under a function name the warm start never saw.
# A policy that learned "name -> program" from the references (what a small model imitating them
# does) stumbles; one that reads the docstring does not. Only the reward can teach the latter
# here: there is no demonstration under these names.
RENAMED: list[Family] = [_reword("plus", "add"), _reword("times", "mul"),
                         _reword("keep", "filter_gt"), _reword("dup", "repeat"),
                         _reword("head", "prefix"), _reword("sum_add", "sum_plus")]


# Longer: a basic family's task under its own function name and in its own words, with a
# constant of three digits where its references (difficulties 1 and 2) show one or two. The
# program is one the warm start knows and the name says which; what it has never done is copy a
# three-digit number out of the docstring, and no demonstration shows it. Measured on the
# default warm start (seeds 1 and 2, 480 tasks each): greedy 0.000, sampled 0.002, so a group
# almost never carries signal and these are not in the default mix; kept, like the composed
# families, as a harder set for larger models.
def _longer(like: str, draw) -> Family:
    return _reword(f"long_{like}", like, draw=draw, function_name=like)


LONGER: list[Family] = [
    _longer("add", lambda r, d: {"k": r.randint(100, 999)}),
    _longer("mul", lambda r, d: {"k": r.randint(100, 999)}),
    _longer("affine", lambda r, d: {"a": r.randint(2, 9), "b": r.randint(100, 999)}),
    _longer("sum_plus", lambda r, d: {"k": r.randint(100, 999)}),
]
