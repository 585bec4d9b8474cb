"""A procedural suite of small Python function tasks: seeded, reproducible, split by content.

The families live in `envs/io/families/` (the original eight in `basic.py`, whose tasks must never
change; the others pick a different problem shape per difficulty level). The constants of a task
appear in its docstring, so a policy must read the prompt, not memorise a family.
"""
from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from envs.io.families import ALL, Family
from envs.io.families.base import Params, distinct_params
from envs.io.families.edges import EdgeFamily
from tasks.record import Task, TestCase

FAMILIES: dict[str, Family] = {f.name: f for f in ALL}
CATEGORIES: dict[str, list[str]] = {}
for _f in ALL:
    CATEGORIES.setdefault(_f.category, []).append(_f.name)


def _task_hash(family: str, params: Params, difficulty: int) -> str:
    key = f"{family}|{sorted(params.items())}|{difficulty}"
    return hashlib.sha256(key.encode()).hexdigest()[:12]


_BLAND = (None, [], {}, "", 0, False)


def _canon(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


def _draw_cases(family: Family, params: Params, difficulty: int, n_tests: int,
                rng: random.Random) -> list[TestCase]:
    inputs, seen = [], set()
    for _ in range(n_tests * 20):
        x = family.draw_input(rng, difficulty)
        if repr(x) not in seen:
            seen.add(repr(x))
            inputs.append(x)
        if len(inputs) == n_tests + 1:
            break
    args = [tuple(x) if family.n_args > 1 else (x,) for x in inputs]
    cases = [TestCase(args=a, expected=family.fn(params, *a)) for a in args]
    if family.levels:  # newer families show an example whose answer says something
        i = next((i for i, c in enumerate(cases) if c.expected not in _BLAND), 0)
        cases.insert(0, cases.pop(i))
    if family.levels and len({_canon(c.expected) for c in cases[1:]}) <= 1:
        # A newer family must not let a constant pass its hidden tests: swap in an input
        # with a different answer (the original eight are frozen and keep their draws).
        for _ in range(n_tests * 20):
            x = family.draw_input(rng, difficulty)
            a = tuple(x) if family.n_args > 1 else (x,)
            y = family.fn(params, *a)
            if repr(x) not in seen and _canon(y) != _canon(cases[-1].expected):
                cases[-1] = TestCase(args=a, expected=y)
                break
    return cases


def make_task(family: Family, params: Params, difficulty: int, n_tests: int, seed: int,
              heldout_fraction: float, with_solution: bool = False,
              function_name: str | None = None) -> Task:
    h = _task_hash(family.name, params, difficulty)
    rng = random.Random(f"{seed}:{h}")
    cases = _draw_cases(family, params, difficulty, n_tests, rng)
    example, hidden = cases[0], tuple(cases[1:])
    examples = (example,)
    edge_inputs = getattr(family, "edge_inputs", None)  # envs/io/families/edges.py only
    if edge_inputs is not None:  # the edges: a second visible example, and hidden tests
        edges = [TestCase(args=a, expected=family.fn(params, *a)) for a in
                 (tuple(x) if family.n_args > 1 else (x,) for x in edge_inputs(params, rng))]
        seen = {json.dumps(c.args) for c in hidden}
        examples = (example, edges[0])
        hidden += tuple(e for e in edges if json.dumps(e.args) not in seen)
    # Every task of a family has the same signature: the task is told apart by its docstring
    # alone, so a policy must read the constants there (a per-task name would let a small model
    # memorise name -> body and learn nothing that transfers to held-out tasks). With
    # `function_name`, every family shares one name: a small model then cannot tell the
    # problem from the name either, and must read the docstring's words (what lets a policy
    # warm-started on some families attempt the verification-only ones).
    fname = function_name or family.function_name or family.name
    call = ", ".join(repr(a) for a in example.args)
    prompt = (f"def {fname}({family.arg}):\n"
              f'    """{family.sentence(params)}\n'
              f"    >>> {fname}({call})\n"
              f"    {example.expected!r}\n"
              f'    """\n')
    # The split is a pure function of the task's content, so it never depends on sampling order.
    # Difficulty is left out: the same constants at two levels are the same function, and must
    # never sit on both sides of the split.
    hs = _task_hash(family.split_as or family.name, params, 0)
    split = "heldout" if int(hs, 16) % 1000 < heldout_fraction * 1000 else "train"
    return Task(task_id=f"proc/{family.name}/{h}", suite="procedural", family=family.name,
                difficulty=difficulty, split=split, prompt=prompt, entry_point=fname,
                tests=hidden, examples=examples,
                reference=(family.solution if with_solution else family.reference)(params, fname))


def _check_function_name(function_name: str | None) -> None:
    if function_name is not None and not function_name.isidentifier():
        raise ValueError(f"function_name={function_name!r}: expected a Python identifier")


def generate_suite(families: list[str], difficulties: list[int], tasks_per_family: int,
                   n_tests: int = 6, seed: int = 0, heldout_fraction: float = 0.2,
                   with_solutions: bool = False, function_name: str | None = None) -> list[Task]:
    """Up to `tasks_per_family` distinct tasks per (family, difficulty), deduplicated by content.

    `with_solutions=True` fills `reference` for verification-only families too: only for
    checking the suite itself, never for data a policy trains on. `function_name`: one name for
    every task (default: each family's own name)."""
    _check_function_name(function_name)
    return _suite(families, difficulties, tasks_per_family, n_tests, seed, heldout_fraction,
                  with_solutions, lambda _key: function_name)


def _suite(families, difficulties, tasks_per_family, n_tests, seed, heldout_fraction,
           with_solutions, name_for) -> list[Task]:
    """generate_suite, each task's function name `name_for(its content hash)` (None: the
    family's own)."""
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown task families {unknown}; expected some of {sorted(FAMILIES)}")
    out: dict[str, Task] = {}
    for name in families:
        fam = FAMILIES[name]
        for d in difficulties:
            rng = random.Random(f"{seed}:{name}:{d}")
            for params in distinct_params(lambda: fam.draw_params(rng, d), tasks_per_family):
                t = make_task(fam, params, d, n_tests, seed, heldout_fraction, with_solutions,
                              name_for(_task_hash(fam.name, params, d)))
                out.setdefault(t.fingerprint(), t)
    return sorted(out.values(), key=lambda t: t.task_id)


# The names a demonstration may be shown under instead of its family's (`generic_names`):
# words that say nothing of the program, none of them a family's or a verification-only
# family's name (tests/unit/test_tasks_procedural.py checks), so the name cannot tell the
# program and the docstring must.
GENERIC_NAMES = ("f", "g", "fn", "func", "solve", "compute", "answer", "calc", "apply",
                 "transform", "process", "evaluate", "result", "run", "task", "op")


def _generic_name(seed: int, key: str, share: float) -> str | None:
    """A generic name for the task with content hash `key` in variant `seed`, for a `share` of
    them (by hash: the same on every machine); None for the rest."""
    u = int(hashlib.sha256(f"{seed}:{key}:generic".encode()).hexdigest()[:12], 16)
    if (u % 10_000) >= share * 10_000:
        return None
    return GENERIC_NAMES[(u // 10_000) % len(GENERIC_NAMES)]


def training_instances(families: list[str], difficulties: list[int], tasks_per_family: int,
                       n_tests: int = 6, seed: int = 0, heldout_fraction: float = 0.2,
                       variants: int = 1, function_name: str | None = None,
                       generic_names: float = 0.0) -> list[Task]:
    """Training-split tasks drawn with `variants` seeds (seed, seed+1, ...): more constants and
    freshly drawn examples for the same families, so a warm start cannot memorise examples and
    must read the docstring. No held-out task can appear: the split depends only on a task's
    family, constants and difficulty, never on the seed.

    `generic_names`: the share of them shown under a name from GENERIC_NAMES instead of their
    family's (unless `function_name` names them all): demonstrations whose name says nothing,
    so the warm start also learns to write the program the docstring asks for under a name it
    does not know."""
    if variants < 1:
        raise ValueError(f"variants={variants}: expected >= 1")
    if not 0.0 <= generic_names <= 1.0:
        raise ValueError(f"generic_names={generic_names}: expected a share in [0, 1]")
    _check_function_name(function_name)
    out: dict[str, Task] = {}
    for s in range(seed, seed + variants):
        def name_for(key: str, s=s) -> str | None:
            return function_name or _generic_name(s, key, generic_names)
        for t in _suite(families, difficulties, tasks_per_family, n_tests, s, heldout_fraction,
                        False, name_for):
            if t.split == "train":
                out.setdefault(t.fingerprint(), t)
    return sorted(out.values(), key=lambda t: t.task_id)


def first_attempts(families: list[str], difficulties: list[int], tasks_per_family: int,
                   seed: int = 0, variants: int = 1) -> dict[str, str]:
    """task_id -> naive body, for the edge families among `families`, over the same draws as
    `generate_suite` (and `training_instances` with `variants` seeds)."""
    out: dict[str, str] = {}
    for s in range(seed, seed + variants):
        for name in families:
            fam = FAMILIES.get(name)
            if not isinstance(fam, EdgeFamily):
                continue
            for d in difficulties:
                rng = random.Random(f"{s}:{name}:{d}")
                for params in distinct_params(lambda: fam.draw_params(rng, d), tasks_per_family):
                    tid = f"proc/{name}/{_task_hash(name, params, d)}"
                    out.setdefault(tid, fam.naive_reference(params, name))
    return out
