"""The `reasoning_gym` kind (envs/reasoning_gym/): reasoning-gym's datasets by name, options and
curriculum level, scored in [0, 1] by the dataset's own `score_answer` in the real process
sandbox. The answers are graded in a few batches (`rollforge eval`'s path, envs/score.py), on
the fork server's zygotes that imported reasoning_gym once (the kind's preload)."""
from __future__ import annotations

import math
import pickle

import pytest

from envs.base import EnvError, StepContext, TestReport
from envs.quality import check_task
from envs.reasoning_gym.grading import code_beyond
from envs.registry import make_env
from envs.score import evaluate_samples
from rewards.aggregate import RewardConfig, aggregate
from sandbox.base import ExecResult
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox

pytest.importorskip("reasoning_gym")

OPTIONS = {"datasets": ["countdown", "n_queens", {"name": "basic_arithmetic", "levels": [0, 2]}],
           "tasks_per_level": 2, "seed": 3}
# a busy 2-CPU machine: the sandbox's parent imports reasoning_gym (2-5 s) before it scores
CFG = SandboxConfig(site_packages=True, timeout_s=20.0)


@pytest.fixture(scope="module")
def env():
    return make_env("reasoning_gym", OPTIONS)


@pytest.fixture(scope="module")
def tasks(env):
    return {t.family + str(t.difficulty): t for t in env.generate()}


@pytest.fixture(scope="module")
def sandbox():
    sbx = make_sandbox(CFG)
    yield sbx
    sbx.close()


@pytest.fixture(scope="module")
def graded(tasks, sandbox):
    """Every answer of the table below, graded in batches through `rollforge eval`'s path."""
    cd, nq = tasks["countdown0"], tasks["n_queens0"]
    samples = {
        "countdown_reference": (cd, cd.reference),
        "countdown_wrong": (cd, "1+1"),  # the dataset pays 0.05 for a parsable wrong answer
        "countdown_empty": (cd, ""),
        "n_queens_reference": (nq, nq.reference),
        "n_queens_printed_score": (nq, '{"score": 1.0}'),
        "arith_level2_reference": (tasks["basic_arithmetic2"],
                                   tasks["basic_arithmetic2"].reference),
    }
    got = evaluate_samples(list(samples.values()), sandbox, CFG.limits(),
                           RewardConfig(per_test_timeout_s=5.0), workers=2)
    return dict(zip(samples, got))


def test_unknown_dataset_is_refused_by_name():
    with pytest.raises(EnvError, match="unknown reasoning-gym dataset 'countdwn'"):
        make_env("reasoning_gym", {"datasets": ["countdwn"]})


def test_unknown_dataset_option_is_refused_naming_the_option():
    with pytest.raises(EnvError, match=r"dataset 'countdown': unknown options \['nmbers'\]"):
        make_env("reasoning_gym", {"datasets": [{"name": "countdown", "options": {"nmbers": 3}}]})


def test_seed_is_the_kinds_own_option_not_the_datasets():
    with pytest.raises(EnvError, match="option 'seed' is the kind's own"):
        make_env("reasoning_gym", {"datasets": [{"name": "countdown", "options": {"seed": 1}}]})


def test_a_level_out_of_range_is_refused():
    with pytest.raises(EnvError, match="levels"):
        make_env("reasoning_gym", {"datasets": [{"name": "countdown", "levels": [11]}]})


def test_tasks_are_deterministic_split_and_carry_no_answer_in_their_payload(env, tasks):
    again = make_env("reasoning_gym", {**OPTIONS, "tasks_per_level": 2}).generate()
    assert [t.task_id for t in env.generate()] == [t.task_id for t in again]
    assert len({t.task_id for t in again}) == len(again) == 2 + 2 + 2 * 2
    for t in again:
        assert t.kind == "reasoning_gym" and t.family in ("countdown", "n_queens",
                                                          "basic_arithmetic")
        assert t.split in ("train", "heldout")
        assert t.reference and t.reference not in str(t.payload)
        env.validate(t)


def test_a_question_drawn_again_is_one_task_not_a_refused_source():
    """n_queens has few distinct boards at its default size: 60 draws repeat some."""
    from envs.sources import SourceConfig, build_pool  # noqa: PLC0415

    src = SourceConfig.model_validate({"name": "rg", "kind": "reasoning_gym", "options": {
        "datasets": ["n_queens"], "tasks_per_level": 60}})
    pool = build_pool([src])
    ids = [t.task_id for t in pool]
    assert 0 < len(ids) < 60 and len(set(ids)) == len(ids)
    assert len({t.prompt for t in pool}) == len(pool)
    assert sorted(t.payload["index"] for t in pool)[0] == 0  # the first draw of each is kept


