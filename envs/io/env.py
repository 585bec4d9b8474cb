"""Kind `io`: write a Python function; hidden input/output tests call it in the sandbox and
compare its return values outside (envs/io/grading.py). Its own tasks are the procedural suite
(envs/io/procedural.py: families, difficulty levels, verification-only families)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from envs.base import known_names
from envs.function_task import FunctionTaskEnv
from envs.io.grading import run_io_tests
from envs.io.procedural import FAMILIES, generate_suite, training_instances
from rewards.reports import TestReport
from sandbox.base import Limits, Sandbox
from tasks.record import Task


class ProceduralOptions(BaseModel):
    """Which procedural tasks a source of kind `io` generates."""

    model_config = ConfigDict(extra="forbid")

    families: list[str] = Field(default_factory=lambda: ["add", "mul", "filter_gt", "repeat"],
                                min_length=1, description="procedural families in the pool")
    difficulties: list[int] = Field(default_factory=lambda: [1], min_length=1)
    tasks_per_family: int = Field(40, ge=1, description="distinct tasks per (family, difficulty)")
    n_tests: int = Field(6, ge=1, description="hidden tests per task")
    heldout_fraction: float = Field(0.2, gt=0, lt=1, description="share of tasks held out")
    seed: int = 0
    function_name: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                      description="one function name for every task")
    sft_variants: int = Field(8, ge=1, description="seeds whose training-split tasks make the "
                              "SFT data (held-out tasks never appear, whatever the seed)")
    sft_generic_names: float = Field(0.0, ge=0, le=1, description="share of the SFT data shown "
                                     "under a generic function name (f, solve, ...) instead of "
                                     "its family's")

    @field_validator("families")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        return known_names(v, FAMILIES)


class FunctionsEnv(FunctionTaskEnv):
    name = "io"
    description = "a Python function graded by hidden input/output tests (procedural suite)"
    Config = ProceduralOptions
    compares_values = True

    def generate(self) -> list[Task]:
        c = self.config
        return generate_suite(c.families, c.difficulties, c.tasks_per_family, c.n_tests, c.seed,
                              c.heldout_fraction, function_name=c.function_name)

    def sft_tasks(self) -> list[Task]:
        c = self.config
        return [t for t in training_instances(c.families, c.difficulties, c.tasks_per_family,
                                              c.n_tests, c.seed, c.heldout_fraction,
                                              c.sft_variants, function_name=c.function_name,
                                              generic_names=c.sft_generic_names)
                if t.reference is not None]

    def attacks(self, task: Task) -> list:
        from envs.function_hacks import function_attacks  # noqa: PLC0415

        return function_attacks()

    def verify(self, task: Task, answer: str, sandbox: Sandbox, limits: Limits,
               per_test_timeout_s: float) -> TestReport:
        return run_io_tests(task, answer, sandbox, limits, per_test_timeout_s)
