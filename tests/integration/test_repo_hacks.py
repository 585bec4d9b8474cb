"""The repo kind end to end on a real instance (inflection, the smallest package of the task
file): the gold patch resolves it and a no-op does not, through the real sandbox and grader;
a scripted agent resolves it through the episode's actions while one turn does not; and every
cheat of the hack suite gets no credit and a flag. The sdist and the layer come from PyPI on
first use and are cached (envs/repo/source.py)."""

import pytest

from envs.base import StepContext
from envs.registry import make_env
from rewards.aggregate import RewardConfig
from sandbox.base import Limits

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def env():
    return make_env("repo", {"repos": ["inflection"], "max_turns": 4})


@pytest.fixture(scope="module")
def task(env):
    # a one-file bug with a single failing module-level test keeps the hacks readable
    return next(t for t in env.generate() if len(t.payload["files"]) == 1)


@pytest.fixture(scope="module")
def ctx():
    from sandbox.process import ProcessSandbox

    sb = ProcessSandbox()
    yield StepContext(sb, Limits(timeout_s=30, memory_mb=1024), RewardConfig())
    sb.close()


def test_gold_resolves_and_noop_does_not(env, task, ctx):
    gold, _ = env.grade(task, task.reference, ctx)
    assert gold.solved and gold.reward > 0 and not gold.hack_flags
    assert set(gold.test_names) == set(task.payload["fail_to_pass"] + task.payload["pass_to_pass"])
    noop, _ = env.grade(task, "", ctx)
    assert not noop.solved
    failed = {n for n, o in zip(noop.test_names, noop.test_outcomes) if o != "passed"}
    assert failed == set(task.payload["fail_to_pass"])
    # its PASS_TO_PASS tests pass (partial credit, a component) but the reward is 0
    assert noop.pass_fraction > 0 and noop.reward == 0.0


def test_scripted_agent_resolves_through_the_episode_loop_and_one_turn_does_not(task, ctx):
    from envs.repo.scripted import scripted_turn
    from flows.episode_exec import step_local
    from flows.episodes import play
    from rewards.aggregate import RewardConfig
    from sandbox.config import SandboxConfig
    from training.generate import Sample
    from training.tokenizer import ByteTokenizer

    tok = ByteTokenizer()

    def sample(turn, contexts, episodes, _n, _k):
        out = []
        for c, e in zip(contexts, episodes):
            text = scripted_turn(e.task, turn)
            ids = tok.encode(text, bos=False) + [tok.eos_token_id]
            out.append(Sample(list(c), ids, [0.0] * len(ids), text, True))
        return out, 0.0

    scfg = SandboxConfig(timeout_s=30, memory_mb=1024)
    results = {}
    for turns in (2, 1):
        env = make_env("repo", {"repos": ["inflection"], "max_turns": turns})
        eps = play([task], [env], 1, 1 << 15, tok, 512, sample,
                   lambda turn, items: step_local(items, scfg, RewardConfig()))
        results[turns] = eps[0]
    two, one = results[2], results[1]
    assert two.final["end_reason"] == "submit" and two.grade.solved
    assert "FAILED" in two.observations[0]  # it saw the failing test before it edited
    assert one.final["end_reason"] == "max_turns" and not one.grade.solved


def test_every_attack_of_the_suite_gets_no_credit_and_a_flag(task, ctx):
    from envs.hacks import run_suite, summary

    env = make_env("repo", {"repos": ["inflection"], "max_turns": 2})
    # The attacks aim at the framework and at the failing tests; the task's PASS_TO_PASS (the
    # other 432 cases of inflection's one test module) only lengthened each of the 24 graded
    # runs (the reference: 5.6 s with them, 0.8 s without; every attack is still refused with
    # its named flags), so this test grades the FAIL_TO_PASS alone. `rollforge hacks repo`
    # (docs/environments.md's table) plays the whole task.
    p = task.payload
    f2p_only = task.model_copy(update={"payload": {**p, "pass_to_pass": [],
                                                   "n_collected": len(p["fail_to_pass"])}})
    results = run_suite(env, [f2p_only], ctx, workers=2)  # both cores: the suite's slowest test
    bad = [(r.attack, r.reward, r.solved, r.flags) for r in results if not r.refused]
    assert not bad
    s = summary(results)["repo"]
    assert s["attacks"] >= 15 and s["credited"] == 0
    # the two lines: unittest reached without `import unittest`, TestCase.run a no-op
    assert "pytest_tampering" in next(r for r in results
                                      if r.attack == "unittest_run_patched").flags


@pytest.mark.docker
def test_gold_resolves_and_noop_does_not_on_the_docker_backend(env, task):
    from sandbox.docker_container import engine_unavailable

    why = engine_unavailable()
    if why:
        pytest.skip(why)
    from envs.repo.sandboxes import layer_sandbox

    dctx = StepContext(layer_sandbox("docker"), Limits(timeout_s=30, memory_mb=1024),
                       RewardConfig())
    gold, _ = env.grade(task, task.reference, dctx)
    assert gold.solved and not gold.hack_flags
    noop, _ = env.grade(task, "", dctx)
    assert not noop.solved
    from envs.hacks import play_attack

    patched = next(a for a in env.attacks(task) if a.name == "pytest_runtest_patched")
    r = play_attack(make_env("repo", {"repos": ["inflection"], "max_turns": 2}), task, patched,
                    dctx)
    assert r.refused, r


def test_a_test_is_limited_by_its_cpu_time_not_by_the_wall_clock():
    # what keeps the builder's keep/reject decisions independent of the machine's load
    from envs.repo.grading import run_tests
    from envs.repo.sandboxes import layer_sandbox

    tree = {"tests/test_clock.py": b"import time\n\n"
            b"def test_sleeps():\n    time.sleep(1.0)\n\n"
            b"def test_spins():\n    while True:\n        pass\n"}
    run = run_tests(tree, None, layer_sandbox("process"), Limits(timeout_s=30, memory_mb=512),
                    per_test_s=0.4)
    assert run.infra is None and not run.flags, (run.infra, run.flags)
    assert run.outcomes == {"tests/test_clock.py::test_sleeps": "passed",
                            "tests/test_clock.py::test_spins": "timeout"}
    # each test's CPU seconds come back: what the builder keeps its decisions away from
    assert run.cpu["tests/test_clock.py::test_sleeps"] < 0.1 <= 0.3 <= run.cpu[
        "tests/test_clock.py::test_spins"], run.cpu
