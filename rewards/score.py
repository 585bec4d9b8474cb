"""score(): one completion of one task, in a sandbox, to a RewardBreakdown."""
from __future__ import annotations

from rewards.aggregate import RewardBreakdown, RewardConfig, aggregate
from rewards.dataframe_tests import run_dataframe_tests
from rewards.humaneval_tests import run_humaneval_tests
from rewards.io_tests import TestReport, run_io_tests
from rewards.static_checks import check_static
from sandbox.base import Limits, Sandbox
from tasks.record import Task

VERIFIERS = {"io": run_io_tests, "humaneval": run_humaneval_tests,
             "dataframe": run_dataframe_tests}


def score(task: Task, completion: str, sandbox: Sandbox, limits: Limits, cfg: RewardConfig,
          infra_retries: int = 2) -> tuple[RewardBreakdown, TestReport]:
    """Grade `completion`; an infrastructure failure is retried, then reported as NaN reward."""
    try:
        verify = VERIFIERS[task.verifier]
    except KeyError:
        raise ValueError(f"task {task.task_id}: verifier={task.verifier!r}; expected one of {sorted(VERIFIERS)}")
    static = check_static(task.prompt, completion)
    for _ in range(infra_retries + 1):
        report = verify(task, completion, sandbox, limits, cfg.per_test_timeout_s)
        if not report.infra_error:
            break
    return aggregate(report, cfg, static), report
