"""Agent episodes: edit, run the visible tests, read the errors, try again, submit, get graded.

Real process sandbox and the real grader (`envs.score.score` over the hidden tests)."""
from __future__ import annotations

import json

import pytest

from envs.agent.episode import ActionError, EpisodeEnv, parse_actions, read_manifest, truncate
from envs.agent.grading import completion_from_file, make_grader
from envs.agent.scripts import CHECK_NO_START, read_visible
from sandbox.base import ExecResult, Limits
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox
from tasks.record import Task, TestCase

LIMITS = Limits(timeout_s=3.0)

# Floor division that must return 0 for a zero divisor. The visible examples show the zero case;
# hidden tests: 9//3=3, 1/0 -> 0, -7//2=-4, 0//5=0. The naive `a // b` passes 3 of the 4.
TASK = Task(
    task_id="unit/safe_div", suite="unit", family="safe_div", difficulty=1, split="train",
    prompt='def safe_div(a, b):\n    """Return a // b, or 0 when b is 0."""\n',
    entry_point="safe_div",
    tests=(TestCase(args=(9, 3), expected=3), TestCase(args=(1, 0), expected=0),
           TestCase(args=(-7, 2), expected=-4), TestCase(args=(0, 5), expected=0)),
    examples=(TestCase(args=(7, 2), expected=3), TestCase(args=(5, 0), expected=0)),
)
WRONG = "def safe_div(a, b):\n    return a // b\n"
FIXED = "def safe_div(a, b):\n    if b == 0:\n        return 0\n    return a // b\n"


def write(path: str, body: str) -> str:
    return f'<write path="{path}">\n{body}</write>'


@pytest.fixture(scope="module")
def sandbox():
    sbx = make_sandbox(SandboxConfig())
    yield sbx
    sbx.close()


@pytest.fixture
def env(sandbox):
    return EpisodeEnv(sandbox, LIMITS, make_grader(sandbox, LIMITS), max_turns=4,
                      time_budget_s=30.0, obs_bytes=4096)


def test_scripted_policy_sees_the_failing_example_fixes_it_and_is_graded_solved(env):
    obs = env.reset(TASK)
    assert TASK.prompt in obs and "safe_div(5, 0) == 0" in obs and "<submit/>" in obs

    obs, done, info = env.step("First try.\n" + write("solution.py", WRONG) + "\n<run_tests/>")
    assert not done and info["turn"] == 1 and info["actions"] == ["write", "run_tests"]
    assert info["seconds"] > 0 and "grade" not in info
    assert "PASS safe_div(7, 2) == 3" in obs
    assert "FAIL safe_div(5, 0) raised ZeroDivisionError" in obs
    assert "1/2 visible examples passed" in obs

    obs, done, info = env.step(write("solution.py", FIXED) + "<run_tests/>\n<submit/>")
    assert "2/2 visible examples passed" in obs
    assert done and info["turn"] == 2 and info["end_reason"] == "submit"
    assert info["reward"] == 1.0 and info["grade"]["solved"] is True
    assert info["grade"]["tests_total"] == 4  # the hidden tests, not the 2 visible examples
    assert [h["turn"] for h in env.history] == [1, 2]


@pytest.mark.parametrize("text, says", [
    ("I think the answer is a // b.", "no action found"),
    ('<write path="solution.py">def f(): pass', "closing tag missing"),
    ("<run>ls -la</run>", "only `python FILE.py"),
    ("<run>python missing.py</run>", "no file 'missing.py'"),
    ('<write path="../escape.py">x = 1\n</write>', "inside the workspace"),
    ('<write path="_episode_check.py">x = 1\n</write>', "reserved"),
    ("<submit/>\n<run_tests/>", "must be the last action"),
])
def test_malformed_action_returns_a_helpful_observation_and_changes_nothing(env, text, says):
    env.reset(TASK)
    before = dict(env.files)
    obs, done, info = env.step(text)
    assert not done and info["action"] == "malformed"
    assert obs.startswith("Malformed action:") and says in obs
    assert env.files == before


def test_max_turns_ends_the_episode_and_grades_the_last_solution(sandbox):
    env = EpisodeEnv(sandbox, LIMITS, make_grader(sandbox, LIMITS), max_turns=2,
                     time_budget_s=30.0)
    env.reset(TASK)
    _, done, _ = env.step(write("solution.py", WRONG))
    assert not done
    obs, done, info = env.step("<run_tests/>")
    assert done and info["end_reason"] == "max_turns" and "Episode over (max_turns)" in obs
    # a // b passes 9//3, -7//2 and 0//5 and raises on 1/0: 3 of 4 hidden tests.
    assert info["reward"] == pytest.approx(0.75)
    assert info["grade"]["test_outcomes"] == ("passed", "error", "passed", "passed")
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<submit/>")


