"""What every kind's grader returns: a test report of per-test outcomes, and the few judgements
that every grader makes the same way (when a value equals the expected one, what a test that
never answered counts as, the program a function answer forms with its prompt).

One definition of each, shared by every kind (envs/<kind>/), the score and evaluation
(envs/score.py), the aggregation (rewards/aggregate.py) and pass@k (rewards/evaluate.py), so a
kind can be added or removed without any of these knowing its name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from sandbox.base import ExecResult
from tasks.record import Task

Outcome = Literal["passed", "failed", "error", "timeout", "missing"]


@dataclass(frozen=True)
class TestReport:
    """Per-test outcomes of one completion plus the execution evidence."""

    __test__ = False

    outcomes: tuple[Outcome, ...]
    error_types: tuple[str, ...]  # exception type names seen, one per erroring test
    status: str  # sandbox status, or "syntax_error" when it never ran
    exec_result: ExecResult | None
    hack_flags: tuple[str, ...] = ()
    load_error: str | None = None
    test_names: tuple[str, ...] = ()  # what each outcome checked, where the verifier knows
    # A kind that grades by a score (reasoning-gym's `score_answer`): the fraction in [0, 1]
    # earned, which the reward uses instead of the share of outcomes passed; its outcomes still
    # say what a solve is (every one passed, i.e. a full score). None: the share passed.
    score: float | None = None

    def __post_init__(self) -> None:
        if self.score is not None and not (isinstance(self.score, (int, float))
                                           and 0.0 <= self.score <= 1.0):
            raise ValueError(f"TestReport.score={self.score!r}; expected a number in [0, 1] "
                             "or None")

    @property
    def passed(self) -> int:
        return sum(o == "passed" for o in self.outcomes)

    @property
    def infra_error(self) -> bool:
        return self.status == "infra_error"


def values_equal(expected: Any, actual: Any) -> bool:
    """JSON-value equality; floats compare with a relative tolerance, bool is not int."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, float) or isinstance(actual, float):
        if not isinstance(actual, (int, float)) or not isinstance(expected, (int, float)):
            return False
        try:
            return math.isclose(expected, actual, rel_tol=1e-6, abs_tol=1e-9)
        except OverflowError:  # an int beyond float range equals no float
            return False
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(actual) == len(expected)
                and all(values_equal(e, a) for e, a in zip(expected, actual)))
    if isinstance(expected, dict):
        return (isinstance(actual, dict) and actual.keys() == expected.keys()
                and all(values_equal(expected[k], actual[k]) for k in expected))
    return type(expected) is type(actual) and expected == actual


def program_source(task: Task, completion: str) -> str:
    """The program a function task's answer forms: the prompt (signature and docstring), then
    the completion that continues it."""
    return task.prompt + completion


def missing_outcome(res: ExecResult) -> Outcome:
    """The outcome of a test that never answered: the run's fate, never a pass."""
    if res.status == "timeout":
        return "timeout"
    if res.status == "memory_exceeded":
        return "error"
    return "missing"
