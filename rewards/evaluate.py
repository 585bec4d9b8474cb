"""Score many (task, completion) samples with a thread pool, and pass@k over the results.

Each sandbox run is its own subprocess (or container), so threads are enough to keep N of them
going at once; nothing here imports a scheduler.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

from rewards.aggregate import RewardBreakdown, RewardConfig, aggregate
from rewards.humaneval_tests import run_humaneval_batch
from rewards.io_tests import TestReport
from rewards.score import score
from rewards.static_checks import check_static
from sandbox.base import Limits, Sandbox
from tasks.record import Task


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


def evaluate_samples(samples: Sequence[tuple[Task, str]], sandbox: Sandbox, limits: Limits,
                     cfg: RewardConfig, workers: int = 4, batch_size: int | None = None
                     ) -> list[SampleResult]:
    """Score every (task, completion), `workers` sandbox runs at a time, in input order.

    HumanEval samples go `batch_size` to a sandbox run (each still in its own process inside it;
    default: enough batches to keep every worker busy, at most 16 a batch; 1 gives every sample
    its own sandbox). A sample whose batch hit an infrastructure failure is retried on its own.
    """
    he = [i for i, (t, _) in enumerate(samples) if t.verifier == "humaneval"]
    if batch_size is None:
        batch_size = max(1, min(16, math.ceil(len(he) / (4 * max(1, workers)))))
    jobs: list[list[int]] = [he[i:i + batch_size] for i in range(0, len(he), batch_size)]
    jobs += [[i] for i, (t, _) in enumerate(samples) if t.verifier != "humaneval"]
    out: list[SampleResult | None] = [None] * len(samples)

    def one(i: int) -> None:
        task, completion = samples[i]
        bd, rep = score(task, completion, sandbox, limits, cfg)
        out[i] = SampleResult(task.task_id, bd, rep)

    def run(job: list[int]) -> None:
        if samples[job[0]][0].verifier != "humaneval":
            return one(job[0])
        reports = run_humaneval_batch([samples[i] for i in job], sandbox, limits,
                                      cfg.per_test_timeout_s)
        for i, rep in zip(job, reports):
            if rep.infra_error:
                one(i)  # score() retries it
                continue
            task, completion = samples[i]
            bd = aggregate(rep, cfg, check_static(task.prompt, completion))
            out[i] = SampleResult(task.task_id, bd, rep)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(run, jobs))
    return out  # type: ignore[return-value]


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
