"""The `io` kind's verifier: input/output unit tests with per-test outcomes, run in a sandbox by
the kind's harness (envs/io/harness.py) and compared outside it (`values_equal`)."""
from __future__ import annotations

import json

from envs.io.harness import HARNESS_SOURCE
from rewards import pyast
from rewards.records import parse_records
from rewards.reports import Outcome, TestReport, missing_outcome, program_source, values_equal
from sandbox.base import Limits, Sandbox
from tasks.record import Task


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
