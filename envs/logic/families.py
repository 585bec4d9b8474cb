"""Procedural logic problems: premises, a goal and a reference chain, each drawn from one RNG.

Every family builds its premises from a witness model (which satisfies them, so the premises
are consistent by construction: the generator asserts it) and its reference from the inference
rule it teaches, with at most two citations a step. The goal never follows from two premises
alone, so each reference has at least two steps and restating the goal is never a proof.

| family | level | premises | goal |
|---|---|---|---|
| modus_ponens | 1 | A, A -> B, B -> C (2-3 links), a distractor | the chain's end |
| disjunctive_syllogism | 1 | A or B (or C), not A (not B), B -> D | D |
| modus_tollens | 2 | A -> B, B -> C (2-3 links), not C | not A |
| hypothetical_syllogism | 2 | A -> B, B -> C, C -> D (3-4 links) | A -> D |
| syllogism | 2 | categorical: all x. (dog(x) -> pet(x)), dog(rex), ... | pet(rex), all/some ... |
| dilemma | 3 | A or B, A -> C, B -> D, C -> E, D -> E (or the short form) | E |
| knights_knaves | 3 | K_a <-> (what a said), for a, b, c | find who is a knight |
| integers | 3 | x + y = 7, x - y >= 3, y >= 2 (or three equations) | find x, y (and z) |
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Callable, Literal

from envs.logic.syntax import Model, holds, parse_formula, tt_entails

LETTERS = "ABCDEFGHJKLMNQRSTUVW"  # no I, O (read as digits) and no P (the premises' label)
PREDICATES = ("cat", "dog", "pet", "bird", "fish", "tame", "wild", "loud", "fast", "furry",
              "small", "green", "happy", "old", "cute", "shy")
INDIVIDUALS = ("rex", "tom", "ann", "bob", "eve", "kim", "sam", "lee")


@dataclass(frozen=True)
class Problem:
    """A task's content: premises in prompt order, the goal, the reference chain's lines."""

    premises: tuple[str, ...]
    goal: str
    reference: tuple[str, ...]
    ask: Literal["prove", "determine"]
    difficulty: int


class _Chain:
    """Premises and reference steps under construction. Citations are handles: `p3` is the
    fourth premise added, `s2` the second step; premises are shuffled at the end, and the
    reference's citations follow them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.premises: list[str] = []
        self.steps: list[tuple[str, tuple[str, ...]]] = []

    def premise(self, f: str) -> str:
        self.premises.append(f)
        return f"p{len(self.premises) - 1}"

    def step(self, f: str, *cites: str) -> str:
        self.steps.append((f, cites))
        return f"s{len(self.steps)}"

    def done(self, goal: str, witness: Model, difficulty: int,
             ask: Literal["prove", "determine"] = "prove") -> Problem:
        order = list(range(len(self.premises)))
        self.rng.shuffle(order)
        label = {f"p{old}": f"P{new + 1}" for new, old in enumerate(order)}
        lines = tuple(f"{n}. {f} [{', '.join(label.get(c, c[1:]) for c in cites)}]"
                      for n, (f, cites) in enumerate(self.steps, 1))
        premises = tuple(self.premises[i] for i in order)
        sorts: dict[str, str] = {}
        for p in premises:  # the witness makes every premise true: consistent by construction
            f, sorts = parse_formula(p, sorts)
            assert holds(f, witness), f"witness does not satisfy {p!r}"
        assert self.steps and self.steps[-1][0] == goal, "the reference must end at the goal"
        return Problem(premises, goal, lines, ask, difficulty)


def _letters(rng: random.Random, n: int) -> list[str]:
    return rng.sample(LETTERS, n)


def _distractor(c: _Chain, free: list[str], values: dict[str, bool]) -> None:
    """An irrelevant premise over fresh letters, true in the witness."""
    d1, d2 = free
    values.update({d1: False, d2: c.rng.random() < 0.5})
    c.premise(c.rng.choice([f"{d1} -> {d2}", f"{d1} -> not {d2}", f"not {d1} or {d2}"]))