def test_grade_ignores_fake_harness_and_inputs_left_in_the_workspace(env):
    env.reset(TASK)
    fake_harness = 'import json\nprint(json.dumps({"i": 0, "value": 3}))\n'
    env.step(write("harness.py", fake_harness) + write("inputs.json", "[]\n")
             + write("conftest.py", "raise SystemExit(0)\n") + write("solution.py", WRONG))
    obs, done, info = env.step("<run>python harness.py</run>\n<submit/>")
    assert '"value": 3' in obs  # the fake harness did run in the workspace...
    assert done and info["reward"] == pytest.approx(0.75)  # ...and the grade is still 3 of 4


def test_solution_that_reads_a_workspace_file_gets_no_credit_from_it(env):
    env.reset(TASK)
    answers = write("answers.json", '{"1,0": 0}\n')
    cheat = ("import json\nANS = json.load(open('answers.json'))\n"
             "def safe_div(a, b):\n    return ANS.get(f'{a},{b}', a // b if b else 0)\n")
    obs, _, _ = env.step(answers + write("solution.py", cheat) + "<run_tests/>")
    assert "2/2 visible examples passed" in obs  # it works in the workspace
    _, done, info = env.step("<submit/>")
    # Graded in a fresh sandbox without answers.json; the file access is flagged besides.
    assert done and info["reward"] <= 0 and not info["grade"]["solved"]


def test_run_shows_output_and_errors_and_keeps_files_the_program_made(env):
    env.reset(TASK)
    script = ("from solution import safe_div\nprint('got', safe_div(8, 2))\n"
              "open('notes.txt', 'w').write('hello')\n")
    obs, done, info = env.step(write("solution.py", FIXED) + write("try.py", script)
                               + "<run>python try.py</run>")
    assert not done and "[exit 0]" in obs and "got 4" in obs
    assert env.files["notes.txt"] == "hello" and "try.py" in env.files
    assert not any(k.startswith("_episode_") for k in env.files)
    obs, _, _ = env.step(write("boom.py", "raise KeyError('nope')\n") + "<run>python boom.py</run>")
    assert "[exit 1]" in obs and "KeyError: 'nope'" in obs


def test_each_action_of_a_turn_says_whether_it_did_its_work(env):
    """The per-action outcomes a tools turn reports as its calls' statuses (envs/tools.py)."""
    env.reset(TASK)
    big = "x = 1\n" * 100_000  # 600 kB: over the workspace's limit
    _, _, info = env.step(write("solution.py", WRONG) + write("big.py", big)
                          + write("boom.py", "raise KeyError('nope')\n")
                          + "<run>python boom.py</run><run_tests/>")
    got = [(o["status"], o["detail"], o["tests_passed"], o["tests_total"])
           for o in info["outcomes"]]
    assert got[0] == ("ran", "", None, None) and got[2] == ("ran", "", None, None)
    assert got[1][0] == "failed" and "workspace would hold" in got[1][1] and "big.py" not in env.files
    assert got[3] == ("failed", "exit 1", None, None)
    assert got[4] == ("ran", "", 1, 2)  # the naive answer passes one of the two examples
    _, done, info = env.step(write("solution.py", FIXED) + "<run_tests/><submit/>")
    assert done and [o["status"] for o in info["outcomes"]] == ["ran", "ran", "ran"]
    assert info["outcomes"][1]["tests_passed"] == 2


def test_long_observation_is_truncated_with_a_marker(sandbox):
    env = EpisodeEnv(sandbox, LIMITS, make_grader(sandbox, LIMITS), obs_bytes=512)
    env.reset(TASK)
    obs, _, _ = env.step(write("spam.py", "print('x' * 10000)\n") + "<run>python spam.py</run>")
    assert len(obs.encode()) <= 512 and "[truncated:" in obs


def test_time_budget_kills_a_looping_run_and_ends_the_episode(sandbox):
    env = EpisodeEnv(sandbox, LIMITS, make_grader(sandbox, LIMITS), max_turns=10,
                     time_budget_s=0.5)
    env.reset(TASK)
    obs, done, info = env.step(write("loop.py", "while True:\n    pass\n")
                               + "<run>python loop.py</run>")
    assert "killed: time limit" in obs
    assert done and info["end_reason"] == "time_budget"
    assert info["reward"] == 0.0  # solution.py still holds only the prompt's stub


def test_parse_actions_strips_code_fences_and_keeps_order():
    acts = parse_actions('<write path="a.py">\n```python\nx = 1\n```\n</write><run>python a.py 3'
                         '</run><submit/>', {})
    assert [a.kind for a in acts] == ["write", "run", "submit"]
    assert acts[0].body == "x = 1\n" and acts[1].argv == ("a.py", "3")
    with pytest.raises(ActionError):
        parse_actions("<run_test/>", {})


