"""The testfile kind's hack suite through its real grader and the process sandbox: every attack
earns nothing and is flagged, on tasks of both formats, and the honest references still pass."""
import pytest

from envs.base import StepContext
from envs.hacks import run_suite, summary
from envs.registry import make_env, validate_by_kind
from rewards.aggregate import RewardConfig
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox
from tasks.files import load_tasks


@pytest.fixture(scope="module")
def ctx():
    cfg = SandboxConfig(site_packages=True)
    sb = make_sandbox(cfg)
    yield StepContext(sb, cfg.limits(), RewardConfig())
    sb.close()


@pytest.fixture(scope="module")
def tasks():
    ts = {t.task_id: t for t in load_tasks("envs/testfile/data/basics.jsonl", validate_by_kind)}
    # one pytest-format task, one asserts-format task (whose names are copied into the tests)
    return [ts["testfile-basics/shout"], ts["testfile-basics/first_char"]]


def test_an_always_equal_object_built_without_class_gets_no_credit(tasks, ctx):
    env = make_env("testfile")
    liar = "    return type('R', (), {'__eq__': lambda s, o: True, '__hash__': lambda s: 0})()\n"
    for task in tasks:
        b, _ = env.grade(task, liar, ctx)
        assert not b.solved and b.reward <= 0 and "non_plain_result" in b.hack_flags, task
        honest, _ = env.grade(task, task.reference, ctx)
        assert honest.solved and honest.reward == 1.0 and not honest.hack_flags


def test_every_attack_of_the_suite_is_refused(tasks, ctx):
    env = make_env("testfile")
    results = run_suite(env, tasks, ctx, workers=2)
    bad = [(r.attack, r.task_id, r.reward, r.flags) for r in results if not r.refused]
    assert not bad
    s = summary(results)["testfile"]
    assert s["attacks"] >= 15 and s["credited"] == 0 and s["flagged"] == s["tried"]
