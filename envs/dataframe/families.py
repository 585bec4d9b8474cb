"""A data-analysis suite: the policy writes a pandas function of a generated DataFrame, graded by
`envs.dataframe.grading` on hidden frames. Seeded, split by content, a difficulty knob per family.

Each task's frames have the columns city (str), price (int) and qty (int). Expected results are
computed in plain Python (not pandas), so the pandas reference is an independent check of them.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any, Callable

from envs.io.families.base import distinct_params, level_of
from tasks.record import Task, TestCase

Params = dict[str, Any]
Cols = dict[str, list]
_CITIES = ["oslo", "rome", "lima", "kyiv", "baku"]
HEADER = "import pandas as pd\n\n\n"


@dataclass(frozen=True)
class DfLevel:
    draw: Callable[[random.Random], Params]
    sentence: Callable[[Params], str]
    body: Callable[[Params], str]  # the pandas expression after `return `
    fn: Callable[[Params, Cols], Any]  # plain-Python semantics over the columns


def _rows(c: Cols) -> list[dict]:
    return [dict(zip(c, vals)) for vals in zip(*c.values())]


def _sum_by(c: Cols, value: Callable[[dict], Any], keep=lambda r: True) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in _rows(c):
        if keep(r):
            out[r["city"]] = out.get(r["city"], 0) + value(r)
    return out


def _mean_price(p, c):
    tot = _sum_by(c, lambda r: r["price"], lambda r: r["qty"] >= p["k"])
    n = _sum_by(c, lambda r: 1, lambda r: r["qty"] >= p["k"])
    return {k: tot[k] / n[k] for k in tot}


def _top_city(p, c):
    tot = _sum_by(c, lambda r: r["price"] * r["qty"])
    return min(tot, key=lambda k: (-tot[k], k))


def _max_price_big(p, c):
    n = _sum_by(c, lambda r: 1)
    best: dict[str, int] = {}
    for r in _rows(c):
        best[r["city"]] = max(best.get(r["city"], r["price"]), r["price"])
    return {k: v for k, v in best.items() if n[k] >= p["k"]}


def _price_change(p, c):
    last: dict[str, int] = {}
    out = []
    for r in _rows(c):
        out.append(r["price"] - last.get(r["city"], r["price"]))
        last[r["city"]] = r["price"]
    return out


def _running(xs):
    out, t = [], 0
    for x in xs:
        t += x
        out.append(t)
    return out


_k = lambda lo, hi: (lambda r: {"k": r.randint(lo, hi)})  # noqa: E731

DF_FAMILIES: dict[str, list[DfLevel]] = {
    "df_filter": [
        DfLevel(_k(10, 50), lambda p: f"Return how many rows have a price above {p['k']}.",
                lambda p: f"int((df.price > {p['k']}).sum())",
                lambda p, c: sum(x > p["k"] for x in c["price"])),
        DfLevel(lambda r: {"k": r.randint(5, 40), "c": r.choice(_CITIES)},
                lambda p: f"Return the total qty of rows with city {p['c']!r} and price above "
                          f"{p['k']}.",
                lambda p: f"int(df[(df.city == {p['c']!r}) & (df.price > {p['k']})].qty.sum())",
                lambda p, c: sum(r["qty"] for r in _rows(c)
                                 if r["city"] == p["c"] and r["price"] > p["k"])),
        DfLevel(_k(40, 200), lambda p: f"Return the sorted distinct cities of rows whose price "
                                       f"times qty exceeds {p['k']}.",
                lambda p: f"sorted(df[df.price * df.qty > {p['k']}].city.unique())",
                lambda p, c: sorted({r["city"] for r in _rows(c)
                                     if r["price"] * r["qty"] > p["k"]})),
    ],
    "df_group": [
        DfLevel(lambda r: {"c": r.choice(["qty", "price"])},
                lambda p: f"Return the total {p['c']} per city as a dict.",
                lambda p: f"df.groupby('city').{p['c']}.sum().to_dict()",
                lambda p, c: _sum_by(c, lambda r: r[p["c"]])),
        DfLevel(_k(2, 6), lambda p: f"Return the mean price per city over rows with qty of at "
                                    f"least {p['k']}, as a dict.",
                lambda p: f"df[df.qty >= {p['k']}].groupby('city').price.mean().to_dict()",
                _mean_price),
        DfLevel(lambda r: {}, lambda p: "Return the city with the largest total of price "
                                        "times qty (ties: alphabetically first).",
                lambda p: "(df.price * df.qty).groupby(df.city).sum().idxmax()", _top_city),
    ],
    "df_rank": [
        DfLevel(_k(1, 4), lambda p: f"Return the {p['k']} largest prices, largest first, "
                                    f"as a list.",
                lambda p: f"df.price.nlargest({p['k']}).tolist()",
                lambda p, c: sorted(c["price"], reverse=True)[: p["k"]]),
        DfLevel(_k(1, 4), lambda p: f"Return the cities of the {p['k']} rows with the largest "
                                    f"prices (ties: earlier row first).",
                lambda p: f"df.nlargest({p['k']}, 'price').city.tolist()",
                lambda p, c: [c["city"][i] for i in sorted(range(len(c["price"])),
                                                          key=lambda i: (-c["price"][i], i))[: p["k"]]]),
        DfLevel(_k(2, 3), lambda p: f"Return the largest price per city, as a dict, for cities "
                                    f"with at least {p['k']} rows.",
                lambda p: (f"df.groupby('city').price.max()"
                           f"[df.groupby('city').size() >= {p['k']}].to_dict()"),
                _max_price_big),
    ],
    "df_derive": [
        DfLevel(lambda r: {"c": r.choice(["+", "*", "-"])},
                lambda p: f"Return price {p['c']} qty for each row, as a list.",
                lambda p: f"(df.price {p['c']} df.qty).tolist()",
                lambda p, c: [eval(f"{a} {p['c']} {b}") for a, b in zip(c["price"], c["qty"])]),
        DfLevel(lambda r: {"c": r.choice(["qty", "price"])},
                lambda p: f"Return the running total of {p['c']} in row order, as a list.",
                lambda p: f"df.{p['c']}.cumsum().tolist()",
                lambda p, c: _running(c[p["c"]])),
        DfLevel(lambda r: {}, lambda p: "Return each row's price minus the price of the previous "
                                        "row of the same city (0 if none), as a list.",
                lambda p: "df.groupby('city').price.diff().fillna(0).tolist()", _price_change),
    ],
}


def _frame(rng: random.Random, n: int, n_cities: int) -> Cols:
    cities = rng.sample(_CITIES, n_cities)
    return {"city": [rng.choice(cities) for _ in range(n)],
            "price": [rng.randint(1, 60) for _ in range(n)],
            "qty": [rng.randint(1, 9) for _ in range(n)]}


def _hash(family: str, params: Params, difficulty: int) -> str:
    return hashlib.sha256(f"df|{family}|{sorted(params.items())}|{difficulty}".encode()).hexdigest()[:12]


def make_df_task(family: str, params: Params, difficulty: int, n_tests: int, seed: int,
                 heldout_fraction: float) -> Task:
    lv = DF_FAMILIES[family][params["lv"] - 1]
    h = _hash(family, params, difficulty)
    rng = random.Random(f"{seed}:{h}")
    example_cols = _frame(rng, 4, 2)
    cases, seen = [], set()
    for _ in range(n_tests * 20):
        cols = _frame(rng, rng.randint(3, 4 + 3 * difficulty), min(5, 1 + difficulty))
        y = lv.fn(params, cols)
        key = json.dumps(cols)
        if key in seen:
            continue
        seen.add(key)
        if len(cases) == n_tests - 1 and all(json.dumps(c.expected) == json.dumps(y) for c in cases):
            continue  # the hidden tests must not all agree, or a constant would pass them
        cases.append(TestCase(args=(cols,), expected=y))
        if len(cases) == n_tests:
            break
    example = TestCase(args=(example_cols,), expected=lv.fn(params, example_cols))
    fname = f"{family}_{h[:4]}"
    prompt = (f"{HEADER}def {fname}(df):\n"
              f'    """df has columns city, price, qty. {lv.sentence(params)}\n'
              f"    >>> {fname}(pd.DataFrame({example_cols!r}))\n"
              f"    {example.expected!r}\n"
              f'    """\n')
    # As in the procedural suite: the split ignores difficulty (params carry the level), so the
    # same question drawn at two difficulties can never sit on both sides.
    hs = _hash(family, params, 0)
    split = "heldout" if int(hs, 16) % 1000 < heldout_fraction * 1000 else "train"
    return Task(task_id=f"df/{family}/{h}", suite="dataframe", family=family,
                difficulty=difficulty, split=split, prompt=prompt, entry_point=fname,
                tests=tuple(cases), examples=(example,),
                reference=f"    return {lv.body(params)}\n", kind="dataframe")


def generate_dataframe_suite(families: list[str] | None = None, difficulties: list[int] = (1, 2, 3),
                             tasks_per_family: int = 5, n_tests: int = 5, seed: int = 0,
                             heldout_fraction: float = 0.2) -> list[Task]:
    """Up to `tasks_per_family` distinct tasks per (family, difficulty)."""
    families = list(DF_FAMILIES) if families is None else families
    unknown = sorted(set(families) - set(DF_FAMILIES))
    if unknown:
        raise ValueError(f"unknown dataframe families {unknown}; expected some of "
                         f"{sorted(DF_FAMILIES)}")
    out: dict[str, Task] = {}
    for name in families:
        for d in difficulties:
            lv = level_of(d, len(DF_FAMILIES[name]))
            rng = random.Random(f"{seed}:{name}:{d}")
            draw = DF_FAMILIES[name][lv - 1].draw
            for params in distinct_params(lambda: {"lv": lv, **draw(rng)}, tasks_per_family):
                t = make_df_task(name, params, d, n_tests, seed, heldout_fraction)
                out.setdefault(t.fingerprint(), t)
    return sorted(out.values(), key=lambda t: t.task_id)
