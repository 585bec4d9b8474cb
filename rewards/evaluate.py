"""The result of scoring one sample (`envs.score.evaluate_samples` scores many), and pass@k over
the results."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from rewards.aggregate import RewardBreakdown
from rewards.reports import TestReport


@dataclass(frozen=True)
class SampleResult:
    task_id: str
    breakdown: RewardBreakdown
    report: TestReport

    def to_json(self) -> dict:
        b, r = self.breakdown, self.report
        return {
            "passed": b.solved, "status": b.status, "reward": None if math.isnan(b.reward) else b.reward,
            "tests_passed": b.tests_passed, "tests_total": b.tests_total,
            "test_outcomes": list(b.test_outcomes), "error_type": b.error_type,
            "load_error": r.load_error, "hack_flags": list(b.hack_flags),
            "infra_error": b.infra_error, "lint_findings": list(b.lint_findings),
            "forbidden": list(b.forbidden), "error_counts": dict(b.error_counts),
            "components": {k: (None if math.isnan(v) else v) for k, v in b.components().items()},
        }


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with n samples, c of them correct (Chen et al. 2021):
    1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_at_ks(results: Sequence[SampleResult], ks: Sequence[int]) -> dict[int, float]:
    """Mean pass@k over problems, for each k that every problem has enough scored samples for.
    Samples that could not be scored (infra_error) are left out, never counted as failures."""
    per_task: dict[str, list[bool]] = {}
    for r in results:
        if not r.breakdown.infra_error:
            per_task.setdefault(r.task_id, []).append(r.breakdown.solved)
    if not per_task:
        return {}
    n_min = min(len(v) for v in per_task.values())
    return {k: sum(pass_at_k(len(v), sum(v), k) for v in per_task.values()) / len(per_task)
            for k in sorted(set(ks)) if k <= n_min}
