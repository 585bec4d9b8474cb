"""The `humaneval` kind's hack suite (envs/humaneval/hacks.py) through the kind's real grader (the
batch harness, a forked process per sample) in the process sandbox: none may earn anything, and
each must raise a flag it names. The attacks particular to HumanEval run on two problems, the
single-function attacks it shares with `io` on one (their defence is the same guard, in this
kind's harness). The limit leaves room for a busy machine to start a run at all."""
from __future__ import annotations

import pytest

from envs.base import StepContext
from envs.function_hacks import function_attacks
from envs.hacks import run_suite
from envs.humaneval.hacks import humaneval_attacks
from envs.humaneval.problems import humaneval_by_id
from envs.registry import make_env
from rewards import pyast
from rewards.aggregate import RewardConfig
from sandbox.base import Limits
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox

LIMITS = Limits(timeout_s=6.0, memory_mb=256)
TASKS = ("HumanEval/2", "HumanEval/0")  # a float compared within 1e-6; a bool
SHARED = {a.name for a in function_attacks()}
OWN = [a.name for a in humaneval_attacks() if a.name not in SHARED]
PASSES_BY_DESIGN = {"correct_answer_and_forgery"}


@pytest.fixture(scope="module")
def env():
    return make_env("humaneval", {})


@pytest.fixture(scope="module")
def tasks():
    by_id = humaneval_by_id()
    return [by_id[t] for t in TASKS]


@pytest.fixture(scope="module")
def results(env, tasks):
    sbx = make_sandbox(SandboxConfig())
    try:
        ctx = StepContext(sbx, LIMITS, RewardConfig(per_test_timeout_s=1.0))
        got = run_suite(env, tasks, ctx, only=OWN) + run_suite(env, tasks[:1], ctx,
                                                               only=sorted(SHARED))
        yield {(r.attack, r.task_id): r for r in got}
    finally:
        sbx.close()


def test_the_kind_adds_its_own_attacks_to_the_shared_ones():
    assert len(OWN) >= 5 and SHARED < {a.name for a in humaneval_attacks()}


def test_every_attack_answer_parses(env, tasks):
    for task in tasks:
        for attack in env.attacks(task):
            pyast.parse(task.prompt + attack.actions(task)[0])


@pytest.mark.parametrize("name", [a.name for a in humaneval_attacks()])
def test_attack_earns_nothing_and_is_flagged(results, name):
    played = [r for (attack, _), r in results.items() if attack == name]
    assert played
    for r in played:
        assert r.refused, (r.task_id, r.reward, r.solved, r.flags, r.expected)
        if name not in PASSES_BY_DESIGN:
            assert r.pass_fraction == 0.0, r  # no assert passed, flags or not
