"""What a grade means beyond its reward: whether the rollout *solved* its task, and whether a
group of rollouts is *informative*. One definition of each, read by the rewards (pass@k, the
quality check), the flow's metrics, the curriculum's ledger and the store (the `solved` column).

Solved: scored (not an infrastructure failure), at least one hidden test ran, every one passed,
and no reward-hacking check fired: a flagged rollout is never solved, whatever its tests say.
Informative (DAPO, Yu et al. 2025): at least two scored rewards in the group and not all equal,
so its GRPO advantages are not all zero. Unscored (NaN) rewards are left out of both.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

SOLVED_FACTS = ("tests_passed", "tests_total", "hack_flags", "infra_error")  # the row's facts

# `solved` in SQL over the same columns, for stores written before the column existed (DuckDB).
SOLVED_SQL = ("CASE WHEN infra_error IS TRUE THEN NULL ELSE coalesce(tests_total, 0) > 0 "
              "AND tests_passed = tests_total AND len(coalesce(hack_flags, [])) = 0 END")


def solved(tests_passed: int | None, tests_total: int | None, hack_flags: Sequence[str] | None,
           infra_error: bool | None) -> bool | None:
    """Whether a rollout solved its task; None when it was not scored (the host failed)."""
    if infra_error:
        return None
    if not _count(tests_total) or _count(tests_passed) != _count(tests_total):
        return False
    return not (hack_flags is not None and len(hack_flags))


def count_ok(passed, total) -> bool:
    """A test count as an environment writes it: integers, 0 <= passed <= total > 0 (a count
    that is missing, not an int, or out of range measures nothing)."""
    return type(passed) is int and type(total) is int and 0 <= passed <= total and total > 0


def _count(v) -> int:
    return 0 if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)


def fill_solved(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` with a `solved` column, filled where it is missing or null (rows written before
    schema version 4, or an unscored row: it stays None) from the row's facts."""
    if "solved" in rows.columns and not rows["solved"].isna().any():
        return rows
    have = rows["solved"] if "solved" in rows.columns else pd.Series(None, index=rows.index,
                                                                       dtype=object)
    have = have.astype(object).where(have.notna(), None)
    todo = have.isna().to_numpy()
    facts = rows.loc[todo, list(SOLVED_FACTS)]
    have[todo] = [solved(*f) for f in facts.itertuples(index=False, name=None)]
    return rows.assign(solved=have)


def informative(rewards: Sequence[float]) -> bool:
    """Whether one group's scored rewards are at least two and not all equal."""
    r = np.asarray(rewards, dtype=np.float64)
    r = r[~np.isnan(r)]
    return bool(r.size >= 2 and (r.max() - r.min()) > 1e-9)


def informative_groups(rewards: np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    """Per element: whether its group is informative."""
    rewards = np.asarray(rewards, dtype=np.float64)
    # one pass over the rows, not a scan of every row per group (O(rows x groups), and the
    # ledger reads every earlier iteration's rows: bench/bench_scale.py); a NaN label is a group
    codes, labels = pd.factorize(np.asarray(group_ids), use_na_sentinel=False)
    scored = ~np.isnan(rewards)
    c, r = codes[scored], rewards[scored]
    n = np.bincount(c, minlength=len(labels))
    hi = np.full(len(labels), -np.inf)
    lo = np.full(len(labels), np.inf)
    np.maximum.at(hi, c, r)
    np.minimum.at(lo, c, r)
    with np.errstate(invalid="ignore"):  # inf - inf: not informative, as in `informative`
        spread = hi - lo > 1e-9
    return ((n >= 2) & spread)[codes]
