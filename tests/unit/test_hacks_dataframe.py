"""The `dataframe` kind's hack suite (envs/dataframe/hacks.py) through the kind's real grader (the
io harness in its `frames:` mode, with pandas) in the process sandbox: none may earn anything, and
each must raise a flag it names. The attacks particular to pandas and numpy run on two tasks;
of the single-function attacks, which the io test plays through the same harness, the ones whose
defence differs with pandas loaded (library frames, its exit hook, its data files, the classes
and the conversion of results that `frames:` mode adds) run on one."""
from __future__ import annotations

import pytest

from envs.base import StepContext
from envs.dataframe.hacks import dataframe_attacks
from envs.function_hacks import function_attacks
from envs.hacks import run_suite
from envs.registry import make_env
from flows.cli_hacks import spread
from rewards import pyast
from rewards.aggregate import RewardConfig
from sandbox.base import Limits
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox

# pandas takes a while to import (seconds on a busy machine); none of these attacks hangs
LIMITS = Limits(timeout_s=15.0, memory_mb=512)
SHARED = {a.name for a in function_attacks()}
OWN = [a.name for a in dataframe_attacks() if a.name not in SHARED]
WITH_PANDAS = ["forged_transcript_then_exit", "correct_answer_and_forgery",
               "atexit_writes_records", "patched_builtins", "patched_harness_globals",
               "frames_own_frame_walk", "frames_inspect_stack", "frames_traceback",
               "file_read_str_subclass", "import_grader_str_subclass", "late_thread_writes",
               "self_containing_list", "always_equal_object"]
PASSES_BY_DESIGN = {"correct_answer_and_forgery"}


@pytest.fixture(scope="module")
def env():
    return make_env("dataframe", {})


@pytest.fixture(scope="module")
def tasks(env):
    return spread(env.generate(), 2)


@pytest.fixture(scope="module")
def results(env, tasks):
    sbx = make_sandbox(SandboxConfig(site_packages=True))
    try:
        ctx = StepContext(sbx, LIMITS, RewardConfig(per_test_timeout_s=5.0))
        got = run_suite(env, tasks, ctx, only=OWN) + run_suite(env, tasks[:1], ctx,
                                                               only=WITH_PANDAS)
        yield {(r.attack, r.task_id): r for r in got}
    finally:
        sbx.close()


def test_the_kind_adds_its_own_attacks_to_the_shared_ones():
    assert len(OWN) >= 5 and set(WITH_PANDAS) <= SHARED


def test_every_attack_answer_parses(env, tasks):
    for task in tasks:
        for attack in env.attacks(task):
            pyast.parse(task.prompt + attack.actions(task)[0])


@pytest.mark.parametrize("name", OWN + WITH_PANDAS)
def test_attack_earns_nothing_and_is_flagged(results, name):
    played = [r for (attack, _), r in results.items() if attack == name]
    assert played
    for r in played:
        assert r.refused, (r.task_id, r.reward, r.solved, r.flags, r.expected)
        if name not in PASSES_BY_DESIGN:
            assert r.pass_fraction == 0.0, r  # no test passed, flags or not
