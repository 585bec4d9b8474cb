"""Input/output unit tests with per-test outcomes, run in a sandbox and compared outside it."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

from rewards import pyast
from rewards.harness import HARNESS_SOURCE
from rewards.records import parse_records
from sandbox.base import ExecResult, Limits, Sandbox
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
    return task.prompt + completion


def run_io_tests(task: Task, completion: str, sandbox: Sandbox, limits: Limits,
                 per_test_timeout_s: float = 1.0) -> TestReport:
    n = len(task.tests)
    source = program_source(task, completion)
    try:
        pyast.parse(source)
    except (SyntaxError, ValueError):
        return TestReport(("error",) * n, ("SyntaxError",) * n, "syntax_error", None)
    expected = [json.loads(json.dumps(t.expected)) for t in task.tests]  # tuples -> lists
    files = {
        "solution.py": source,
        "harness.py": HARNESS_SOURCE,
        "inputs.json": json.dumps([list(t.args) for t in task.tests]),
    }
    res = sandbox.run(files, ["python", "harness.py", task.entry_point,
                              str(per_test_timeout_s)], limits)
    if res.status == "infra_error":
        return TestReport(("missing",) * n, (), "infra_error", res)
    recs = parse_records(res, n)
    outcomes: list[Outcome] = []
    error_types: list[str] = []
    for i in range(n):
        if i in recs.values:
            outcomes.append("passed" if values_equal(expected[i], recs.values[i]) else "failed")
        elif i in recs.errors:
            outcomes.append("timeout" if recs.errors[i] == "Timeout" else "error")
            error_types.append(recs.errors[i])
        else:
            outcomes.append(missing_outcome(res))
    return TestReport(tuple(outcomes), tuple(error_types), res.status, res, tuple(recs.flags),
                      recs.load_error)


def missing_outcome(res: ExecResult) -> Outcome:
    """The outcome of a test that never answered: the run's fate, never a pass."""
    if res.status == "timeout":
        return "timeout"
    if res.status == "memory_exceeded":
        return "error"
    return "missing"
