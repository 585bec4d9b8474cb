"""Edge-case families: the obvious solution passes the docstring's example and fails on an edge
(an empty list, a negative number, a boundary value, an exact multiple).

The docstring states the rule in words but its one example never shows the edge. A second
*visible* example does (`Task.examples[1]`: `<run_tests/>` in an agent episode runs it), and the
hidden tests hold the same edge (plus, where there is one, its mirror image). So a first attempt
that follows the example fails, the visible tests say why, and a second turn can fix it: the
benefit of a second turn is measurable on these tasks.

Each family also has a `naive` body, the plausible first attempt that misses the edge (for
multi-turn SFT demonstrations and scripted policies); `envs.io.procedural.first_attempts` gives
it per task id.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from envs.io.families.base import Family, Params, Rng, level_of


@dataclass(frozen=True)
class EdgeFamily(Family):
    """A family with edge inputs shown by a visible example (not the docstring) and a naive body.

    `edge_inputs(params, rng)` returns inputs (one argument, or a list for several): the first
    becomes the second visible example, all of them join the hidden tests. `naive(params)` is
    the expression (or block, as `body`) of the first attempt that misses the edge.
    """

    edge_inputs: Callable[[Params, Rng], list[Any]] | None = None
    naive: Callable[[Params], str] | None = None

    def naive_reference(self, params: Params, fname: str) -> str:
        if self.naive is None:
            raise ValueError(f"family {self.name!r} has no naive body")
        body = self.naive(params)
        return body.replace("__self__", fname) if self.block else f"    return {body}\n"


def _nonzero(rng: Rng, lo: int, hi: int) -> int:
    v = 0
    while v == 0:
        v = rng.randint(lo, hi)
    return v


@dataclass(frozen=True)
class EdgeLevel:
    """One difficulty level of an edge family (see `Level` in base.py), with its naive body and
    its edge inputs."""

    draw: Callable[[Rng], Params]
    sentence: Callable[[Params], str]
    body: Callable[[Params], str]  # expression
    naive: Callable[[Params], str]  # expression that misses the edge
    fn: Callable[..., Any]
    edges: Callable[[Params, Rng], list[Any]]


def edge_family(name: str, arg: str, draw_input: Callable[[Rng, int], Any],
                levels: list[EdgeLevel]) -> EdgeFamily:
    """Like `leveled`: difficulty 1..n picks level n (a different question), higher ones keep
    the top level with bigger inputs."""
    lv = lambda p: levels[p["lv"] - 1]  # noqa: E731

    def draw_params(rng: Rng, d: int) -> Params:
        n = level_of(d, len(levels))
        return {"lv": n, **levels[n - 1].draw(rng)}

    return EdgeFamily(name=name, arg=arg, category="edges", draw_params=draw_params,
                      sentence=lambda p: lv(p).sentence(p), body=lambda p: lv(p).body(p),
                      naive=lambda p: lv(p).naive(p), fn=lambda p, *a: lv(p).fn(p, *a),
                      draw_input=draw_input, edge_inputs=lambda p, r: lv(p).edges(p, r),
                      levels=len(levels))


def _digits(n: int) -> list[int]:
    return [int(c) for c in str(abs(n))]


MAX_OR = edge_family("max_or", "xs", lambda r, d: [r.randint(-20, 20) for _ in range(r.randint(1, 2 + d))], [
    EdgeLevel(lambda r: {"d": _nonzero(r, -9, 9)},
              lambda p: f"Return the largest number in xs, or {p['d']} if xs is empty.",
              lambda p: f"max(xs) if xs else {p['d']}", lambda p: "max(xs)",
              lambda p, xs: max(xs) if xs else p["d"], lambda p, r: [[]]),
    EdgeLevel(lambda r: {"d": _nonzero(r, -9, 9), "k": r.randint(2, 9)},
              lambda p: f"Return the largest number in xs plus {p['k']}, or {p['d']} if xs is "
                        f"empty.",
              lambda p: f"max(xs) + {p['k']} if xs else {p['d']}",
              lambda p: f"max(xs) + {p['k']}",
              lambda p, xs: max(xs) + p["k"] if xs else p["d"], lambda p, r: [[]]),
    EdgeLevel(lambda r: {"d": _nonzero(r, -9, 9), "t": r.randint(-5, 10)},
              lambda p: f"Return the largest number in xs below {p['t']}, or {p['d']} if there "
                        f"is none.",
              lambda p: f"max([v for v in xs if v < {p['t']}], default={p['d']})",
              lambda p: f"max([v for v in xs if v < {p['t']}])",
              lambda p, xs: max([v for v in xs if v < p["t"]], default=p["d"]),
              lambda p, r: [[p["t"], p["t"] + r.randint(1, 9)], []]),
])

DIGIT_SUM = edge_family("digit_sum", "n", lambda r, d: r.randint(1, 10 ** (d + 1)), [
    EdgeLevel(lambda r: {"k": r.randint(2, 9)},
              lambda p: f"Return {p['k']} times the sum of the decimal digits of n (ignore the "
                        f"sign of n).",
              lambda p: f"{p['k']} * sum(int(c) for c in str(abs(n)))",
              lambda p: f"{p['k']} * sum(int(c) for c in str(n))",
              lambda p, n: p["k"] * sum(_digits(n)),
              lambda p, r: [-r.randint(10, 999), -r.randint(1, 9)]),
    EdgeLevel(lambda r: {"k": r.randint(1, 7)},
              lambda p: f"Return how many decimal digits of n are greater than {p['k']} (ignore "
                        f"the sign of n).",
              lambda p: f"len([c for c in str(abs(n)) if int(c) > {p['k']}])",
              lambda p: f"len([c for c in str(n) if int(c) > {p['k']}])",
              lambda p, n: len([c for c in _digits(n) if c > p["k"]]),
              lambda p, r: [-r.randint(100, 9999), -r.randint(10, 99)]),
    EdgeLevel(lambda r: {"k": r.randint(2, 9)},
              lambda p: f"Return {p['k']} times the sum of the even decimal digits of n (ignore "
                        f"the sign of n).",
              lambda p: f"{p['k']} * sum(int(c) for c in str(abs(n)) if int(c) % 2 == 0)",
              lambda p: f"{p['k']} * sum(int(c) for c in str(n) if int(c) % 2 == 0)",
              lambda p, n: p["k"] * sum(c for c in _digits(n) if c % 2 == 0),
              lambda p, r: [-r.randint(100, 9999), -r.randint(10, 99)]),
])

IN_RANGE = edge_family("in_range", "x", lambda r, d: r.randint(-10 * d - 10, 10 * d + 15), [
    EdgeLevel(lambda r: {"lo": r.randint(-9, 0), "hi": r.randint(4, 14)},
              lambda p: f"Return True if x lies between {p['lo']} and {p['hi']}, both ends "
                        f"included, else False.",
              lambda p: f"{p['lo']} <= x <= {p['hi']}", lambda p: f"{p['lo']} < x < {p['hi']}",
              lambda p, x: p["lo"] <= x <= p["hi"], lambda p, r: [p["lo"], p["hi"]]),
    EdgeLevel(lambda r: {"lo": r.randint(-9, 0), "hi": r.randint(4, 14)},
              lambda p: f"Return True if x lies outside {p['lo']}..{p['hi']} (both ends are "
                        f"inside), else False.",
              lambda p: f"not ({p['lo']} <= x <= {p['hi']})",
              lambda p: f"x <= {p['lo']} or x >= {p['hi']}",
              lambda p, x: not (p["lo"] <= x <= p["hi"]), lambda p, r: [p["hi"], p["lo"]]),
    EdgeLevel(lambda r: {"lo": r.randint(-9, 0), "hi": r.randint(4, 14)},
              lambda p: f"Return 'low' if x is below {p['lo']}, 'high' if x is above "
                        f"{p['hi']}, else 'mid'.",
              lambda p: f"'low' if x < {p['lo']} else 'high' if x > {p['hi']} else 'mid'",
              lambda p: f"'low' if x <= {p['lo']} else 'high' if x >= {p['hi']} else 'mid'",
              lambda p, x: "low" if x < p["lo"] else "high" if x > p["hi"] else "mid",
              lambda p, r: [p["lo"], p["hi"]]),
])

BOXES = edge_family("boxes", "n", lambda r, d: r.randint(1, 20 * d + 20), [
    EdgeLevel(lambda r: {"k": r.randint(3, 9)},
              lambda p: f"Return how many boxes are needed to pack n items when a box holds "
                        f"{p['k']} items.",
              lambda p: f"(n + {p['k'] - 1}) // {p['k']}", lambda p: f"n // {p['k']} + 1",
              lambda p, n: (n + p["k"] - 1) // p["k"],
              lambda p, r: [p["k"] * r.randint(1, 4), 0]),
    EdgeLevel(lambda r: {"k": r.randint(3, 9), "e": r.randint(1, 5)},
              lambda p: f"Return how many boxes of {p['k']} items pack n items, plus {p['e']} "
                        f"spare boxes.",
              lambda p: f"(n + {p['k'] - 1}) // {p['k']} + {p['e']}",
              lambda p: f"n // {p['k']} + 1 + {p['e']}",
              lambda p, n: (n + p["k"] - 1) // p["k"] + p["e"],
              lambda p, r: [p["k"] * r.randint(1, 4), 0]),
    EdgeLevel(lambda r: {"k": r.randint(3, 9)},
              lambda p: f"Return how many items the last box holds when n items are packed "
                        f"{p['k']} to a box (0 if n is 0).",
              lambda p: f"n - (n - 1) // {p['k']} * {p['k']} if n else 0",
              lambda p: f"n % {p['k']}",
              lambda p, n: n - (n - 1) // p["k"] * p["k"] if n else 0,
              lambda p, r: [p["k"] * r.randint(1, 4), 0]),
])

EDGES: list[EdgeFamily] = [MAX_OR, DIGIT_SUM, IN_RANGE, BOXES]
