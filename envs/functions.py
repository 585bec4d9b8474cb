"""Kind `io`: write a Python function; hidden input/output tests call it in the sandbox and
compare its return values outside (rewards/io_tests.py). Its own tasks are the procedural suite
(tasks/procedural.py: families, difficulty levels, verification-only families)."""
from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from envs.base import SingleTurnEnv, known_names
from rewards.io_tests import TestReport, run_io_tests
from rewards.static_checks import check_static
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
        from tasks.procedural import FAMILIES  # noqa: PLC0415

        return known_names(v, FAMILIES)


def function_problems(task: Task) -> list[str]:
    """What a function task needs: an entry point defined by a `def` in the prompt, tests."""
    problems = []
    if task.entry_point is None:
        problems.append("field 'entry_point': required for a function task")
    elif not re.search(rf"^\s*def\s+{re.escape(task.entry_point)}\s*\(", task.prompt, re.M):
        problems.append(f"field 'entry_point': {task.entry_point!r} is not defined by a 'def' "
                        f"in the prompt")
    if not task.tests:
        problems.append("field 'tests': a function task needs at least one hidden test")
    return problems


class FunctionTaskEnv(SingleTurnEnv):
    """What the function kinds share: the record checks, the trivial answer, static checks."""

    def validate(self, task: Task) -> Task:
        problems = function_problems(task)
        if problems:
            raise ValueError("; ".join(problems))
        return super().validate(task)

    def problems(self, task: Task) -> list[str]:
        from tasks.quality import check_tests_consistent  # noqa: PLC0415

        bad = function_problems(task)
        return bad or check_tests_consistent(task)

    def trivial_answers(self, task: Task) -> dict[str, str]:
        return {"pass": "    pass\n"}

    def answer(self, state: Task, text: str) -> str:
        from envs.answers import extract_answer  # noqa: PLC0415

        return extract_answer(state.prompt, state.entry_point, text)

    def static(self, task: Task, answer: str):
        return check_static(task.prompt, answer)


class FunctionsEnv(FunctionTaskEnv):
    name = "io"
    description = "a Python function graded by hidden input/output tests (procedural suite)"
    Config = ProceduralOptions

    def generate(self) -> list[Task]:
        from tasks.procedural import generate_suite  # noqa: PLC0415

        c = self.config
        return generate_suite(c.families, c.difficulties, c.tasks_per_family, c.n_tests, c.seed,
                              c.heldout_fraction, function_name=c.function_name)

    def sft_tasks(self) -> list[Task]:
        from tasks.procedural import training_instances  # noqa: PLC0415

        c = self.config
        return [t for t in training_instances(c.families, c.difficulties, c.tasks_per_family,
                                              c.n_tests, c.seed, c.heldout_fraction,
                                              c.sft_variants, function_name=c.function_name,
                                              generic_names=c.sft_generic_names)
                if t.reference is not None]

    def attacks(self, task: Task) -> list:
        from envs.functions_hacks import function_attacks  # noqa: PLC0415

        return function_attacks()

    def verify(self, task: Task, answer: str, sandbox: Sandbox, limits: Limits,
               per_test_timeout_s: float) -> TestReport:
        return run_io_tests(task, answer, sandbox, limits, per_test_timeout_s)
