"""A kind whose own sandbox program cannot import its dependency (issue 38 item 8): the grade
says so by name, with what to do, and is not retried (no retry will find the module); the task
check prints it. The sandbox is the real process sandbox; the kind is written here."""
from __future__ import annotations

import math

import pytest

from envs.base import SingleTurnEnv, StepContext, TestReport, missing_module
from envs.quality import check_task
from rewards.aggregate import RewardConfig
from sandbox.base import ExecResult, Limits
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox
from tasks.record import Task

HARNESS = "import rollforge_no_such_scorer\nprint('scored')\n"


class NeedsAScorer(SingleTurnEnv):
    """Grades with a package its harness imports in the sandbox; a harness that did not run
    is an infrastructure failure (not the answer's), as the plug-in checklist says."""

    name = "needs_scorer"
    description = "test kind"
    calls = 0

    def verify(self, task, answer, sandbox, limits, per_test_timeout_s):
        type(self).calls += 1
        res = sandbox.run({"harness.py": HARNESS}, ["python", "harness.py"], limits)
        if "scored" not in res.stdout:
            return TestReport(("missing",), (), "infra_error", res)
        return TestReport(("passed",), (), "ok", res)


TASK = Task(task_id="needs/1", suite="t", family="f", difficulty=1, split="train",
            prompt="p", kind="needs_scorer", reference="x")


@pytest.fixture(scope="module")
def ctx():
    sbx = make_sandbox(SandboxConfig(timeout_s=20))
    yield StepContext(sbx, Limits(timeout_s=20), RewardConfig())
    sbx.close()


@pytest.mark.parametrize("site_packages, hint", [(False, "set `site_packages = True`"),
                                                 (True, "install it into the interpreter")])
def test_a_missing_dependency_is_named_with_what_to_do_and_not_retried(ctx, site_packages, hint):
    env = type("Env", (NeedsAScorer,), {"site_packages": site_packages, "calls": 0})()
    grade, report = env.grade(TASK, "answer", ctx)
    assert env.calls == 1  # not the default three tries
    assert grade.infra_error and math.isnan(grade.reward)  # not scored, as any infra failure
    assert report.load_error.startswith("MissingDependency: kind 'needs_scorer': its sandbox "
                                        "run could not import 'rollforge_no_such_scorer'")
    assert hint in report.load_error
    problems = check_task(TASK, ctx.sandbox, ctx.limits, env=env).problems
    assert any("MissingDependency" in p and "rollforge_no_such_scorer" in p for p in problems)


def test_only_an_infrastructure_failure_is_read_for_a_missing_module():
    res = ExecResult("failed", 1, "", "ModuleNotFoundError: No module named 'numpy'", 0.1, "x")
    assert missing_module(TestReport(("failed",), ("ModuleNotFoundError",), "failed", res)) is None
    assert missing_module(TestReport(("missing",), (), "infra_error", res)) == "numpy"
    other = ExecResult("infra_error", None, "", "", 0.0, "x", error="bubblewrap failed")
    assert missing_module(TestReport(("missing",), (), "infra_error", other)) is None
