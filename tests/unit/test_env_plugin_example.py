"""The worked plug-in example, examples/rollforge-regex: loaded through the registry by its import
path (as any `module:Class` kind is), graded in the real process sandbox.

The package is put on sys.path here, so these tests do not need it pip-installed.
"""
from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import pytest

from envs.base import EnvError, StepContext
from envs.registry import make_env
from rewards.aggregate import RewardConfig
from sandbox.base import ExecResult
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox
from tasks.record import Task

PLUGIN_SRC = Path(__file__).resolve().parents[2] / "examples" / "rollforge-regex" / "src"
KIND = "rollforge_regex:RegexEnv"
OPTIONS = {"tasks_per_family": 3, "seed": 1}
FAMILIES = ["digits", "letter", "prefix", "suffix", "contains", "length"]


@pytest.fixture(scope="module", autouse=True)
def plugin_on_path():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(PLUGIN_SRC))
        yield


@pytest.fixture(scope="module")
def sandbox_cfg():
    return SandboxConfig(timeout_s=6)  # room for the 1 s per-string alarm on a busy machine


@pytest.fixture(scope="module")
def ctx(sandbox_cfg):
    sb = make_sandbox(sandbox_cfg)
    yield StepContext(sb, sandbox_cfg.limits(), RewardConfig())
    sb.close()


@pytest.fixture(scope="module")
def env():
    return make_env(KIND, OPTIONS)


@pytest.fixture(scope="module")
def tasks(env):
    return env.generate()


def one_of(tasks, family):
    return next(t for t in tasks if t.family == family)


def regex_task(positives, negatives, reference=None):
    return Task(task_id="regex/hand/1", suite="regex", family="hand", difficulty=1,
                split="train", prompt="Regex:", kind="regex", reference=reference,
                payload={"positives": positives, "negatives": negatives})


class CannedSandbox:
    """A sandbox whose every run returns one fixed result (to feed the reader bad output)."""

    name = "canned"

    def __init__(self, status="ok", stdout=""):
        self.result = ExecResult(status, 0, stdout, "", 0.01, self.name)

    def run(self, files, argv, limits=None, stdin=None, collect=()):
        return self.result

    def close(self):
        pass


def test_kind_loads_by_import_path_and_generates_the_same_tasks_every_time(env, tasks):
    assert env.name == "regex"
    assert tasks == make_env(KIND, OPTIONS).generate() == type(env)(OPTIONS).generate()
    assert {t.family for t in tasks} == set(FAMILIES) and len(tasks) == 3 * len(FAMILIES)
    assert {t.difficulty for t in tasks} == {1, 2, 3}
    assert len({t.task_id for t in tasks}) == len(tasks)
    for t in tasks:
        assert t.kind == "regex" and t.prompt.endswith("Regex:") and t.reference
        assert env.problems(t) == []
        shown = [s for s in t.payload["positives"] if f"\n  {json.dumps(s)}\n" in t.prompt]
        assert 0 < len(shown) < len(t.payload["positives"])  # some strings stay hidden


def test_split_depends_on_content_not_on_which_families_were_drawn(tasks):
    alone = make_env(KIND, {**OPTIONS, "families": ["suffix"]}).generate()
    assert alone == [t for t in tasks if t.family == "suffix"]
    many = make_env(KIND, {"tasks_per_family": 40}).generate()
    assert {t.split for t in many} == {"train", "heldout"}


def test_reference_earns_full_reward_with_every_named_test_passed(env, tasks, ctx):
    for family in FAMILIES:
        task = one_of(tasks, family)
        b, report = env.grade(task, task.reference, ctx)
        n = len(task.payload["positives"]) + len(task.payload["negatives"])
        assert b.reward == 1.0 and b.solved, (family, report)
        assert report.outcomes == ("passed",) * n
        assert len(report.test_names) == n
        assert report.test_names[0].startswith("match ")
        assert report.test_names[-1].startswith("reject ")


def test_match_everything_gets_partial_credit_and_fails_every_negative(env, tasks, ctx):
    task = one_of(tasks, "digits")
    n_pos, n_neg = len(task.payload["positives"]), len(task.payload["negatives"])
    b, report = env.grade(task, ".*", ctx)
    assert report.outcomes == ("passed",) * n_pos + ("failed",) * n_neg
    assert b.reward == pytest.approx(n_pos / (n_pos + n_neg)) and not b.solved


def test_no_trivial_answer_solves_a_generated_task(env, tasks, ctx):
    for task in tasks:
        for name, answer in env.trivial_answers(task).items():
            b, _ = env.grade(task, answer, ctx)
            assert not b.solved and not b.infra_error, (task.task_id, name)


def test_invalid_pattern_is_the_models_error_not_an_infra_error(env, tasks, ctx):
    task = one_of(tasks, "prefix")
    b, report = env.grade(task, "([a-z]+", ctx)
    assert b.reward == 0.0 and not b.infra_error
    assert set(report.outcomes) == {"error"} and b.status == "syntax_error"
    assert b.error_type == "PatternError" and not b.syntax_ok