def _implications(rng: random.Random, k: int, truth: bool
                  ) -> tuple[_Chain, list[str], dict[str, bool], list[str]]:
    """A chain of k implications A -> B -> ... over fresh letters, every link true in a witness
    where the chain's letters are all `truth`; two letters more are left for a distractor."""
    a = _letters(rng, k + 3)
    c = _Chain(rng)
    links = [c.premise(f"{a[i]} -> {a[i + 1]}") for i in range(k)]
    return c, a, {x: truth for x in a[:k + 1]}, links


def modus_ponens(rng: random.Random) -> Problem:
    k = rng.choice([2, 3])
    c, a, values, links = _implications(rng, k, True)
    fact = c.premise(a[0])
    _distractor(c, a[k + 1:], values)
    at = c.step(a[1], fact, links[0])
    for i in range(1, k):
        at = c.step(a[i + 1], at, links[i])
    return c.done(a[k], Model(values), 1)


def disjunctive_syllogism(rng: random.Random) -> Problem:
    k = rng.choice([2, 3])
    a = _letters(rng, k + 3)
    goal = a[k]
    c = _Chain(rng)
    values = {x: False for x in a[:k]} | {a[k - 1]: True, goal: True}
    disj = c.premise(" or ".join(a[:k]))
    nots = [c.premise(f"not {x}") for x in a[:k - 1]]
    link = c.premise(f"{a[k - 1]} -> {goal}")
    if rng.random() < 0.5:
        _distractor(c, a[k + 1:], values)
    at = disj
    for i, n in enumerate(nots):
        at = c.step(" or ".join(a[i + 1:k]), at, n)
    c.step(goal, at, link)
    return c.done(goal, Model(values), 1)


def modus_tollens(rng: random.Random) -> Problem:
    k = rng.choice([2, 3])
    c, a, values, links = _implications(rng, k, False)
    at = c.premise(f"not {a[k]}")
    _distractor(c, a[k + 1:], values)
    for i in reversed(range(k)):
        at = c.step(f"not {a[i]}", links[i], at)
    return c.done(f"not {a[0]}", Model(values), 2)


def hypothetical_syllogism(rng: random.Random) -> Problem:
    k = rng.choice([3, 4])
    c, a, values, links = _implications(rng, k, True)
    _distractor(c, a[k + 1:], values)
    at = c.step(f"{a[0]} -> {a[2]}", links[0], links[1])
    for i in range(2, k):
        at = c.step(f"{a[0]} -> {a[i + 1]}", at, links[i])
    return c.done(f"{a[0]} -> {a[k]}", Model(values), 2)


def syllogism(rng: random.Random) -> Problem:
    """Categorical syllogisms over monadic predicates (Barbara, Celarent, Darii), chained."""
    p, q, r, s, e = rng.sample(PREDICATES, 5)
    who = rng.choice(INDIVIDUALS)
    c = _Chain(rng)
    form = rng.choice(["barbara_instance", "celarent_instance", "barbara", "darii"])
    ext: dict[str, frozenset[str]] = {}
    if form in ("barbara_instance", "celarent_instance"):
        neg = form == "celarent_instance"
        pq = c.premise(f"all x. ({p}(x) -> {q}(x))")
        qr = c.premise(f"all x. ({q}(x) -> {'not ' if neg else ''}{r}(x))")
        fact = c.premise(f"{p}({who})")
        at = c.step(f"{q}({who})", pq, fact)
        goal = f"{'not ' if neg else ''}{r}({who})"
        c.step(goal, qr, at)
        ext = {p: frozenset({who}), q: frozenset({who}), r: frozenset() if neg else
               frozenset({who})}
    elif form == "barbara":
        links = [c.premise(f"all x. ({a}(x) -> {b}(x))") for a, b in ((p, q), (q, r), (r, s))]
        at = c.step(f"all x. ({p}(x) -> {r}(x))", links[0], links[1])
        goal = f"all x. ({p}(x) -> {s}(x))"
        c.step(goal, at, links[2])
    else:
        some = c.premise(f"some x. ({p}(x) and {q}(x))")
        qr = c.premise(f"all x. ({q}(x) -> {r}(x))")
        rs = c.premise(f"all x. ({r}(x) -> {s}(x))")
        at = c.step(f"some x. ({p}(x) and {r}(x))", some, qr)
        goal = f"some x. ({p}(x) and {s}(x))"
        c.step(goal, at, rs)
        ext = {x: frozenset({"o"}) for x in (p, q, r, s)}
    if rng.random() < 0.5:  # a distractor: a class nothing is in
        c.premise(f"all x. ({e}(x) -> {rng.choice([p, q])}(x))")
    return c.done(goal, Model({}, (who, "o"), ext), 2)


