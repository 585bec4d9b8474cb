"""pass@k with intervals over evaluation rows (storage/evaluations.py columns), per source and
per family. Plain functions: no Prefect, no Dask.

Two intervals, each where its assumptions hold:
- greedy pass@1: one decode per task, so the tasks' outcomes are independent Bernoulli draws
  and the Wilson score interval is the right one (it stays inside [0, 1] and keeps its coverage
  at small n and near 0 or 1, where the normal approximation does not).
- sampled pass@k (Chen et al. 2021's unbiased estimator, averaged over tasks): the n samples of
  one task are correlated (same prompt), so the unit of resampling is the task: a percentile
  bootstrap over tasks (seeded, so a rerun prints the same interval). With few tasks it is
  too narrow, as every bootstrap is; the task count is printed beside it.
Samples that could not be scored (infra_error) are left out, never counted as failures.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from rewards.evaluate import pass_at_k

Z95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 2000


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion; (nan, nan) for n = 0."""
    if n == 0:
        return math.nan, math.nan
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_mean(values: list[float], seed: int = 0,
                   resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean of per-task values."""
    if not values:
        return math.nan, math.nan
    v = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(resamples, len(v)))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


@dataclass(frozen=True)
class PassRow:
    """One line of the table: a group of tasks (all, a source, a family)."""
    group: str            # "all", "source=<name>", "family=<name>"
    tasks: int
    greedy: float         # greedy pass@1 (nan without greedy rows)
    greedy_ci: tuple[float, float]
    pass_k: dict[int, tuple[float, float, float]]  # k -> (estimate, low, high), sampled
    samples: int          # scored sampled samples
    unscored: int         # rows left out (infra_error)
    hack_flagged: int


def _group_row(group: str, rows: list[dict], ks: tuple[int, ...], seed: int) -> PassRow:
    greedy = [r["passed"] for r in rows if r["mode"] == "greedy" and r["passed"] is not None]
    per_task: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        if r["mode"] == "sampled" and r["passed"] is not None:
            per_task[r["task_id"]].append(bool(r["passed"]))
    pass_k = {}
    n_min = min((len(v) for v in per_task.values()), default=0)
    for k in ks:
        if per_task and k <= n_min:
            vals = [pass_at_k(len(v), sum(v), k) for v in per_task.values()]
            pass_k[k] = (float(np.mean(vals)), *bootstrap_mean(vals, seed))
    return PassRow(
        group=group, tasks=len({r["task_id"] for r in rows}),
        greedy=float(np.mean(greedy)) if greedy else math.nan,
        greedy_ci=wilson(sum(greedy), len(greedy)), pass_k=pass_k,
        samples=sum(len(v) for v in per_task.values()),
        unscored=sum(r["passed"] is None for r in rows),
        # a flags list read through pandas is an array, whose truth cannot be read
        hack_flagged=sum(r["hack_flags"] is not None and len(r["hack_flags"]) > 0 for r in rows))


def summarize(rows: list[dict], ks: tuple[int, ...] = (1,), seed: int = 0) -> list[PassRow]:
    """The table: all rows, then each source, then each family (sorted by name)."""
    out = [_group_row("all", rows, ks, seed)]
    for col in ("source", "family"):
        by: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            by[str(r[col])].append(r)
        if col == "source" and len(by) < 2 and not any(r[col] for r in rows):
            continue
        out += [_group_row(f"{col}={name}", by[name], ks, seed) for name in sorted(by)]
    return out


def tool_call_summary(rows: list[dict]) -> str | None:
    """For the episodes played with tools: calls and turns an episode, the share of calls
    that were well-formed (read and fit their tool), and of episodes that made at least one
    valid call; None where no episode used tools."""
    eps = [r for r in rows if r.get("tool_calls") is not None]
    if not eps:
        return None
    calls = [c for r in eps for c in r["tool_calls"]]
    valid = [c for c in calls if c["status"] != "malformed"]
    some = sum(any(c["status"] != "malformed" for c in r["tool_calls"]) for r in eps)
    rate = f"{len(valid) / len(calls):.1%}" if calls else "-"
    return (f"tools: {len(eps)} episodes, {len(calls) / len(eps):.2f} calls and "
            f"{sum(r['turns'] or 0 for r in eps) / len(eps):.2f} turns an episode; valid calls "
            f"{rate} ({len(valid)}/{len(calls)}); episodes with a valid call {some / len(eps):.1%}")


def _fmt(est: float, lo: float, hi: float) -> str:
    if math.isnan(est):
        return "-"
    return f"{est:.3f} [{lo:.3f}, {hi:.3f}]"


def format_table(table: list[PassRow], ks: tuple[int, ...]) -> str:
    """A Markdown table: greedy pass@1 (Wilson 95%), sampled pass@k (bootstrap over tasks 95%)."""
    shown = [k for k in ks if any(k in r.pass_k for r in table)]
    head = (["group", "tasks", "greedy pass@1 [Wilson 95%]"]
            + [f"pass@{k} [bootstrap 95%]" for k in shown]
            + ["samples", "unscored", "hack-flagged"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table:
        cells = [r.group, str(r.tasks), _fmt(r.greedy, *r.greedy_ci)]
        cells += [_fmt(*r.pass_k[k]) if k in r.pass_k else "-" for k in shown]
        cells += [str(r.samples), str(r.unscored), str(r.hack_flagged)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
