"""What the kinds whose answer is one Python function share (`io`, `humaneval`, `dataframe`, and
any plug-in of the same shape): the record checks (an entry point that the prompt defines, hidden
tests), the trivial answer, the answer's extraction and the static checks."""
from __future__ import annotations

import re
from typing import ClassVar

from envs.base import SingleTurnEnv
from rewards.static_checks import check_static
from tasks.record import Task


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

    # True: the kind's grader compares each test's returned value with its `expected` (the
    # task check then also refuses repeated tests and one answer for all: a constant passes);
    # False: a test is something else, e.g. HumanEval's one check program
    compares_values: ClassVar[bool] = False

    def validate(self, task: Task) -> Task:
        problems = function_problems(task)
        if problems:
            raise ValueError("; ".join(problems))
        return super().validate(task)

    def problems(self, task: Task) -> list[str]:
        from tasks.quality import check_tests_consistent  # noqa: PLC0415

        bad = function_problems(task)
        return bad or check_tests_consistent(task, compares_values=self.compares_values)

    def trivial_answers(self, task: Task) -> dict[str, str]:
        return {"pass": "    pass\n"}

    def answer(self, state: Task, text: str) -> str:
        from envs.answers import extract_answer  # noqa: PLC0415

        return extract_answer(state.prompt, state.entry_point, text)

    def static(self, task: Task, answer: str):
        return check_static(task.prompt, answer)
