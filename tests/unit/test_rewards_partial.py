"""Honest partial solutions get partial credit; components, weights and infra errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

from envs.humaneval.problems import humaneval_by_id
from envs.score import score
from rewards import wire
from rewards.aggregate import RewardConfig, group_advantages
from rewards.static_checks import check_static
from sandbox.base import ExecResult, Limits
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox
from tasks.record import Task, TestCase

LIMITS = Limits(timeout_s=3.0)


@pytest.fixture(scope="module")
def sandbox():
    sbx = make_sandbox(SandboxConfig())
    yield sbx
    sbx.close()


@pytest.fixture(scope="module")
def he():
    return humaneval_by_id()


def test_humaneval_partial_solution_gets_the_fraction_of_asserts_passed(he, sandbox):
    # truncate_number's asserts: f(3.5) == 0.5, |f(1.33) - 0.33| < 1e-6, |f(123.456) - 0.456| < 1e-6
    # `return 0.5` passes only the first: 1/3.
    bd, rep = score(he["HumanEval/2"], "    return 0.5\n", sandbox, LIMITS, RewardConfig())
    assert rep.test_names[0] == "assert candidate(3.5) == 0.5"
    assert bd.test_outcomes == ("passed", "failed", "failed")
    assert bd.reward == pytest.approx(1 / 3) and bd.hack_flags == ()


def test_humaneval_per_assert_outcomes_record_errors_by_type(he, sandbox):
    # below_zero (HumanEval/3) has 6 asserts; an empty list is the first: [] -> False.
    body = "    if not operations:\n        return False\n    raise ValueError('todo')\n"
    bd, _ = score(he["HumanEval/3"], body, sandbox, LIMITS, RewardConfig())
    assert bd.test_outcomes[0] == "passed" and bd.tests_passed == 1 and bd.tests_total == 6
    assert bd.errors == 5 and dict(bd.error_counts) == {"ValueError": 5}
    assert bd.error_type == "ValueError"


def test_io_partial_solution_gets_partial_credit(sandbox):
    task = Task(task_id="t-add3", suite="unit", family="add", difficulty=1, split="train",
                prompt="def add3(x):\n", entry_point="add3",
                tests=(TestCase(args=(0,), expected=3), TestCase(args=(1,), expected=4),
                       TestCase(args=(-3,), expected=0), TestCase(args=(7,), expected=10)))
    bd, _ = score(task, "    return 3 if x == 0 else x + 3 if x > 0 else 99\n", sandbox, LIMITS,
                  RewardConfig())
    assert bd.test_outcomes == ("passed", "passed", "failed", "passed")
    assert bd.reward == pytest.approx(0.75)


def test_weighted_combination_keeps_every_component(he, sandbox):
    # 1/3 passed; one lint finding (unused import os) and one forbidden construct (import os):
    # 1.0 * 1/3 - 0.1 * 1 - 0.05 * 1 = 0.18333...
    cfg = RewardConfig(lint_weight=0.1, forbidden_weight=0.05)
    bd, _ = score(he["HumanEval/2"], "    import os\n    return 0.5\n", sandbox, LIMITS, cfg)
    assert bd.lint_findings == ("UnusedImport:os",) and bd.forbidden == ("import:os",)
    assert bd.reward == pytest.approx(1 / 3 - 0.1 - 0.05)
    comp = bd.components()
    assert comp["pass_fraction"] == pytest.approx(1 / 3) and comp["lint_findings"] == 1.0
    assert comp["exec_time_s"] > 0 and comp["output_bytes"] > 0


def test_syntax_error_scores_zero_without_running(he, sandbox):
    bd, rep = score(he["HumanEval/2"], "    return (\n", sandbox, LIMITS, RewardConfig())
    assert bd.reward == 0.0 and not bd.syntax_ok and rep.exec_result is None


def test_static_checks_judge_only_the_completions_lines():
    prompt = "from typing import List\nimport math\n\ndef f(xs: List[int]) -> int:\n"
    rep = check_static(prompt, "    import json\n    return undefined + len(xs)\n")
    assert rep.syntax_ok
    assert rep.lint == ("UndefinedName:undefined", "UnusedImport:json")  # not `math`
    assert rep.hack_flags == ("file_access",)  # json: a reader of data files


def test_canonical_humaneval_solutions_raise_no_static_flag(he):
    flagged = {t.task_id: check_static(t.prompt, t.reference).hack_flags for t in he.values()}
    assert {k: v for k, v in flagged.items() if v} == {}


class _FlakySandbox:
    """The real sandbox behind a failure of the infrastructure on its first `fail` runs."""

    name = "flaky"

    def __init__(self, inner, fail: int) -> None:
        self.inner, self.fail, self.calls = inner, fail, 0

    def run(self, files, argv, limits=Limits(), stdin=None, collect=()):
        self.calls += 1
        if self.calls <= self.fail:
            return ExecResult("infra_error", None, "", "", 0.0, self.name, error="no workspace")
        return self.inner.run(files, argv, limits, stdin, collect)

    def close(self):
        pass


def test_infra_error_is_retried_then_scored_normally(he, sandbox):
    flaky = _FlakySandbox(sandbox, fail=2)
    bd, _ = score(he["HumanEval/2"], "    return number % 1.0\n", flaky, LIMITS, RewardConfig())
    assert flaky.calls == 3 and bd.reward == 1.0 and not bd.infra_error


def test_persistent_infra_error_is_nan_and_left_out_of_advantages(he, sandbox):
    flaky = _FlakySandbox(sandbox, fail=99)
    bd, _ = score(he["HumanEval/2"], "    return number % 1.0\n", flaky, LIMITS, RewardConfig())
    assert math.isnan(bd.reward) and bd.infra_error and flaky.calls == 3
    # group of three: rewards 1, 0 and the unscored one; the NaN neither counts as 0 nor moves
    # the others: mean 0.5, std 0.5 -> advantages +1, -1, and 0 for the unscored sample.
    adv = group_advantages(np.array([1.0, 0.0, bd.reward]), np.array(["g", "g", "g"]))
    assert adv == pytest.approx([1.0, -1.0, 0.0], abs=1e-5)


def test_wire_keeps_tuples_and_refuses_lying_subclasses():
    v = {"a": (1, 2.5, None), 3: [True, frozenset({1})], "b": b"\x00", "c": {1, 2}}
    assert wire.decode(wire.encode(v)) == v
    assert type(wire.decode(wire.encode((1,)))) is tuple
    with pytest.raises(wire.NonPlainResult):
        wire.encode([type("Liar", (int,), {})(1)])
    for bad in ([1, 2], {"list": 1}, {"set": [{"list": []}]}, {"what": []}):
        with pytest.raises(wire.MalformedValue):
            wire.decode(bad)


@pytest.mark.parametrize("body", [
    "    return undefined_name + x\n",
    "    import os\n    return x\n",
    "    list = 3\n    return list + len(str(x))\n",
    "    def len(v):\n        return 0\n    return len(x) + print\n",
    "    try:\n        return nope\n    except NameError:\n        return x\n",
    "    global zz\n    return [y for y in range(x)] + [y]\n",
])
def test_the_fast_linter_finds_exactly_what_pyflakes_finds(body):
    import ast

    from pyflakes.checker import Checker

    from rewards.static_checks import FastChecker

    tree = ast.parse("import sys\n\ndef f(x):\n" + body)
    key = lambda c: [(type(m).__name__, m.lineno, m.message_args) for m in c.messages]  # noqa: E731
    assert key(FastChecker(tree, "s.py")) == key(Checker(tree, "s.py"))
    if "undefined_name" in body or "import os" in body:
        assert key(FastChecker(tree, "s.py"))  # and it does find something where there is one
