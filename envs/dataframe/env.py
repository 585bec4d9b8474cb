"""Kind `dataframe`: write a pandas function of a DataFrame; its results on generated frames
are compared outside the sandbox (envs/dataframe/grading.py). Needs the interpreter's
site-packages inside the sandbox (pandas)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from envs.dataframe.grading import run_dataframe_tests
from envs.function_task import FunctionTaskEnv
from rewards.reports import TestReport
from sandbox.base import Limits, Sandbox
from tasks.record import Task


class DataFrameOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    families: list[str] | None = Field(None, description="dataframe families (null: all)")
    difficulties: list[int] = Field(default_factory=lambda: [1, 2, 3], min_length=1)
    tasks_per_family: int = Field(5, ge=1)
    n_tests: int = Field(5, ge=1)
    seed: int = 0
    heldout_fraction: float = Field(0.2, gt=0, lt=1)


class DataFrameEnv(FunctionTaskEnv):
    name = "dataframe"
    description = "a pandas function of a DataFrame graded on generated frames"
    Config = DataFrameOptions
    site_packages = True
    compares_values = True

    def generate(self) -> list[Task]:
        from envs.dataframe.families import generate_dataframe_suite  # noqa: PLC0415

        c = self.config
        return generate_dataframe_suite(c.families, c.difficulties, c.tasks_per_family,
                                        c.n_tests, c.seed, c.heldout_fraction)

    def attacks(self, task: Task) -> list:
        from envs.dataframe.hacks import dataframe_attacks  # noqa: PLC0415

        return dataframe_attacks()

    def verify(self, task: Task, answer: str, sandbox: Sandbox, limits: Limits,
               per_test_timeout_s: float) -> TestReport:
        return run_dataframe_tests(task, answer, sandbox, limits, per_test_timeout_s)
