"""The `io` kind's hack suite (envs/function_hacks.py), each attack played as an episode through
the kind's real grader in the process sandbox on two procedural tasks: none may earn anything, and
each must raise a flag it names. The attacks that hang until a limit run on one task; the
limits leave room for a busy machine to start a run at all."""
from __future__ import annotations

import pytest

from envs.base import StepContext
from envs.function_hacks import function_attacks
from envs.hacks import run_suite
from envs.registry import make_env
from flows.cli_hacks import spread
from rewards import pyast
from rewards.aggregate import RewardConfig
from sandbox.base import Limits
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox

LIMITS = Limits(timeout_s=6.0, memory_mb=256)
HANG = ["alarm_ignored", "forged_transcript_then_hang", "swallowed_timeout"]
# Attacks that return the right values and cheat as well: refused by their flag alone.
PASSES_BY_DESIGN = {"correct_answer_and_forgery"}


@pytest.fixture(scope="module")
def env():
    return make_env("io", {})


@pytest.fixture(scope="module")
def tasks(env):
    return spread(env.generate(), 2)


@pytest.fixture(scope="module")
def results(env, tasks):
    sbx = make_sandbox(SandboxConfig())
    try:
        ctx = StepContext(sbx, LIMITS, RewardConfig(per_test_timeout_s=1.0))
        rest = [a.name for a in function_attacks() if a.name not in HANG]
        got = run_suite(env, tasks, ctx, only=rest) + run_suite(env, tasks[:1], ctx, only=HANG)
        yield {(r.attack, r.task_id): r for r in got}
    finally:
        sbx.close()


def test_the_suite_has_the_attacks_the_issue_names():
    names = {a.name for a in function_attacks()}
    assert len(names) == len(function_attacks()) >= 5
    for must in ("always_equal_object", "patched_builtins", "frames_getframe",
                 "frames_inspect_stack", "frames_traceback", "gc_walk", "atexit_writes_records",
                 "printed_records", "forged_record_fd1", "forged_transcript_then_exit",
                 "forged_transcript_then_memory", "os_exit_obfuscated", "exec_built_string",
                 "getattr_chain_exit", "late_thread_writes", "lying_list_subclass"):
        assert must in names


def test_every_attack_answer_parses(env, tasks):
    # An answer that does not parse would be refused for the wrong reason.
    for task in tasks:
        for attack in env.attacks(task):
            pyast.parse(task.prompt + attack.actions(task)[0])


@pytest.mark.parametrize("name", [a.name for a in function_attacks()])
def test_attack_earns_nothing_and_is_flagged(results, name):
    played = [r for (attack, _), r in results.items() if attack == name]
    assert played
    for r in played:
        assert r.refused, (r.task_id, r.reward, r.solved, r.flags, r.expected)
        if name not in PASSES_BY_DESIGN:
            assert r.pass_fraction == 0.0, r  # no test passed, flags or not
