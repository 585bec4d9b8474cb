"""The `humaneval` verifier: HumanEval-style `check(candidate)` tests with one outcome per assert.

The test's check is planned in the grader (`envs/humaneval/plan.py`): only the arguments of
the candidate calls go into the sandbox, only typed plain values come back, and every assert is
evaluated here. Partial credit is the fraction of asserts passed. A task's check travels in its
single `TestCase` as `expected={"humaneval_test": <source of the test module>}`.

`run_humaneval_batch` grades several samples in one sandbox run, each in its own forked process
(see `envs/humaneval/harness.py`); `run_humaneval_tests` is a batch of one.
"""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Sequence

from envs.batch_harness import split_batch, warm_zygotes
from envs.humaneval.harness import HARNESS_SOURCE
from envs.humaneval.plan import Plan, Unplannable, cached_plan, judge
from rewards import pyast
from rewards.records import parse_records
from rewards.reports import Outcome, TestReport, missing_outcome, program_source
from sandbox.base import ExecResult, Limits, Sandbox
from tasks.record import Task

TEST_KEY = "humaneval_test"


def task_plan(task: Task) -> Plan:
    """The task's planned calls and asserts; a check that cannot be planned is a bad task."""
    spec = task.tests[0].expected if len(task.tests) == 1 else None
    if not isinstance(spec, dict) or not isinstance(spec.get(TEST_KEY), str):
        raise ValueError(f"task {task.task_id}: kind='humaneval' needs exactly one TestCase "
                         f"with expected={{{TEST_KEY!r}: <test source>}}")
    plan = cached_plan(task.prompt, spec[TEST_KEY], task.entry_point)
    if isinstance(plan, Unplannable):
        raise ValueError(f"task {task.task_id}: its check cannot be graded outside the sandbox: "
                         f"{plan}")
    return plan


def run_humaneval_tests(task: Task, completion: str, sandbox: Sandbox, limits: Limits,
                        per_test_timeout_s: float = 1.0) -> TestReport:
    return run_humaneval_batch([(task, completion)], sandbox, limits, per_test_timeout_s)[0]


def run_humaneval_batch(items: Sequence[tuple[Task, str]], sandbox: Sandbox, limits: Limits,
                        per_test_timeout_s: float = 1.0) -> list[TestReport]:
    """Grade each (task, completion); `limits.timeout_s` bounds each sample, not the batch."""
    plans = [task_plan(t) for t, _ in items]
    reports: list[TestReport | None] = [None] * len(items)
    batch, index = [], []
    for k, ((task, completion), plan) in enumerate(zip(items, plans)):
        source = program_source(task, completion)
        try:
            pyast.parse(source)
        except (SyntaxError, ValueError):
            n = len(plan.asserts)
            reports[k] = TestReport(("error",) * n, ("SyntaxError",) * n, "syntax_error", None,
                                    test_names=_names(plan))
            continue
        batch.append({"entry": task.entry_point, "calls": list(plan.calls), "source": source})
        index.append(k)
    if batch:
        run_limits = replace(limits, timeout_s=limits.timeout_s * len(batch) + 2.0,
                             output_bytes=limits.output_bytes * len(batch))
        res = sandbox.run({"harness.py": HARNESS_SOURCE, "batch.json": json.dumps(batch)},
                          _command(per_test_timeout_s, limits.timeout_s), run_limits)
        per_sample = [p.end for p in split_batch(res, len(batch))]  # None: never finished
        for j, k in enumerate(index):
            reports[k] = _report(plans[k], per_sample[j], res)
    return reports  # type: ignore[return-value]


def _command(per_test_timeout_s: float, timeout_s: float) -> list[str]:
    return ["python", "-S", "harness.py", str(per_test_timeout_s), str(timeout_s)]


def warm_sandbox(sandbox: Sandbox, runs: int) -> None:
    """Let `sandbox` start what `runs` concurrent batches will run in (the process backend's
    zygotes) in the background, while the caller plans them; a no-op for other backends."""
    warm_zygotes(sandbox, {"harness.py": HARNESS_SOURCE}, _command(1.0, 1.0), runs)


def _names(plan: Plan) -> tuple[str, ...]:
    return tuple(a.source for a in plan.asserts)


def _report(plan: Plan, sample: ExecResult | None, batch: ExecResult) -> TestReport:
    n = len(plan.asserts)
    if batch.status == "infra_error":
        return TestReport(("missing",) * n, (), "infra_error", batch, test_names=_names(plan))
    if sample is None:  # the batch ended before this sample did
        status = batch.status if batch.status != "ok" else "failed"
        sample = ExecResult(status, batch.exit_code, "", "", 0.0, batch.backend)  # type: ignore[arg-type]
    recs = parse_records(sample, len(plan.calls))
    results = {i: ("value", v) for i, v in recs.values.items()}
    results.update({i: ("timeout" if e == "Timeout" else "error", e)
                    for i, e in recs.errors.items()})
    judged = judge(plan, results, missing=missing_outcome(sample))
    outcomes: tuple[Outcome, ...] = tuple(o for o, _ in judged)  # type: ignore[misc]
    error_types = tuple(e for o, e in judged if o in ("error", "timeout") and e)
    return TestReport(outcomes, error_types, sample.status, sample, tuple(recs.flags),
                      recs.load_error, test_names=_names(plan))
