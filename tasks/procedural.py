"""A procedural suite of small Python function tasks: seeded, reproducible, split by content.

Each family is a small table row: how its parameters are drawn at a difficulty, the docstring
sentence, the reference body and the semantics used to compute expected outputs. The constants
of a task appear in its docstring, so a policy must read the prompt, not memorise a family.
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any, Callable

from tasks.record import Task, TestCase

Params = dict[str, Any]


@dataclass(frozen=True)
class Family:
    name: str
    arg: str  # parameter name in the signature
    draw_params: Callable[[random.Random, int], Params]  # (rng, difficulty) -> params
    sentence: Callable[[Params], str]
    body: Callable[[Params], str]  # reference expression after `return `
    fn: Callable[[Params, Any], Any]  # semantics: (params, input) -> output
    draw_input: Callable[[random.Random, int], Any]


def _const(lo: int, hi_by_level: tuple[int, ...]) -> Callable[[random.Random, int], int]:
    return lambda rng, d: rng.randint(lo, hi_by_level[min(d, len(hi_by_level)) - 1])


_K = _const(1, (9, 99, 999))
_int_in = lambda rng, d: rng.randint(-20, 20) * (10 ** (d - 1) if d > 1 else 1)  # noqa: E731
_list_in = lambda rng, d: [rng.randint(-9, 30) for _ in range(rng.randint(0, 3 + 2 * d))]  # noqa: E731
_ALPHA = "abcde"
_str_in = lambda rng, d: "".join(rng.choice(_ALPHA) for _ in range(rng.randint(0, 4 + 3 * d)))  # noqa: E731

FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("add", "x", lambda r, d: {"k": _K(r, d)}, lambda p: f"Return x plus {p['k']}.",
           lambda p: f"x + {p['k']}", lambda p, x: x + p["k"], _int_in),
    Family("mul", "x", lambda r, d: {"k": _K(r, d) + 1}, lambda p: f"Return x times {p['k']}.",
           lambda p: f"x * {p['k']}", lambda p, x: x * p["k"], _int_in),
    Family("affine", "x", lambda r, d: {"a": r.randint(2, 9), "b": _K(r, d)},
           lambda p: f"Return x times {p['a']} plus {p['b']}.",
           lambda p: f"x * {p['a']} + {p['b']}", lambda p, x: x * p["a"] + p["b"], _int_in),
    Family("filter_gt", "xs", lambda r, d: {"k": r.randint(0, 9 * d)},
           lambda p: f"Return the items of xs greater than {p['k']}.",
           lambda p: f"[v for v in xs if v > {p['k']}]",
           lambda p, xs: [v for v in xs if v > p["k"]], _list_in),
    Family("sum_plus", "xs", lambda r, d: {"k": _K(r, d)},
           lambda p: f"Return the sum of xs plus {p['k']}.",
           lambda p: f"sum(xs) + {p['k']}", lambda p, xs: sum(xs) + p["k"], _list_in),
    Family("repeat", "s", lambda r, d: {"k": r.randint(2, 3 + 2 * d)},
           lambda p: f"Return s repeated {p['k']} times.",
           lambda p: f"s * {p['k']}", lambda p, s: s * p["k"], _str_in),
    Family("count", "s", lambda r, d: {"c": r.choice(_ALPHA)},
           lambda p: f"Return how many times {p['c']!r} occurs in s.",
           lambda p: f"s.count({p['c']!r})", lambda p, s: s.count(p["c"]), _str_in),
    Family("prefix", "s", lambda r, d: {"k": r.randint(1, 3 + 2 * d)},
           lambda p: f"Return the first {p['k']} characters of s.",
           lambda p: f"s[:{p['k']}]", lambda p, s: s[: p["k"]], _str_in),
]}


def _task_hash(family: str, params: Params, difficulty: int) -> str:
    key = f"{family}|{sorted(params.items())}|{difficulty}"
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def make_task(family: Family, params: Params, difficulty: int, n_tests: int, seed: int,
              heldout_fraction: float) -> Task:
    h = _task_hash(family.name, params, difficulty)
    rng = random.Random(f"{seed}:{h}")
    inputs, seen = [], set()
    for _ in range(n_tests * 20):
        x = family.draw_input(rng, difficulty)
        if repr(x) not in seen:
            seen.add(repr(x))
            inputs.append(x)
        if len(inputs) == n_tests + 1:
            break
    cases = [TestCase(args=(x,), expected=family.fn(params, x)) for x in inputs]
    example, hidden = cases[0], tuple(cases[1:])
    fname = f"{family.name}_{h[:4]}"
    prompt = (f"def {fname}({family.arg}):\n"
              f'    """{family.sentence(params)}\n'
              f"    >>> {fname}({example.args[0]!r})\n"
              f"    {example.expected!r}\n"
              f'    """\n')
    # The split is a pure function of the task's content, so it never depends on sampling order.
    split = "heldout" if int(h, 16) % 1000 < heldout_fraction * 1000 else "train"
    return Task(task_id=f"proc/{family.name}/{h}", suite="procedural", family=family.name,
                difficulty=difficulty, split=split, prompt=prompt, entry_point=fname,
                tests=hidden, examples=(example,), reference=f"    return {family.body(params)}\n")


def generate_suite(families: list[str], difficulties: list[int], tasks_per_family: int,
                   n_tests: int = 6, seed: int = 0, heldout_fraction: float = 0.2) -> list[Task]:
    """Up to `tasks_per_family` distinct tasks per (family, difficulty), deduplicated by content."""
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown task families {unknown}; expected some of {sorted(FAMILIES)}")
    out: dict[str, Task] = {}
    for name in families:
        fam = FAMILIES[name]
        for d in difficulties:
            rng = random.Random(f"{seed}:{name}:{d}")
            seen: set[str] = set()
            for _ in range(tasks_per_family * 10):
                params = fam.draw_params(rng, d)
                key = repr(sorted(params.items()))
                if key in seen:
                    continue
                seen.add(key)
                t = make_task(fam, params, d, n_tests, seed, heldout_fraction)
                out.setdefault(t.fingerprint(), t)
                if len(seen) == tasks_per_family:
                    break
    return sorted(out.values(), key=lambda t: t.task_id)
