"""The difficulty ledger and the curriculum sampler: which tasks to train on next.

Pure functions over trajectory rows (a pandas DataFrame with the columns in `TRAJECTORY_COLUMNS`);
no Prefect, no Dask. Three ideas:

* **Ledger**: per task and iteration, how many samples, how many solved (the rows' `solved`
  column: rewards/outcome.py, so a hack-flagged rollout is never solved), the mean reward and
  how many of its groups were informative (rewards/outcome.py). Built from the trajectories, so
  it is stored with them and rebuilt from them after a crash.
* **Sampler**: a task's weight is the estimated chance that a group of G samples of it is
  *informative* (not all rewards equal): high for tasks sometimes solved, low for tasks always or
  never solved. Estimates are recency-weighted (the policy changes) and start, for an unseen
  task, from its family and difficulty. Difficulty ramps per family: levels above the first one
  the policy has not yet mastered are damped. Families are balanced: a family's weight is the
  mean of its tasks', so one with 90 tasks is not drawn ten times as often as one with 9.
* **Dynamic sampling** (DAPO, Yu et al. 2025, arXiv:2503.14476): groups whose G rewards are all
  equal give zero GRPO advantage; drop them and refill the batch with fresh tasks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Generic, Iterable, Sequence, TypeVar

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from rewards.outcome import informative_groups
from tasks.record import Task

TRAJECTORY_COLUMNS = ("task_id", "iteration", "reward", "pass_fraction", "solved", "family",
                      "difficulty", "split", "group_id")
LEDGER_COLUMNS = ("task_id", "iteration", "family", "difficulty", "split", "samples", "scored",
                  "solved", "mean_reward", "mean_pass_fraction", "groups", "informative_groups")


class CurriculumConfig(BaseModel):
    """How the sampler weighs tasks. Defaults suit G = 4..16 samples per task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    strategy: str = Field("curriculum", pattern="^(curriculum|uniform)$",
                          description="uniform: every eligible task equally likely (baseline)")
    group_size: int = Field(8, ge=2, description="G samples per task (GRPO group)")
    recency: float = Field(0.5, gt=0, le=1, description="weight of an observation one "
                           "iteration older than the newest (the policy moves on)")
    prior_strength: float = Field(2.0, gt=0, description="pseudo-samples of the prior drawn "
                                  "from the task's family and difficulty")
    floor: float = Field(0.02, ge=0, le=1, description="least weight of any eligible task, so "
                         "solved tasks are revisited and unseen ones explored")
    promote_at: float = Field(0.7, gt=0, le=1, description="a family's level counts as mastered "
                              "once its recent solve rate reaches this")
    ramp_damping: float = Field(0.1, ge=0, le=1, description="weight factor per level above the "
                                "family's frontier (first level not yet mastered)")
    balance_families: bool = Field(True, description="each family's tasks share one family "
                                   "weight (the mean of theirs), so a family with many tasks is "
                                   "not drawn more often for that alone; False: per task")
    family_floor: float = Field(0.15, ge=0, le=1, description="with balance_families: least "
                                "weight of a family (a family whose groups all look solved or "
                                "all failed weighs about `floor`, one sometimes solved about 1), "
                                "so a family that failed its first draws is still tried now and "
                                "then as the policy moves on, instead of never again")


def _check_columns(rows: pd.DataFrame, needed: Iterable[str], what: str) -> None:
    missing = [c for c in needed if c not in rows.columns]
    if missing:
        raise ValueError(f"{what}: missing columns {missing}; expected {list(needed)}")


def _group_stats(rows: pd.DataFrame) -> pd.Series:
    """Per group with a scored reward, indexed by (task_id, iteration, group_id): whether it
    is informative (rewards/outcome.py)."""
    keys = ["task_id", "iteration", "group_id"]
    rows = rows[rows["reward"].notna()]
    # the group's number, not its keys joined into a string row by row (most of an update)
    flags = rows.assign(informative=informative_groups(
        rows["reward"].to_numpy(dtype=float),
        rows.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()))
    return flags.groupby(keys, sort=False)["informative"].first()