def dilemma(rng: random.Random) -> Problem:
    a, b, x, y, e = _letters(rng, 5)
    c = _Chain(rng)
    disj = c.premise(f"{a} or {b}")
    if rng.random() < 0.5:  # constructive dilemma, short: both cases give the goal
        ae, be = c.premise(f"{a} -> {e}"), c.premise(f"{b} -> {e}")
        at = c.step(f"{e} or {b}", disj, ae)
        c.step(e, at, be)
        return c.done(e, Model({a: True, b: False, e: True}), 3)
    ax, by = c.premise(f"{a} -> {x}"), c.premise(f"{b} -> {y}")
    xe, ye = c.premise(f"{x} -> {e}"), c.premise(f"{y} -> {e}")
    at = c.step(f"{x} or {b}", disj, ax)
    at = c.step(f"{x} or {y}", at, by)
    at = c.step(f"{e} or {y}", at, xe)
    c.step(e, at, ye)
    return c.done(e, Model({a: True, b: False, x: True, y: False, e: True}), 3)


_SAYS: tuple[Callable[[str, str], str], ...] = (
    lambda o, p: f"K_{o}", lambda o, p: f"not K_{o}",
    lambda o, p: f"K_{o} and K_{p}", lambda o, p: f"not K_{o} or not K_{p}",
    lambda o, p: f"K_{o} <-> K_{p}", lambda o, p: f"not (K_{o} <-> K_{p})",
    lambda o, p: f"K_{o} -> not K_{p}",
)


def knights_knaves(rng: random.Random) -> Problem:
    """Three islanders each say one thing; knights tell the truth, knaves lie. The premise of
    speaker a is `K_a <-> (what a said)`. Drawn until the solution is unique and a chain of
    two-citation steps finds it (each islander's kind from two lines, then the conjunction),
    no two premises alone give the whole answer, and not every islander's kind is one premise
    restated."""
    people = ["a", "b", "c"]
    for _ in range(500):
        said = {s: rng.choice(_SAYS)(*rng.sample([q for q in people if q != s], 1),
                                      rng.choice(people)) for s in people}
        premises = [f"K_{s} <-> {_bracket(said[s])}" for s in people]
        trees = [parse_formula(p)[0] for p in premises]
        models = [dict(zip((f"K_{q}" for q in people), bits))
                  for bits in itertools.product((False, True), repeat=3)
                  if all(holds(t, Model(dict(zip((f"K_{q}" for q in people), bits))))
                         for t in trees)]
        if len(models) != 1:
            continue
        truth = models[0]
        lit = {q: f"K_{q}" if truth[f"K_{q}"] else f"not K_{q}" for q in people}
        goal = " and ".join(lit[q] for q in people)
        goal_t = parse_formula(goal)[0]
        if any(tt_entails(list(pair), goal_t) for pair in itertools.combinations(trees, 2)):
            continue
        # Nor may each islander's kind follow from one premise (`K_c <-> (K_a <-> K_a)` is
        # K_c): the answer would be the premises restated, and any packing of them a proof.
        if all(any(tt_entails([t], parse_formula(lit[q])[0]) for t in trees) for q in people):
            continue
        chain = _derive(trees, {q: parse_formula(lit[q])[0] for q in people})
        if chain is None:
            continue
        c = _Chain(rng)
        handles = [c.premise(p) for p in premises]
        step_of: dict[str, str] = {}
        for q, cites in chain:
            step_of[q] = c.step(lit[q], *[handles[i] if kind == "P" else step_of[i]
                                           for kind, i in cites])
        first, second, third = (q for q, _ in chain)
        two = c.step(" and ".join(lit[q] for q in people if q != third),
                     step_of[min(first, second)], step_of[max(first, second)])
        c.step(goal, two, step_of[third])
        return c.done(goal, Model(truth), 3, ask="determine")
    raise RuntimeError("knights_knaves: no puzzle found in 500 draws")


