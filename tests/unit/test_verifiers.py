"""The `verifiers` kind's grader side, without its venv: how the harness's records are read
(only the guard's keyed lines reach here, and even those are trusted only in the shapes the
harness writes), how a rubric's weighted reward becomes the score, when code the rubric
compiled from the answer is flagged, and the errors a user meets first."""
from __future__ import annotations

import json

import pytest

from envs.base import EnvError
from envs.registry import make_env
from envs.verifiers import grading, venv
from envs.verifiers.env import prompt_text
from sandbox.base import ExecResult

FUNCS = [["correct_answer", 1.0], ["answer_format", 0.2], ["length_metric", 0.0]]


def _batch(*recs: str, funcs=FUNCS, end: str = "ok") -> ExecResult:
    lines = [{"s": 0, "funcs": funcs}] + [{"s": 0, "rec": r} for r in recs] + [
        {"s": 0, "prints": ""}, {"s": 0, "end": end, "code": 0, "t": 0.1}, {"batch_done": True}]
    return ExecResult("ok", 0, "".join(json.dumps(x) + "\n" for x in lines), "", 1.0, "process")


def _report(res: ExecResult, answer: str = "<answer>42</answer>"):
    return grading.reports_from([answer], res)[0]


def _value(name: str, v: float) -> str:
    return json.dumps({"reward": name, "value": v})


DONE = '{"done": true}'


def test_the_score_is_the_rubrics_weighted_reward_over_its_positive_weights():
    # correct 0, format 1: (1.0*0 + 0.2*1) / 1.2 = 1/6; the metric of weight 0 is no outcome
    r = _report(_batch(_value("correct_answer", 0.0), _value("answer_format", 1.0),
                       _value("length_metric", 7.0), DONE))
    assert r.test_names == ("correct_answer", "answer_format")
    assert r.outcomes == ("failed", "passed")
    assert r.score == pytest.approx(0.2 / 1.2) and not r.hack_flags


def test_every_function_at_one_is_a_solve_and_the_full_score():
    r = _report(_batch(_value("correct_answer", 1.0), _value("answer_format", 1.0), DONE))
    assert r.outcomes == ("passed", "passed") and r.score == 1.0


def test_values_without_the_harness_done_record_earn_nothing():
    r = _report(_batch(_value("correct_answer", 1.0), _value("answer_format", 1.0)))
    assert r.score == 0.0 and set(r.outcomes) == {"error"}


@pytest.mark.parametrize("rec", [
    _value("made_up_function", 1.0),  # not one of the rubric's
    '{"score": 1.0}',  # another kind's shape
    json.dumps({"reward": "correct_answer", "value": 1.0, "extra": 1}),
    "not json",
])
def test_a_record_the_harness_never_writes_is_flagged_forged(rec):
    r = _report(_batch(rec, _value("correct_answer", 0.0), _value("answer_format", 0.0), DONE))
    assert "forged_record" in r.hack_flags


def test_a_second_value_of_one_function_is_forged_and_the_first_stands():
    r = _report(_batch(_value("correct_answer", 0.0), _value("correct_answer", 1.0),
                       _value("answer_format", 0.0), DONE))
    assert "forged_record" in r.hack_flags and r.outcomes[0] == "failed"


def test_a_record_after_done_is_forged():
    r = _report(_batch(_value("correct_answer", 1.0), _value("answer_format", 1.0), DONE,
                       DONE))
    assert "forged_record" in r.hack_flags


def test_a_function_that_raised_past_the_rubric_is_an_error_outcome_not_infra():
    r = _report(_batch(json.dumps({"reward": "correct_answer", "error": "Timeout"}),
                       _value("answer_format", 1.0), DONE))
    assert r.outcomes == ("timeout", "passed") and not r.infra_error


def test_an_environment_that_did_not_load_is_infra_error_naming_its_error():
    res = ExecResult("ok", 0, json.dumps({"load_error": "RuntimeError: boom"}) + "\n", "", 1.0,
                     "process")
    r = _report(res)
    assert r.infra_error and "boom" in r.exec_result.error


@pytest.mark.parametrize("src,flagged", [
    ("Integer (6 )*Integer (7 )", False),  # what parse_expr writes for an honest `6*7`
    ("Symbol ('x' )+Integer (1 )", False),
    ("ord ('*' )", True),  # a call of another name
    ("__import__ ('os' )._exit (Integer (0 ))", True),
    ("(lambda :Integer (42 ))()", True),
])
def test_code_the_rubric_compiled_from_the_answer_is_flagged_beyond_arithmetic(src, flagged):
    answer = src.replace(" ", "").replace("Integer(", "(").replace("Symbol(", "(")
    assert grading.code_from_answer(answer + " 6 7 x 1 42 0 ord os", [src]) is flagged


def test_code_that_shares_nothing_with_the_answer_is_the_librarys_own():
    assert not grading.code_from_answer("<answer>5</answer>", ["import os\nos.getcwd()"])


def test_a_missing_venv_names_the_command_that_builds_it(monkeypatch, tmp_path):
    monkeypatch.setenv(venv.VENV_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(EnvError, match="setup_venv.sh"):
        venv.python()


def test_an_env_id_that_is_no_id_is_refused_naming_the_field():
    with pytest.raises(EnvError, match="env_id"):
        make_env("verifiers", {"env_id": "x; rm -rf /"})
    with pytest.raises(EnvError, match="unknown_option"):
        make_env("verifiers", {"unknown_option": 1})


def test_the_prompt_text_is_the_messages_system_first():
    assert prompt_text([{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]) == \
        "S\n\nQ"
    assert prompt_text([{"role": "user", "content": [{"type": "text", "text": "Q"}]}]) == "Q"


def test_a_multi_turn_rollouts_next_messages_are_read_only_as_the_one_keyed_record():
    def asked(*lines):
        return grading._asked(grading._records(list(lines)))

    nxt = json.dumps({"next": [{"role": "user", "content": "Higher."}]})
    assert asked(nxt, DONE) == [{"role": "user", "content": "Higher."}]
    # anything beside it, a missing done, or a turn of the policy's own is no next turn
    assert asked(nxt, _value("correct_answer", 1.0), DONE) is None
    assert asked(nxt) is None
    assert asked(json.dumps({"next": [{"role": "assistant", "content": "x"}]}), DONE) is None


def test_a_rollout_that_raised_scores_every_function_as_an_error_naming_it():
    r = _report(_batch(json.dumps({"rollout_error": "KeyError"}), DONE))
    assert r.outcomes == ("error", "error") and r.score == 0.0
    assert set(r.error_types) == {"rollout: KeyError"} and not r.infra_error
