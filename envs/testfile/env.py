"""Kind `testfile`: the task carries a test file (pytest, or MBPP-style `assert` lines) run in
the sandbox against the candidate module; the verifier, its payload and its threat model are in
envs/testfile/grading.py, the grader's pytest plugin in envs/testfile/plugin/."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from envs.base import SingleTurnEnv
from envs.testfile.grading import (TestFilePayload, payload_problems, run_test_file,
                                   solution_source, testfile_hack_flags)
from rewards import pyast
from rewards.reports import TestReport
from rewards.static_checks import StaticReport, check_static
from sandbox.base import Limits, Sandbox
from tasks.record import Task

# The shipped task set (built from data/basics.yaml by data/build_basics.py): the kind generates
# no tasks of its own, so its hack suite is played on these.
BASICS = Path(__file__).parent / "data" / "basics.jsonl"


class TestFileEnv(SingleTurnEnv):
    """A task's own test file, run by pytest in the sandbox against the answer."""

    __test__ = False
    name = "testfile"
    description = "a Python module graded by the task's own test file (pytest or assert lines)"
    Payload = TestFilePayload
    site_packages = True  # pytest lives in the interpreter's site-packages

    def validate(self, task: Task) -> Task:
        super().validate(task)  # the payload's fields, named
        bad = payload_problems(task)
        if bad:
            raise ValueError("; ".join(bad))
        return task

    def problems(self, task: Task) -> list[str]:
        bad = super().problems(task)  # the record checks (validate)
        if bad:
            return bad
        if task.reference is not None:
            try:
                pyast.parse(solution_source(task, task.reference))
            except (SyntaxError, ValueError) as exc:
                return [f"field 'reference': does not parse with the prompt: {exc}"]
        return []

    def trivial_answers(self, task: Task) -> dict[str, str]:
        return {"pass": "    pass\n"} if task.entry_point else {"empty": ""}

    def attacks(self, task: Task) -> list:
        from envs.testfile.hacks import attacks  # noqa: PLC0415 (the suite builds on envs.hacks)

        return attacks(task)

    def attack_tasks(self) -> list[Task]:
        from envs.registry import validate_by_kind  # noqa: PLC0415
        from tasks.files import load_tasks  # noqa: PLC0415

        return load_tasks(BASICS, validate=validate_by_kind)

    def answer(self, state: Task, text: str) -> str:
        from envs.answers import extract_answer  # noqa: PLC0415

        return extract_answer(state.prompt if state.entry_point else "", state.entry_point, text)

    def static(self, task: Task, answer: str) -> StaticReport:
        prompt = task.prompt if task.entry_point else ""
        base = check_static(prompt, answer)
        if not base.syntax_ok:
            return base
        extra = testfile_hack_flags(prompt + answer, prompt.count("\n") + 1)
        return replace(base, hack_flags=tuple(sorted(set(base.hack_flags) | set(extra))))

    def verify(self, task: Task, answer: str, sandbox: Sandbox, limits: Limits,
               per_test_timeout_s: float) -> TestReport:
        return run_test_file(task, answer, sandbox, limits, per_test_timeout_s)