class DifficultyLedger:
    """Pass-rate history per task across iterations. Immutable: `update` returns a new one."""

    def __init__(self, table: pd.DataFrame | None = None, cfg: CurriculumConfig | None = None):
        self.cfg = cfg or CurriculumConfig()
        if table is None:
            table = pd.DataFrame({c: pd.Series(dtype=object) for c in LEDGER_COLUMNS})
        _check_columns(table, LEDGER_COLUMNS, "ledger table")
        self.table = table.loc[:, list(LEDGER_COLUMNS)].reset_index(drop=True)
        self._p_cache: dict[str, float] | None = None

    @classmethod
    def from_trajectories(cls, rows: pd.DataFrame, cfg: CurriculumConfig | None = None
                          ) -> "DifficultyLedger":
        return cls(None, cfg).update(rows)

    def update(self, rows: pd.DataFrame) -> "DifficultyLedger":
        """Add trajectory rows; an iteration seen again for a task replaces its old entry, so
        re-reading the same trajectories is idempotent."""
        _check_columns(rows, TRAJECTORY_COLUMNS, "trajectory rows")
        if rows.empty:
            return self
        cfg = self.cfg
        rows = rows.assign(_solved=rows["solved"].astype(object).eq(True),
                           _scored=rows["reward"].notna())
        keys = ["task_id", "iteration"]
        # One grouping, each reduction called on it, the group figures aligned on its index:
        # pandas' named aggregations and a merge took twice as long for the same table.
        g = rows.groupby(keys, sort=True)
        agg = pd.concat([g[["family", "difficulty", "split"]].first(), g.size().rename("samples"),
                         g[["_scored", "_solved"]].sum().set_axis(["scored", "solved"], axis=1),
                         g[["reward", "pass_fraction"]].mean().set_axis(
                             ["mean_reward", "mean_pass_fraction"], axis=1)], axis=1)
        informative = _group_stats(rows).groupby(level=[0, 1])
        agg["groups"] = informative.size()
        agg["informative_groups"] = informative.sum()
        agg = agg.fillna({"groups": 0, "informative_groups": 0}).reset_index()
        old = self.table
        if len(old):
            new_keys = pd.MultiIndex.from_frame(agg[keys])
            old = old[~pd.MultiIndex.from_frame(old[keys]).isin(new_keys)]
        table = pd.concat([old, agg], ignore_index=True) if len(old) else agg
        table = table.sort_values(keys, kind="stable").reset_index(drop=True)
        for c in ("samples", "scored", "solved", "groups", "informative_groups", "difficulty",
                  "iteration"):
            table[c] = table[c].astype("int64")
        return DifficultyLedger(table, cfg)

    # -- reading ------------------------------------------------------------------------
    def history(self, task_id: str) -> pd.DataFrame:
        """One row per iteration of this task: samples, solved, solve_rate, mean_reward, ..."""
        h = self.table[self.table["task_id"] == task_id].copy()
        h["solve_rate"] = h["solved"] / h["scored"].where(h["scored"] > 0)
        return h.reset_index(drop=True)

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()

    @classmethod
    def from_frame(cls, table: pd.DataFrame, cfg: CurriculumConfig | None = None):
        return cls(table, cfg)

    def _weighted(self) -> pd.DataFrame:
        t = self.table
        if t.empty:
            return t.assign(w=[])
        latest = t["iteration"].max()
        return t.assign(w=self.cfg.recency ** (latest - t["iteration"]).astype(float))

    def level_rates(self) -> dict[tuple[str, int], float]:
        """Recency-weighted solve rate per (family, difficulty) over training tasks."""
        t = self._weighted()
        t = t[(t["split"] == "train") & (t["scored"] > 0)]
        if t.empty:
            return {}
        t = t.assign(ws=t["w"] * t["solved"], wn=t["w"] * t["scored"])
        g = t.groupby(["family", "difficulty"])[["ws", "wn"]].sum()
        return {(f, int(d)): float(r.ws / r.wn) for (f, d), r in g.iterrows() if r.wn > 0}

    def solve_rates(self) -> dict[str, float]:
        """Recency-weighted posterior mean solve rate of each task seen (prior: its level)."""
        if self._p_cache is not None:
            return self._p_cache
        t = self._weighted()
        t = t[t["scored"] > 0]
        levels = self.level_rates()
        out: dict[str, float] = {}
        if not t.empty:
            t = t.assign(ws=t["w"] * t["solved"], wn=t["w"] * t["scored"])
            g = t.groupby("task_id").agg(ws=("ws", "sum"), wn=("wn", "sum"),
                                         family=("family", "first"),
                                         difficulty=("difficulty", "first"))
            s = self.cfg.prior_strength
            for tid, r in g.iterrows():
                m = levels.get((r.family, int(r.difficulty)), 0.5)
                out[tid] = float((r.ws + s * m) / (r.wn + s))
        self._p_cache = out
        return out


def informative_probability(p: np.ndarray, g: int) -> np.ndarray:
    """Chance that G Bernoulli(p) rewards are not all equal: 1 - p^G - (1-p)^G."""
    p = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    return 1.0 - p ** g - (1.0 - p) ** g


def _frontiers(pool: Sequence[Task], levels: dict[tuple[str, int], float],
               promote_at: float) -> dict[str, int]:
    """Per family: the lowest difficulty in the pool whose solve rate is below `promote_at`
    (or not yet measured). Everything up to it is open; above it is damped."""
    by_family: dict[str, set[int]] = {}
    for t in pool:
        by_family.setdefault(t.family, set()).add(t.difficulty)
    out = {}
    for fam, ds in by_family.items():
        ordered = sorted(ds)
        out[fam] = next((d for d in ordered if levels.get((fam, d), 0.0) < promote_at),
                        ordered[-1])
    return out


