"""The `verifiers` kind end to end with its own venv and the real process sandbox: the example
environment package (envs/verifiers/example_env, installed into the venv as a user installs
one) is loaded unchanged, its rows become tasks, its rubric grades in the sandbox, its hack
suite earns nothing, and bad input is a named error. The sandbox runs each load verifiers
(about 4 s of CPU each): the module makes six of them."""
from __future__ import annotations

import pytest

from envs.base import EnvError, StepContext
from envs.hacks import run_suite
from envs.registry import make_env
from envs.verifiers import venv
from envs.verifiers.hacks import attacks
from rewards.aggregate import RewardConfig, aggregate
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox

if not (venv.venv_dir() / "bin" / "python").is_file():
    pytest.skip(f"no verifiers venv at {venv.venv_dir()}: build it with `{venv.SETUP}`",
                allow_module_level=True)

pytestmark = pytest.mark.integration

LIMITS = SandboxConfig(timeout_s=10.0).limits()
ARGS = {"num_examples": 6, "seed": 3, "lenient": True}


@pytest.fixture(scope="module")
def env():
    return make_env("verifiers", {"env_args": ARGS})


@pytest.fixture(scope="module")
def tasks(env):
    return env.generate()


def test_the_environments_rows_become_tasks_with_a_split(tasks):
    assert len(tasks) == 6 and {t.kind for t in tasks} == {"verifiers"}
    assert {t.split for t in tasks} <= {"train", "heldout"}
    assert all(t.prompt.startswith("Answer with the number only") and "What is" in t.prompt
               for t in tasks)
    assert all(t.reference and t.reference.strip().startswith("<answer>") for t in tasks)
    assert len({t.task_id for t in tasks}) == 6


@pytest.fixture(scope="module")
def graded(env, tasks):
    """One sandbox run: the reference, answers the rubric pays in part, and every attack of the
    suite on the first task."""
    t = tasks[0]
    target = t.reference.replace("<answer>", "").replace("</answer>", "").strip()
    honest = {"reference": t.reference, "wrong": "<answer>1</answer>", "untagged": target,
              "arithmetic": f"<answer>{target} + 0</answer>", "empty": ""}
    plays = {a.name: a for a in attacks(t) if a.applies(t)}
    items = [(t, a) for a in honest.values()] + [(t, a.actions(t)[0]) for a in plays.values()]
    reports = env.verify_batch(items, None, LIMITS, 5.0)
    return dict(zip(list(honest) + list(plays), reports)), plays


def test_the_rubrics_functions_are_the_named_outcomes_and_its_reward_the_score(graded):
    r, _ = graded
    assert r["reference"].test_names == ("correct_answer", "answer_format")
    assert r["reference"].outcomes == ("passed", "passed") and r["reference"].score == 1.0
    # the format paid, the answer not: 0.2 of 1.2
    assert r["wrong"].outcomes == ("failed", "passed")
    assert r["wrong"].score == pytest.approx(0.2 / 1.2)
    assert r["untagged"].score == 0.0 and r["empty"].score == 0.0
    # the lenient rubric evaluates `n + 0`: arithmetic, paid and not flagged
    assert r["arithmetic"].outcomes[0] == "passed" and not r["arithmetic"].hack_flags
    assert not any(x.infra_error or x.hack_flags for k, x in r.items() if k in (
        "reference", "wrong", "untagged", "empty"))


def test_every_attack_earns_nothing_and_raises_a_flag_it_names(graded):
    r, plays = graded
    assert {"exit_early", "write_record_pipe", "read_frame", "patch_compare",
            "value_is_target", "printed_score"} <= set(plays)
    for name, attack in plays.items():
        b = aggregate(r[name], RewardConfig())
        assert not b.infra_error, name
        assert not b.solved and b.reward <= 0, (name, b.reward, r[name].hack_flags)
        assert (set(r[name].hack_flags) & set(attack.flags)) if attack.flags \
            else not r[name].hack_flags, (name, r[name].hack_flags)


def test_an_unknown_environment_id_is_a_named_error():
    with pytest.raises(EnvError, match="vf-no-such-env.*did not load"):
        make_env("verifiers", {"env_id": "vf-no-such-env"}).generate()


def test_an_environment_that_raises_on_load_is_a_named_error_with_its_message():
    with pytest.raises(EnvError, match="fail_on_load was set"):
        make_env("verifiers", {"env_args": {"fail_on_load": True}}).generate()


@pytest.mark.slow
def test_the_suite_played_as_episodes_through_step_credits_nothing(env, tasks):
    """`rollforge hacks verifiers` as the loop pays it: one sandbox run per attack."""
    sbx = make_sandbox(SandboxConfig(timeout_s=10.0))
    try:
        results = run_suite(env, tasks[:1], StepContext(sbx, LIMITS, RewardConfig()))
    finally:
        sbx.close()
    assert results and not [r for r in results if not r.refused]


@pytest.mark.slow
def test_verifiers_own_reasoning_gym_environment_grades_right_and_wrong_answers():
    """A real environment that builds offline: verifiers' `ReasoningGymEnv` (its rubric calls
    reasoning-gym's `score_answer`), exposed by id (envs/verifiers/example_env/vf_rollforge_rg).
    Its rows' `answer` is an index, so it runs with `reference: none`."""
    env = make_env("verifiers", {"env_id": "vf-rollforge-rg", "reference": "none", "env_args": {
        "gym": "basic_arithmetic", "num_train_examples": 3, "num_eval_examples": 1}})
    tasks = env.generate()
    assert [t.split for t in tasks] == ["train"] * 3 + ["heldout"]
    assert all(t.reference is None for t in tasks)
    t = tasks[0]
    # the question is arithmetic reasoning-gym wrote: evaluated here only to know the answer
    value = eval(t.prompt.split("Calculate")[-1].strip().rstrip("."), {"__builtins__": {}})
    right = str(int(value)) if float(value).is_integer() else str(value)
    # not `right` with a digit appended: basic_arithmetic pays that near miss in part (0.92)
    reports = env.verify_batch([(t, f"<answer>{right}</answer>"),
                                (t, "<answer>no idea</answer>")], None, LIMITS, 5.0)
    assert [r.score for r in reports] == [1.0, 0.0]
    assert reports[0].test_names == ("check_answer_reward_func",)