def test_truncate_is_a_no_op_under_the_limit_and_marks_the_cut_over_it():
    assert truncate("short", 100) == "short"
    cut = truncate("é" * 1000, 300)
    assert len(cut.encode()) <= 300 and cut.rstrip().endswith("]")


def test_completion_from_file_accepts_whole_files_and_prompt_continuations():
    assert completion_from_file(TASK, TASK.prompt + "    return 1\n") == "    return 1\n"
    assert completion_from_file(TASK, FIXED) == FIXED  # the def replaces the docstring stub
    bare = TASK.model_copy(update={"prompt": "def safe_div(a, b):\n"})
    assert completion_from_file(bare, FIXED) == FIXED[len(bare.prompt):]
    whole = "import math\n" + FIXED  # a prompt ending at the signature is closed with `pass`
    assert completion_from_file(bare, whole) == "    pass\n" + whole


# -- reward integrity (issue 34): nothing the program prints is read as a verdict -------------
def _checker_output(nonce: str, *records, exit_code: int | None = 0, key: str | None = None
                    ) -> str:
    """What an honest checker writes on stdout: each child record wrapped with the nonce."""
    key = nonce if key is None else key
    out = "".join(json.dumps({"key": key, "rec": json.dumps(r)}) + "\n" for r in records)
    if exit_code is not None:
        out += json.dumps({"key": key, "exit": exit_code}) + "\n"
    return out


def _res(stdout: str, stderr: str = "", status: str = "ok", exit_code: int | None = 0):
    return ExecResult(status, exit_code, stdout, stderr, 0.01, "test")


HONEST = ({"loaded": True}, {"i": 0, "value": 3}, {"i": 1, "value": 0}, {"end": True})


def test_checker_output_counts_only_nonce_lines_in_an_honest_childs_order():
    def read(stdout, **kw):
        return read_visible(_res(stdout, **kw), "n0nce", "safe_div", TASK.examples)

    honest = read(_checker_output("n0nce", *HONEST))
    assert (honest.passed, honest.total, honest.flags) == (2, 2, ())
    assert honest.lines == ("PASS safe_div(7, 2) == 3", "PASS safe_div(5, 0) == 0")
    one_wrong = read(_checker_output("n0nce", HONEST[0], HONEST[1], {"i": 1, "value": 9},
                                     HONEST[3]))
    assert (one_wrong.passed, one_wrong.flags) == (1, ())
    forgeries = {
        "a line without the nonce": _checker_output("n0nce", *HONEST) + "2/2 passed\n",
        "a guessed nonce": _checker_output("n0nce", *HONEST[:3], key="guess") + _checker_output(
            "n0nce", HONEST[3]),
        "a second answer for one call": _checker_output("n0nce", *HONEST[:2], HONEST[1],
                                                        *HONEST[2:]),
        "a call that does not exist": _checker_output("n0nce", *HONEST[:3], {"i": 2, "value": 0},
                                                      HONEST[3]),
        "an answer before loading": _checker_output("n0nce", HONEST[1], *HONEST),
        "a record after the end": _checker_output("n0nce", *HONEST, {"i": 1, "value": 0}),
        "a line over the record limit": _checker_output("n0nce", *HONEST[:3]) + json.dumps(
            {"key": "n0nce", "overlong": 99999}) + "\n",
    }
    for what, stdout in forgeries.items():
        got = read(stdout)
        assert "forged_record" in got.flags and got.passed <= got.total == 2, what
    printed = read(_checker_output("n0nce", *HONEST), stderr="9/2 visible examples passed\n")
    assert printed.flags == ("forged_record",) and printed.passed == 2
    raised = read(_checker_output("n0nce", HONEST[0], HONEST[1], {
        "i": 1, "error": "ValueError: 2/2 visible examples passed", "tb": ""}, HONEST[3]))
    assert raised.flags == ("forged_record",)
    assert read(_checker_output("n0nce", *HONEST[:3])).flags == ("early_exit",)
    killed = read(_checker_output("n0nce", *HONEST[:2], exit_code=None), status="failed",
                  exit_code=-9)
    assert killed.flags == ("harness_tampering",) and killed.passed == 1
    timed_out = read(_checker_output("n0nce", *HONEST[:2], exit_code=None), status="timeout",
                     exit_code=None)
    assert timed_out.flags == () and "FAIL safe_div(5, 0): no result" in timed_out.lines[-1]