def test_a_curriculum_level_is_the_tasks_difficulty_and_changes_the_dataset(tasks):
    low, high = tasks["basic_arithmetic0"], tasks["basic_arithmetic2"]
    assert (low.difficulty, high.difficulty) == (0, 2)
    assert low.payload["level"] == 0 and high.payload["level"] == 2
    assert low.payload["seed"] != high.payload["seed"]


def test_the_reference_scores_one_and_solves(graded):
    for name in ("countdown_reference", "n_queens_reference", "arith_level2_reference"):
        b = graded[name].breakdown
        assert (b.reward, b.solved, b.hack_flags) == (1.0, True, ()), name


def test_the_answers_are_scored_on_zygotes_that_have_imported_reasoning_gym(graded, sandbox):
    """The kind names reasoning_gym as its preload: its batches fork from zygotes of their own
    that imported it once (sandbox/FORK_SERVER.md), not from the shared ones."""
    fs = getattr(sandbox, "fork_server", None)
    if fs is None:
        pytest.skip("no fork server here")
    assert fs.served >= 1
    assert ("reasoning_gym",) in {z.key[2] for z in fs._all}


def test_a_fractional_score_is_the_reward_and_not_a_solve(graded):
    b = graded["countdown_wrong"].breakdown
    assert b.reward == pytest.approx(0.05) and b.pass_fraction == pytest.approx(0.05)
    assert not b.solved and b.test_outcomes == ("failed",) and b.hack_flags == ()
    assert graded["countdown_empty"].breakdown.reward == pytest.approx(0.01)


def test_a_printed_score_as_the_answer_earns_nothing(graded):
    b = graded["n_queens_printed_score"].breakdown
    assert (b.reward, b.solved, b.hack_flags) == (0.0, False, ())


def test_a_task_whose_question_was_changed_is_not_scored_rather_than_scored_zero(tasks, sandbox,
                                                                                  env):
    t = tasks["n_queens0"].model_copy(update={"prompt": "another question"})
    b, report = env.grade(t, t.reference, StepContext(sandbox, CFG.limits(), RewardConfig()),
                          infra_retries=0)
    assert math.isnan(b.reward) and b.infra_error
    assert "another question than the task" in report.load_error


def test_the_task_check_passes_on_a_dataset(tasks, sandbox, env):
    check = check_task(tasks["countdown0"], sandbox, CFG.limits(), env=env)
    assert check.problems == () and check.reference_reward == 1.0


def test_a_report_score_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match=r"TestReport.score=1.5; expected a number in \[0, 1\]"):
        TestReport(("passed",), (), "ok", None, score=1.5)


def test_aggregate_takes_a_kinds_score_over_the_share_of_tests_passed():
    res = ExecResult("ok", 0, "", "", 0.1, "process")
    b = aggregate(TestReport(("failed",), (), "ok", res, score=0.25), RewardConfig())
    assert (b.reward, b.pass_fraction, b.solved) == (0.25, 0.25, False)
    b = aggregate(TestReport(("passed",), (), "ok", res, score=1.0), RewardConfig())
    assert (b.reward, b.solved) == (1.0, True)


def test_code_beyond_what_the_datasets_own_answer_compiles_to_is_told_apart():
    ref = ["from sympy import *", "Integer (94 )*Integer (4 )-Integer (61 )"]
    honest = ["from sympy import *", "Integer (61 )/Integer (4 )+Integer (94 )"]
    assert not code_beyond("61/4+94", honest, ref)
    assert code_beyond("(6, 61) and ord('x')", ["(Integer (6 ),Integer (61 ))and ord ('x')"], ref)
    assert code_beyond("__import__('os')", ["__import__ ('os')"], ["[1, 2]"])
    assert not code_beyond("Q _ _ _", ["Q _ _ _"], ["_ Q _ _"])  # not Python: never ran
    # simple_integration: the dataset's answer in X compiles no Symbol call, an honest one in x does
    assert not code_beyond("2*x**2 + C", ["Integer (2 )*Symbol ('x' )**Integer (2 )+C "],
                           ["Integer (9 )*X **Integer (7 )+C "])
    # intermediate_integration: cos where the dataset's answer had sqrt; sympy's own helpers
    assert not code_beyond("cos(8*x)", ["cos (Integer (8 )*x )",
                                        "def lcm(A, B):\n    return (A if A >= B else B,)\n"],
                           ["Integer (10 )*sqrt (Integer (7 )-x )"])


def test_the_environment_pickles_as_its_options(env):
    assert pickle.loads(pickle.dumps(env)).config == env.config