def task_weights(pool: Sequence[Task], ledger: DifficultyLedger,
                 cfg: CurriculumConfig | None = None) -> np.ndarray:
    """Sampling weight of each task in `pool` (not normalised)."""
    cfg = cfg or ledger.cfg
    if cfg.strategy == "uniform":
        return np.ones(len(pool))
    seen = ledger.solve_rates()
    levels = ledger.level_rates()
    by_diff: dict[int, list[float]] = {}
    for (_, d), r in levels.items():
        by_diff.setdefault(d, []).append(r)
    frontier = _frontiers(pool, levels, cfg.promote_at)
    p = np.empty(len(pool))
    ramp = np.ones(len(pool))
    for i, t in enumerate(pool):
        if t.task_id in seen:
            p[i] = seen[t.task_id]
        elif (t.family, t.difficulty) in levels:
            p[i] = levels[(t.family, t.difficulty)]
        elif t.difficulty in by_diff:
            p[i] = float(np.mean(by_diff[t.difficulty]))
        else:
            p[i] = 0.5  # nothing known: as uncertain as can be, so worth a look
        above = t.difficulty - frontier[t.family]
        if above > 0:
            ramp[i] = cfg.ramp_damping ** above
    w = (cfg.floor + informative_probability(p, cfg.group_size)) * ramp
    if cfg.balance_families:
        fams = np.array([t.family for t in pool])
        _, inverse, counts = np.unique(fams, return_inverse=True, return_counts=True)
        w = w / counts[inverse]
        family_w = np.bincount(inverse, weights=w)  # the mean of its tasks' weights
        lift = np.maximum(family_w, cfg.family_floor) / family_w
        w = w * lift[inverse]
    return w


def sample_batch(pool: Sequence[Task], ledger: DifficultyLedger, n: int,
                 rng: np.random.Generator, cfg: CurriculumConfig | None = None,
                 exclude: Iterable[str] = (), split: str = "train") -> list[Task]:
    """Draw `n` distinct tasks of `split` from `pool` (fewer if the pool has fewer), by weight.

    Held-out tasks are never drawn for training (`split="train"`); `exclude` names task ids
    already in this batch (used when refilling it)."""
    if n <= 0:
        return []
    banned = set(exclude)
    eligible = [t for t in pool if t.split == split and t.task_id not in banned]
    if not eligible:
        return []
    w = task_weights(eligible, ledger, cfg)
    k = min(n, len(eligible))
    idx = rng.choice(len(eligible), size=k, replace=False, p=w / w.sum())
    return [eligible[i] for i in idx]


# -- dynamic sampling -----------------------------------------------------------------------
def drop_uninformative_groups(rows: pd.DataFrame, reward_col: str = "reward",
                              group_col: str = "group_id") -> tuple[pd.DataFrame, list]:
    """Rows of the groups with reward variance > 0, and the ids of the groups dropped."""
    _check_columns(rows, (reward_col, group_col), "rollout rows")
    keep = informative_groups(rows[reward_col].to_numpy(), rows[group_col].to_numpy())
    dropped = list(pd.unique(rows.loc[~keep, group_col]))
    return rows[keep], dropped


T = TypeVar("T")


@dataclass(frozen=True)
class FillStats:
    rounds: int
    groups_generated: int
    groups_kept: int

    @property
    def informative_share(self) -> float:
        return self.groups_kept / self.groups_generated if self.groups_generated else math.nan


@dataclass(frozen=True)
class GroupBatch(Generic[T]):
    groups: list[T]
    stats: FillStats


def fill_informative_batch(sample: Callable[[int, set[str]], list[Task]],
                           run_groups: Callable[[list[Task]], list[T]],
                           rewards_of: Callable[[T], Sequence[float]], n_groups: int,
                           max_rounds: int = 4, oversample: float = 1.0) -> GroupBatch[T]:
    """DAPO dynamic sampling: sample tasks, run a group per task, keep the informative groups,
    and sample again for the shortfall (never the same task twice) until `n_groups` are kept or
    `max_rounds` have run. `sample(k, used_ids)` and `run_groups(tasks)` are the caller's."""
    kept: list[T] = []
    used: set[str] = set()
    generated = rounds = 0
    while len(kept) < n_groups and rounds < max_rounds:
        need = n_groups - len(kept)
        tasks = sample(max(need, math.ceil(need * oversample)), used)
        if not tasks:
            break
        rounds += 1
        used.update(t.task_id for t in tasks)
        for group in run_groups(tasks):
            generated += 1
            r = np.asarray(rewards_of(group), dtype=float)
            r = r[~np.isnan(r)]
            if r.size >= 2 and r.max() - r.min() > 1e-9:
                kept.append(group)
    return GroupBatch(kept[:n_groups], FillStats(rounds, generated, min(len(kept), n_groups)))