def test_a_printed_count_is_flagged_and_the_verdict_stays_the_environments(env):
    env.reset(TASK)
    forged = FIXED + "print('9/2 visible examples passed')\n"
    obs, _, info = env.step(write("solution.py", forged) + "<run_tests/>")
    assert obs.splitlines()[-2] == "2/2 visible examples passed"
    assert info["hack_flags"] == ["forged_record"] and "visible_passed" not in info
    _, done, info = env.step("<submit/>")
    # The hidden tests all pass, but a flagged episode is paid nothing.
    assert done and info["reward"] == -1.0 and not info["grade"]["solved"]
    assert "forged_record" in info["grade"]["hack_flags"]


def test_the_runs_nonce_is_out_of_the_solutions_reach(env, monkeypatch):
    monkeypatch.setattr("envs.agent.episode.secrets.token_hex", lambda n: "feedface" * 4)
    search = '''import os, re, sys
NEEDLE = ("feedface" * 2 + "FEEDFACE".lower() * 2).encode()
def scan(where, data):
    if NEEDLE in data:
        print("LEAK", where)
scan("stdin", sys.stdin.buffer.read())
scan("argv", " ".join(sys.argv).encode())
scan("environ", "".join(os.environ.values()).encode())
ppid = os.getppid()
places = ["/proc/%d/%s" % (ppid, n) for n in ("environ", "cmdline", "fd/0")]
places += [n for n in os.listdir(".") if os.path.isfile(n)]
for p in places:
    try:
        with open(p, "rb") as f:
            scan(p, f.read(1 << 20))
    except OSError as exc:
        print("denied", p, type(exc).__name__)
try:
    mem = open("/proc/%d/mem" % ppid, "rb")
    for line in open("/proc/%d/maps" % ppid):
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        try:
            mem.seek(lo)
            scan("parent memory", mem.read(min(hi - lo, 1 << 24)))
        except (OSError, ValueError, OverflowError):
            pass
except OSError as exc:
    print("denied parent memory", type(exc).__name__)
print("searched")
'''
    env.reset(TASK)
    obs, _, info = env.step(write("solution.py", FIXED + search) + "<run_tests/>")
    assert "searched" in obs and "LEAK" not in obs, obs
    assert "denied parent memory" in obs
    assert info["visible_passed"] == 2 and "hack_flags" not in info


def test_a_run_cannot_plant_reserved_or_outside_paths_through_its_manifest(env):
    env.reset(TASK)
    planted = {"solution.py": FIXED, "_episode_check.py": "print('2/2 visible examples passed')",
               "../up.py": "x = 1\n", "/abs.py": "x = 1\n", "a/../b.py": "x = 1\n"}
    script = ("import atexit, json\natexit.register(lambda: json.dump("
              f"{planted!r}, open('_episode_files.json', 'w')))\n")
    obs, done, info = env.step(write("plant.py", script) + "<run>python plant.py</run>")
    assert env.files == {"solution.py": FIXED}  # what is left of the manifest: a file it may write
    assert info["hack_flags"] == ["forged_record"]
    obs, _, info = env.step("<run_tests/>")  # and the workspace still runs
    assert "2/2 visible examples passed" in obs


def test_read_manifest_refuses_what_the_runner_never_writes():
    assert read_manifest("not json", 100) == (None, True)
    assert read_manifest('["a.py"]', 100) == (None, True)
    assert read_manifest('{"a.py": "x", "big.txt": "%s"}' % ("y" * 101), 100) == ({"a.py": "x"},
                                                                                  False)
    assert read_manifest('{"a.py": "x", "./b.py": "y"}', 100) == ({"a.py": "x"}, True)


def test_a_program_printing_the_environments_verdict_is_flagged_and_an_honest_one_is_not(env):
    env.reset(TASK)
    _, _, info = env.step(write("t.py", "print('3 of 3 of my own checks passed')\n")
                          + "<run>python t.py</run>")
    assert "hack_flags" not in info
    _, _, info = env.step(write("t.py", "print('[turn 2/4; 2 left]')\n") + "<run>python t.py</run>")
    assert info["hack_flags"] == ["fake_success_report"]


def test_a_checker_that_could_not_start_is_an_infra_error_not_a_flag():
    class NoFork:  # what the checker reports when the sandbox's process limit stops its fork
        name = "stub"

        def run(self, files, argv, limits, stdin=None, collect=(), base=None):
            return ExecResult("failed", CHECK_NO_START, "", "the checker could not start: "
                              "[Errno 11] Resource temporarily unavailable\n", 0.01, "stub")

    env = EpisodeEnv(NoFork(), LIMITS, None, max_turns=4)
    env.reset(TASK)
    obs, _, info = env.step("<run_tests/>")
    assert info["infra_error"] and "hack_flags" not in info and "not your code's fault" in obs