def test_catastrophic_backtracking_times_out_on_its_string_only(env, ctx, sandbox_cfg):
    task = regex_task(["aaa"], ["a" * 40 + "!", "b"])
    b, report = env.grade(task, "(a+)+$", ctx)
    # the per-string alarm stops the runaway string; the others are still answered
    assert report.outcomes == ("passed", "timeout", "passed")
    assert not b.infra_error and b.reward == pytest.approx(2 / 3) and b.timeouts == 1
    assert b.exec_time_s < sandbox_cfg.timeout_s + 1


def test_sandbox_kill_also_reads_as_timeout_never_as_infra_error(env, ctx, sandbox_cfg):
    task = regex_task(["aaa"], ["a" * 40 + "!", "b"])
    no_alarm = StepContext(ctx.sandbox, ctx.limits, RewardConfig(per_test_timeout_s=60))
    b, report = env.grade(task, "(a+)+$", no_alarm)
    # only the sandbox's wall-clock limit ends this run: what never answered timed out
    assert report.status == "timeout" and not b.infra_error
    assert report.outcomes == ("passed", "timeout", "timeout")
    assert not math.isnan(b.reward) and b.reward == pytest.approx(1 / 3)


def test_only_the_first_line_of_the_answer_is_the_pattern(env, tasks, ctx):
    task = one_of(tasks, "digits")
    b, _ = env.grade(task, "\n  [0-9]+  \nThis matches one or more digits.\n.*", ctx)
    assert b.reward == 1.0
    b, _ = env.grade(task, "```\n[0-9]+\n```", ctx)  # no code fences: the fence is the pattern
    assert b.reward < 1.0


@pytest.mark.parametrize("stdout", [
    '{"i": 0, "match": true}\n{"i": 1, "match": false}\n{"done": true}\n{"done": true}\n',
    '{"i": 0, "match": 1}\n{"i": 1, "match": 0}\n{"done": true}\n',
    '{"i": 1, "match": false}\n{"i": 0, "match": true}\n{"done": true}\n',
    '{"i": 0, "match": true}\n{"i": 1, "match": false}\n{"done": true, "passed": 2}\n',
    '{"i": 0, "match": true}\n{"i": 1, "match": false}\n',
    'all tests passed\n',
])
def test_checker_output_of_any_other_shape_fails_every_test(env, stdout):
    task = regex_task(["x"], ["y"])
    report = env.verify(task, "x", CannedSandbox(stdout=stdout), SandboxConfig().limits(), 1.0)
    assert report.outcomes == ("failed", "failed") and not report.infra_error


def test_checker_output_of_the_right_shape_is_read(env):  # the control for the test above
    task = regex_task(["x"], ["y"])
    stdout = '{"i": 0, "match": true}\n{"i": 1, "match": false}\n{"done": true}\n'
    report = env.verify(task, "x", CannedSandbox(stdout=stdout), SandboxConfig().limits(), 1.0)
    assert report.outcomes == ("passed", "passed")


def test_sandbox_infra_failure_is_not_scored(env):
    task = regex_task(["x"], ["y"])
    ctx = StepContext(CannedSandbox(status="infra_error"), SandboxConfig().limits(),
                      RewardConfig())
    b, report = env.grade(task, "x", ctx)
    assert report.status == "infra_error" and b.infra_error and math.isnan(b.reward)


def test_payload_is_checked_and_sides_must_be_disjoint(env):
    assert env.problems(regex_task(["a", "b"], ["b"]))[0].startswith("field 'payload.negatives'")
    assert "payload.positives" in env.problems(regex_task([], ["b"]))[0]
    with pytest.raises(ValueError, match="payload.negatives"):
        env.validate(regex_task(["a"], ["a"]))


def test_bad_options_are_refused_naming_the_field():
    with pytest.raises(EnvError, match="families"):
        make_env(KIND, {"families": ["palindromes"]})
    with pytest.raises(EnvError, match="shown_per_side"):
        make_env(KIND, {"strings_per_side": 2, "shown_per_side": 3})


def test_environment_pickles_by_reference_with_its_options(env):
    back = pickle.loads(pickle.dumps(env))
    assert type(back) is type(env) and back.config == env.config


def test_a_kind_that_demands_it_has_a_partial_credit_trivial_answer_reported(env, tasks, ctx):
    """`trivial_earn_nothing`: the task check reports a trivial answer that earns anything, not
    only one that solves (`.*` matches every positive of a regex task: partial credit)."""
    from envs.quality import check_task

    task = one_of(tasks, "prefix")
    assert check_task(task, ctx.sandbox, ctx.limits, env=env).ok  # the regex kind allows it
    strict = type("StrictRegexEnv", (type(env),), {"trivial_earn_nothing": True})(env.config)
    problems = check_task(task, ctx.sandbox, ctx.limits, env=strict).problems
    assert any(p.startswith("trivial answer 'match_all' earns 0.") for p in problems), problems
