"""Edge-case families: the obvious solution passes the docstring's example and fails on an edge
(an empty list, a negative number, a boundary value, an exact multiple).

The docstring states the rule in words but its one example never shows the edge. A second
*visible* example does (`Task.examples[1]`: `<run_tests/>` in an agent episode runs it), and the
hidden tests hold the same edge (plus, where there is one, its mirror image). So a first attempt
that follows the example fails, the visible tests say why, and a second turn can fix it: the
benefit of a second turn is measurable on these tasks.

Each family also has a `naive` body, the plausible first attempt that misses the edge (for
multi-turn SFT demonstrations and scripted policies); `first_attempts` gives it per task id.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from tasks.families.base import Family, Params, Rng, distinct_params


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


MAX_OR = EdgeFamily(
    name="max_or", arg="xs", category="edges",
    draw_params=lambda r, d: {"d": _nonzero(r, -9, 9)},
    sentence=lambda p: f"Return the largest number in xs, or {p['d']} if xs is empty.",
    body=lambda p: f"max(xs) if xs else {p['d']}",
    naive=lambda p: "max(xs)",
    fn=lambda p, xs: max(xs) if xs else p["d"],
    draw_input=lambda r, d: [r.randint(-20, 20) for _ in range(r.randint(1, 3 + d))],
    edge_inputs=lambda p, r: [[]],
)

DIGIT_SUM = EdgeFamily(
    name="digit_sum", arg="n", category="edges",
    draw_params=lambda r, d: {"k": r.randint(2, 9)},
    sentence=lambda p: f"Return {p['k']} times the sum of the decimal digits of n (ignore the "
                       f"sign of n).",
    body=lambda p: f"{p['k']} * sum(int(c) for c in str(abs(n)))",
    naive=lambda p: f"{p['k']} * sum(int(c) for c in str(n))",
    fn=lambda p, n: p["k"] * sum(int(c) for c in str(abs(n))),
    draw_input=lambda r, d: r.randint(1, 10 ** (d + 1)),
    edge_inputs=lambda p, r: [-r.randint(10, 999), -r.randint(1, 9)],
)

IN_RANGE = EdgeFamily(
    name="in_range", arg="x", category="edges",
    draw_params=lambda r, d: {"lo": r.randint(-9, 0), "hi": r.randint(4, 14)},
    sentence=lambda p: f"Return True if x lies between {p['lo']} and {p['hi']}, both ends "
                       f"included, else False.",
    body=lambda p: f"{p['lo']} <= x <= {p['hi']}",
    naive=lambda p: f"{p['lo']} < x < {p['hi']}",
    fn=lambda p, x: p["lo"] <= x <= p["hi"],
    draw_input=lambda r, d: r.randint(-10 * d - 10, 10 * d + 15),
    edge_inputs=lambda p, r: [p["lo"], p["hi"]],
)

BOXES = EdgeFamily(
    name="boxes", arg="n", category="edges",
    draw_params=lambda r, d: {"k": r.randint(3, 9)},
    sentence=lambda p: f"Return how many boxes are needed to pack n items when a box holds "
                       f"{p['k']} items.",
    body=lambda p: f"(n + {p['k'] - 1}) // {p['k']}",
    naive=lambda p: f"n // {p['k']} + 1",
    fn=lambda p, n: (n + p["k"] - 1) // p["k"],
    draw_input=lambda r, d: r.randint(1, 20 * d + 20),
    edge_inputs=lambda p, r: [p["k"] * r.randint(1, 4), 0],
)

EDGES: list[EdgeFamily] = [MAX_OR, DIGIT_SUM, IN_RANGE, BOXES]


def first_attempts(families: list[str], difficulties: list[int], tasks_per_family: int,
                   seed: int = 0, variants: int = 1) -> dict[str, str]:
    """task_id -> naive body, for the edge families among `families`, over the same draws as
    `tasks.procedural.generate_suite` (and `training_instances` with `variants` seeds)."""
    import random  # noqa: PLC0415

    from tasks.procedural import FAMILIES, _task_hash  # noqa: PLC0415 (procedural imports us)

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
