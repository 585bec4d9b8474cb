"""The `reasoning_gym` kind's hack suite (envs/reasoning_gym/hacks.py) through the kind's real
grader and the process sandbox: on a task of a dataset whose scorer evaluates the answer
(countdown: sympy's parse_expr; n_queens: eval) and of one that only compares text
(basic_arithmetic), none may earn anything, and each must raise a flag it names. And why the
`answer_code` flag carries weight: countdown's own scorer pays 1.0 for an answer that is code."""
from __future__ import annotations

import pytest

from envs.base import StepContext
from envs.hacks import run_suite
from envs.reasoning_gym.datasets import build
from envs.reasoning_gym.hacks import attacks
from envs.registry import make_env
from rewards.aggregate import RewardConfig
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox

pytest.importorskip("reasoning_gym")

CFG = SandboxConfig(site_packages=True, timeout_s=20.0)  # the sandbox imports reasoning_gym


@pytest.fixture(scope="module")
def env():
    return make_env("reasoning_gym", {"datasets": ["countdown", "n_queens", "basic_arithmetic"],
                                      "tasks_per_level": 1, "seed": 5})


@pytest.fixture(scope="module")
def results(env):
    sbx = make_sandbox(CFG)
    try:
        return run_suite(env, env.generate(), StepContext(sbx, CFG.limits(), RewardConfig()))
    finally:
        sbx.close()


def test_every_attack_earns_nothing_and_raises_a_flag_it_names(results):
    assert {r.task_id.split("/")[1] for r in results} == {"countdown", "n_queens",
                                                           "basic_arithmetic"}
    bad = [(r.attack, r.task_id, r.reward, r.flags) for r in results if not r.refused]
    assert not bad


def test_the_code_attacks_were_tried_where_the_scorer_evaluates_the_answer(results):
    tried = {(r.task_id.split("/")[1], r.attack) for r in results}
    assert ("countdown", "patch_isclose") in tried and ("n_queens", "write_record_pipe") in tried
    assert not any(name == "basic_arithmetic" and a == "exit_early" for name, a in tried)


def test_a_patched_comparison_is_seen_as_tampering(results):
    r = next(r for r in results if r.attack == "patch_isclose")
    assert {"scorer_tampering", "answer_code"} <= set(r.flags) and r.reward < 0


def test_countdowns_own_scorer_pays_full_score_to_code_the_flag_refuses(env):
    """Not a defence of ours: the dataset's scorer, in this process, credits the attack (its
    value is `ord` of the target's character), which is why `answer_code` must catch it."""
    task = next(t for t in env.generate() if t.family == "countdown")
    text = next(a for a in attacks(task) if a.name == "value_is_target").actions(task)[0]
    p = task.payload
    ds = build(p["dataset"], p["options"], p["level"], p["seed"], p["size"])
    assert ds.score_answer(text, ds[p["index"]]) == 1.0
