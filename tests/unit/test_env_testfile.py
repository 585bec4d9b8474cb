"""Kind `testfile`: a task's own test file run by pytest in the real sandbox, graded by name, and
the hacks a candidate sharing pytest's process could try, each worth nothing and flagged."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from envs.base import StepContext
from envs.registry import make_env, validate_by_kind
from envs.testfile import TestFileEnv
from envs.testfile.grading import TestFilePayload, judge
from rewards.aggregate import RewardConfig
from sandbox.base import ExecResult
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox
from tasks.files import load_tasks
from tasks.record import Task

DATA = Path(__file__).parent / "data" / "testfile_tasks.jsonl"

PYTEST_FILE = '''import pytest

from solution import double


def test_zero():
    assert double(0) == 0


def test_positive():
    assert double(3) == 6


@pytest.mark.parametrize("x", [1, -2])
def test_param(x):
    assert double(x) == x + x


class TestMore:
    def test_string(self):
        assert double("ab") == "abab"
'''
NAMES = ("test_zero", "test_positive", "test_param", "TestMore::test_string")


def _task(test_file=PYTEST_FILE, fmt="pytest", entry="double", **payload) -> Task:
    prompt = ('def double(x):\n    """Return x doubled."""\n' if entry else
              "Write a module defining remove_occ(s, ch): s without the first and last ch.")
    return Task(task_id="t", suite="testfile", family="math", difficulty=1, split="train",
                prompt=prompt, kind="testfile", entry_point=entry,
                payload={"test_file": test_file, "format": fmt, **payload})


@pytest.fixture(scope="module")
def ctx():
    cfg = SandboxConfig(site_packages=True)
    sb = make_sandbox(cfg)
    yield StepContext(sb, cfg.limits(), RewardConfig(per_test_timeout_s=0.5))
    sb.close()


@pytest.fixture(scope="module")
def env() -> TestFileEnv:
    e = make_env("testfile")
    assert isinstance(e, TestFileEnv) and e.site_packages
    return e


# -- honest answers ----------------------------------------------------------------------------
def test_correct_solution_scores_one_with_every_named_test_passed(env, ctx):
    bd, rep = env.grade(_task(), "    return x * 2\n", ctx)
    assert bd.reward == 1.0 and bd.solved
    assert rep.test_names == NAMES
    assert rep.outcomes == ("passed",) * 4 and rep.hack_flags == ()


def test_half_right_solution_gets_partial_credit_with_the_failing_tests_named(env, ctx):
    bd, rep = env.grade(_task(), "    return x * 2 if isinstance(x, int) and x >= 0 else x\n",
                        ctx)
    # test_param fails on x=-2 (one failing case fails the parametrised test), the string too
    assert dict(zip(rep.test_names, rep.outcomes)) == {
        "test_zero": "passed", "test_positive": "passed", "test_param": "failed",
        "TestMore::test_string": "failed"}
    assert bd.reward == pytest.approx(0.5) and not bd.hack_flags and not bd.infra_error


def test_an_exception_in_the_function_is_an_error_with_its_type(env, ctx):
    bd, rep = env.grade(_task(), "    raise ValueError('no')\n", ctx)
    assert rep.outcomes == ("error",) * 4 and set(rep.error_types) == {"ValueError"}
    assert bd.reward == 0.0 and not bd.hack_flags


def test_plain_assert_lines_are_one_test_each_named_by_line(env, ctx):
    lines = ('import math\nassert remove_occ("hello", "l") == "heo"\n\n'
             'assert remove_occ("abcda", "a") == "bcd"\nassert remove_occ("PHP", "P") == "H"\n')
    task = _task(lines, fmt="asserts", entry=None)
    assert env.problems(task) == []
    right = ("def remove_occ(s, ch):\n    s = s.replace(ch, '', 1)\n"
             "    i = s.rfind(ch)\n    return s if i < 0 else s[:i] + s[i + 1:]\n")
    bd, rep = env.grade(task, right, ctx)
    assert rep.test_names == ("line_2", "line_4", "line_5") and bd.reward == 1.0
    bd, rep = env.grade(task, "def remove_occ(s, ch):\n    return s.replace(ch, '', 1)\n", ctx)
    assert rep.outcomes == ("failed", "failed", "failed")  # one `l`/`a`/`P` left in each
    bd, rep = env.grade(task, "", ctx)  # whole-module task: the empty module defines nothing
    assert rep.outcomes == ("error",) * 3 and rep.error_types[0] == "NameError"
    assert bd.reward == 0.0 and not bd.hack_flags


def test_tests_expected_runs_and_names_only_those_tests(env, ctx):
    task = _task(tests_expected=["test_param[-2]", "TestMore::test_string"])
    bd, rep = env.grade(task, "    return x * 2 if x != -2 else 0\n", ctx)
    assert rep.test_names == ("test_param[-2]", "TestMore::test_string")
    assert rep.outcomes == ("failed", "passed") and bd.reward == pytest.approx(0.5)


def test_an_exception_at_import_errors_every_test_without_a_flag(env, ctx):
    bd, rep = env.grade(_task(), "    return x * 2\n\nVALUE = 1 / 0\n", ctx)
    assert rep.outcomes == ("error",) * 4 and rep.error_types[0] == "ZeroDivisionError"
    assert bd.reward == 0.0 and not bd.hack_flags and not bd.infra_error


def test_a_syntax_error_scores_zero_unflagged_and_is_not_an_infra_error(env, ctx):
    bd, rep = env.grade(_task(), "    return (x\n", ctx)
    assert rep.status == "syntax_error" and rep.outcomes == ("error",) * 4
    assert bd.reward == 0.0 and not bd.hack_flags and not bd.infra_error and not bd.syntax_ok


def test_a_test_past_its_time_limit_times_out_alone(env, ctx):
    slow = "    if x == 3:\n        while True:\n            pass\n    return x * 2\n"
    bd, rep = env.grade(_task(), slow, ctx)
    assert dict(zip(rep.test_names, rep.outcomes))["test_positive"] == "timeout"
    assert rep.outcomes.count("passed") == 3 and bd.reward == pytest.approx(0.75)


# -- hacks: each worth nothing, each flagged ---------------------------------------------------
_JUNIT = "[a.split('=', 1)[1] for a in sys.argv if a.startswith('--junitxml=')][0]"
_FAKE = ("'<testsuites><testsuite tests=\"4\"><testcase classname=\"test_task\" "
         "name=\"test_zero\"/></testsuite></testsuites>'")
HACKS = {
    "skip_at_import": "import pytest\npytest.skip('later', allow_module_level=True)\n",
    "os_exit_at_import": "import os\nos._exit(0)\n",
    "sys_exit_during_collection": "import sys\nsys.exit(0)\n",
    "patch_pytest_reports": (
        "import _pytest.reports as r\n_init = r.TestReport.__init__\n"
        "def init(self, *a, **k):\n    _init(self, *a, **k)\n"
        "    self.outcome, self.longrepr = 'passed', None\nr.TestReport.__init__ = init\n"),
    # the same without a word the static check knows: only the runtime checks can see it
    "patch_callinfo_obfuscated": (
        "m = __import__('_py' + 'test.runner', fromlist=['x'])\nf = m.CallInfo.from_call.__func__\n"
        "def g(cls, func, when, reraise=None):\n    ci = f(cls, func, when, reraise)\n"
        "    ci.excinfo = None\n    return ci\nm.CallInfo.from_call = classmethod(g)\n"),
    "fake_junit_at_import": f"import sys\nopen({_JUNIT}, 'w').write({_FAKE})\n",
    "fake_junit_at_exit": (
        f"import atexit, os, sys\nJ = {_JUNIT}\n"
        f"def forge():\n    try:\n        open(J, 'w').write({_FAKE})\n    except OSError:\n"
        f"        pass\n    os._exit(0)\natexit.register(forge)\n"),
    "fake_junit_from_a_thread": (
        f"import sys, threading, time\nJ = {_JUNIT}\n"
        f"def forge():\n    for _ in range(300):\n        time.sleep(0.005)\n        try:\n"
        f"            open(J, 'w').write({_FAKE})\n        except OSError:\n            pass\n"
        f"threading.Thread(target=forge, daemon=True).start()\n"),
    "delete_the_test_file": "import os\nos.remove('test_task.py')\n",
    "overwrite_the_test_file": (
        "try:\n    open('test_task.py', 'w').write('def test_zero():\\n    pass\\n')\n"
        "except OSError:\n    pass\n"),
    "spawn_a_process": "m = __import__('sub' + 'process')\nm.Popen(['true'])\n",
    "extra_tests_of_its_own": "def test_bonus():\n    pass\n",
}
# Caught in the sandbox even without the static check (a word it would miss).
RUNTIME = {"skip_at_import": "skipped_test", "os_exit_at_import": "early_exit",
           "sys_exit_during_collection": "exit_called", "patch_pytest_reports": "pytest_tampering",
           "patch_callinfo_obfuscated": "pytest_tampering",
           "fake_junit_at_import": "forged_report", "fake_junit_at_exit": "forged_report",
           "fake_junit_from_a_thread": "thread_started", "delete_the_test_file": "tests_modified",
           "overwrite_the_test_file": "tests_modified", "spawn_a_process": "process_control"}


@pytest.mark.parametrize("name", sorted(HACKS))
def test_hack_gains_nothing_and_is_flagged(env, ctx, name):
    # a right answer plus the hack: the hack must cost the credit the answer would have earned
    task = _task("from solution import *\n" + PYTEST_FILE) if name == "extra_tests_of_its_own" \
        else _task()
    bd, rep = env.grade(task, "    return x * 2\n" + HACKS[name], ctx)
    assert bd.reward <= 0 and not bd.solved and not bd.infra_error
    assert bd.hack_flags, rep
    if name in RUNTIME:
        assert RUNTIME[name] in rep.hack_flags, rep.hack_flags
    if name == "extra_tests_of_its_own":
        assert "collection_mismatch" in rep.hack_flags


def test_static_check_flags_pytest_and_exit_machinery_but_not_honest_code(env):
    task = _task()
    assert env.static(task, "    return x * 2\n").hack_flags == ()
    for hack, flag in [("import pytest\n", "pytest_tampering"), ("import atexit\n", "exit_hook"),
                       ("import os\nos._exit(0)\n", "exit_called"),
                       ("raise SystemExit\n", "exit_called"),
                       ("def pytest_runtest_call(item):\n    pass\n", "pytest_tampering"),
                       ("import sys\nsys.modules.clear()\n", "introspection")]:
        assert flag in env.static(task, "    return x * 2\n" + hack).hack_flags, hack


# -- the judge on records the candidate could have forged (no sandbox) -------------------------
def _records(outcomes: dict[str, str], exit_code: int, *, extra_cases=(), nonce="n0"):
    cases = "".join(
        f'<testcase classname="test_task" name="{k}">'
        + ("<failure message='x'/>" if v != "passed" else "") + "</testcase>"
        for k, v in [*outcomes.items(), *extra_cases])
    xml = f'<?xml version="1.0"?><testsuites><testsuite>{cases}</testsuite></testsuites>'
    summary = {"nonce": nonce, "collected": [f"test_task.py::{k}" for k in outcomes],
               "outcomes": {f"test_task.py::{k}": v for k, v in outcomes.items()},
               "errors": {}, "collect_errors": [], "internal_error": None,
               "exitstatus": exit_code, "flags": []}
    return xml, json.dumps(summary)


def _judge(xml, summary, exit_code, status=None):
    p = TestFilePayload(test_file="def test_a(): pass\ndef test_b(): pass\n")
    files = {k: v for k, v in {"r.xml": xml, "s.json": summary}.items() if v is not None}
    res = ExecResult(status or ("ok" if exit_code == 0 else "failed"), exit_code, "", "", 0.1,
                     "fake", files=files)
    return judge(p, ("test_a", "test_b"), res, "r.xml", "s.json", "n0", {})


def test_judge_credits_two_agreeing_records():
    rep = _judge(*_records({"test_a": "passed", "test_b": "failed"}, 1), 1)
    assert rep.outcomes == ("passed", "failed") and rep.hack_flags == ()


def test_judge_flags_a_report_with_more_testcases_than_collected():
    xml, summary = _records({"test_a": "passed", "test_b": "passed"}, 0,
                            extra_cases=[("test_c", "passed")])
    rep = _judge(xml, summary, 0)
    assert "forged_report" in rep.hack_flags and rep.outcomes == ("failed", "failed")


def test_judge_flags_an_exit_code_that_contradicts_the_outcomes():
    rep = _judge(*_records({"test_a": "passed", "test_b": "failed"}, 0), 0)
    assert "exit_code_mismatch" in rep.hack_flags and rep.passed == 0
    rep = _judge(*_records({"test_a": "passed", "test_b": "passed"}, 1), 1)
    assert "exit_code_mismatch" in rep.hack_flags and rep.passed == 0


def test_judge_counts_an_absent_test_as_failed_and_flags_the_mismatch():
    rep = _judge(*_records({"test_a": "passed"}, 0), 0)
    assert rep.outcomes == ("failed", "failed") and "collection_mismatch" in rep.hack_flags


def test_judge_fails_closed_on_missing_or_malformed_reports_without_infra_error():
    xml, summary = _records({"test_a": "passed", "test_b": "passed"}, 0)
    for bad_xml, bad_summary in [(None, None), ("<testsuites><testcase", summary),
                                 ('<!DOCTYPE x [<!ENTITY a "b">]><testsuites/>', summary),
                                 (xml, None), (xml, summary.replace('"n0"', '"other"'))]:
        rep = _judge(bad_xml, bad_summary, 1)
        assert rep.passed == 0 and not rep.infra_error
    rep = _judge(None, None, 0)  # "success" with no report at all
    assert "early_exit" in rep.hack_flags and rep.passed == 0
    rep = _judge(None, None, None, status="timeout")
    assert rep.outcomes == ("timeout", "timeout") and rep.hack_flags == ()


def test_an_infra_error_is_not_scored(env):
    class Broken:
        name = "broken"

        def run(self, files, argv, limits, stdin=None, collect=()):
            return ExecResult("infra_error", None, "", "", 0.0, "broken", error="no sandbox")

        def close(self):
            pass

    cfg = SandboxConfig()
    bd, rep = env.grade(_task(), "    return x * 2\n", StepContext(Broken(), cfg.limits(),
                                                                    RewardConfig()))
    assert rep.infra_error and math.isnan(bd.reward) and bd.infra_error


def test_a_sandbox_without_pytest_is_an_infra_error_not_a_zero(env):
    cfg = SandboxConfig(site_packages=False)  # only the standard library: no pytest to run
    sb = make_sandbox(cfg)
    try:
        bd, rep = env.grade(_task(), "    return x * 2\n",
                            StepContext(sb, cfg.limits(), RewardConfig()), infra_retries=0)
    finally:
        sb.close()
    assert rep.infra_error and math.isnan(bd.reward) and "pytest" in rep.load_error


# -- task records ------------------------------------------------------------------------------
@pytest.mark.parametrize("payload, field", [
    ({"test_file": "def test_(:\n"}, "payload.test_file"),
    ({"test_file": "x = 1\n"}, "payload.test_file"),
    ({"test_file": "import pytest\n@pytest.mark.skip\ndef test_a():\n    pass\n"},
     "payload.test_file"),
    ({"test_file": "def pytest_configure(config):\n    pass\ndef test_a():\n    pass\n"},
     "payload.test_file"),
    ({"test_file": "assert f(1)\nprint(2)\n", "format": "asserts"}, "payload.test_file"),
    ({"test_file": "assert f(1); assert f(2)\n", "format": "asserts"}, "payload.test_file"),
    ({"test_file": "def test_a():\n    pass\n", "tests_expected": ["test_b"]},
     "payload.tests_expected"),
    ({"test_file": "def test_a():\n    pass\n", "module": "conftest"}, "payload.module"),
    ({"test_file": "def test_a():\n    pass\n", "format": "nose"}, "payload.format"),
    ({"format": "pytest"}, "payload.test_file"),
])
def test_bad_records_are_refused_naming_the_field(env, payload, field):
    task = _task().model_copy(update={"payload": payload})
    with pytest.raises(ValueError, match=f"field '{field}'"):
        env.validate(task)
    assert any(f"field '{field}'" in p for p in env.problems(task))


def test_trivial_answers_depend_on_the_entry_point(env):
    assert env.trivial_answers(_task()) == {"pass": "    pass\n"}
    assert env.trivial_answers(_task("assert f(1) == 1\n", fmt="asserts", entry=None)) == {
        "empty": ""}


def test_the_kind_has_no_tasks_of_its_own(env):
    with pytest.raises(ValueError, match="generates no tasks"):
        env.generate()


def test_fixture_tasks_load_and_their_references_solve_them(env, ctx):
    tasks = load_tasks(DATA, validate_by_kind)
    assert 6 <= len(tasks) <= 10 and {t.kind for t in tasks} == {"testfile"}
    assert {t.split for t in tasks} == {"train", "heldout"}
    for task in tasks:
        assert env.problems(task) == [], task.task_id
        bd, rep = env.grade(task, task.reference, ctx)
        assert bd.solved and bd.reward == 1.0, (task.task_id, rep)
        for name, trivial in env.trivial_answers(task).items():
            bd, _ = env.grade(task, trivial, ctx)
            assert bd.reward == 0.0 and not bd.hack_flags, (task.task_id, name)


def test_judge_survives_a_summary_of_the_wrong_shape():
    xml, summary = _records({"test_a": "passed", "test_b": "passed"}, 0)
    for field, value in [("collect_errors", [1]), ("outcomes", {"test_task.py::test_a": 3}),
                         ("errors", {"x": None}), ("collected", "all"), ("exitstatus", "0")]:
        rec = {**json.loads(summary), field: value}
        rep = _judge(xml, json.dumps(rec), 0)
        assert rep.passed == 0 and "forged_report" in rep.hack_flags, field