def _bracket(f: str) -> str:
    return f if " " not in f else f"({f})"


def _derive(trees, literals) -> list | None:
    """Greedy forward chaining: each islander's literal from at most two lines (premises,
    literals already derived); None when it gets stuck."""
    known: dict[str, object] = {}
    out = []
    while len(known) < len(literals):
        lines = [("P", i, t) for i, t in enumerate(trees)] + \
            [("S", q, literals[q]) for q in known]
        for q in sorted(set(literals) - set(known)):
            found = next((combo for n in (1, 2) for combo in itertools.combinations(lines, n)
                          if tt_entails([t for *_, t in combo], literals[q])), None)
            if found is not None:
                known[q] = literals[q]
                out.append((q, [(kind, i) for kind, i, _ in found]))
                break
        else:
            return None
    return out


def integers(rng: random.Random) -> Problem:
    """Small linear integer puzzles: bounds that pin a value, or three equations."""
    c = _Chain(rng)
    vx, vy, vz = (rng.randint(0, 9) for _ in range(3))
    sum_ = c.premise(f"x + y = {vx + vy}")
    if rng.random() < 0.5:  # x + y = s, x - y >= d, y >= vy: x is squeezed to one value
        diff = c.premise(f"x - y >= {vx - vy}")
        low = c.premise(f"y >= {vy}")
        ge = c.step(f"x >= {vx}", sum_, diff)
        le = c.step(f"x <= {vx}", sum_, low)
        x = c.step(f"x = {vx}", ge, le)
        # Not `y = vy` from the sum and `x = vx`: that line restates x >= vx and x <= vx, so the
        # step would rest on three (envs/logic/checker.py).
        y_le = c.step(f"y <= {vy}", sum_, ge)
        y = c.step(f"y = {vy}", y_le, low)
        goal = f"x = {vx} and y = {vy}"
        c.step(goal, x, y)
        return c.done(goal, Model({"x": vx, "y": vy}), 3, ask="determine")
    diff = c.premise(f"x - y = {vx - vy}")
    uses, third = rng.choice([("y", f"y + z = {vy + vz}"), ("y", f"z - 2*y = {vz - 2 * vy}"),
                              ("x", f"2*x + z = {2 * vx + vz}"), ("x", f"z - x = {vz - vx}")])
    z_line = c.premise(third)
    x = c.step(f"x = {vx}", sum_, diff)
    y = c.step(f"y = {vy}", sum_, x)
    z = c.step(f"z = {vz}", z_line, y if uses == "y" else x)
    xy = c.step(f"x = {vx} and y = {vy}", x, y)
    goal = f"x = {vx} and y = {vy} and z = {vz}"
    c.step(goal, xy, z)
    return c.done(goal, Model({"x": vx, "y": vy, "z": vz}), 3, ask="determine")


FAMILIES: dict[str, Callable[[random.Random], Problem]] = {
    "modus_ponens": modus_ponens, "disjunctive_syllogism": disjunctive_syllogism,
    "modus_tollens": modus_tollens, "hypothetical_syllogism": hypothetical_syllogism,
    "syllogism": syllogism, "dilemma": dilemma, "knights_knaves": knights_knaves,
    "integers": integers,
}
