"""The repo kind's pure parts: AST mutants, diffs and their strict applier, action parsing."""
import pytest

from envs.repo.diffs import PatchError, apply_diff, changed_paths, make_diff
from envs.repo.actions import parse_actions
from envs.repo.grading import is_test_path, junit_key, static_flags
from envs.repo.mutate import mutants

SRC = '''"""doc"""
def clamp(x, lo, hi):
    if x < lo:
        return lo
    return min(x, hi)


def window(xs, n):
    return [xs[i:i + n] for i in range(len(xs) - n)]
'''


def test_mutants_are_one_line_changes_of_each_family_and_compile():
    ms = list(mutants("m.py", SRC))
    fams = {m.family for m in ms}
    assert {"flip_comparison", "off_by_one", "remove_branch", "swap_arguments",
            "drop_return", "swap_arithmetic"} <= fams
    for m in ms:
        before, after = SRC.splitlines(), m.source.splitlines()
        assert len(before) == len(after)
        assert sum(a != b for a, b in zip(before, after)) == 1
        compile(m.source, "m.py", "exec")
    assert len({m.source for m in ms}) == len(ms)  # no two mutants alike
    assert [m.site for m in ms] == [m.site for m in mutants("m.py", SRC)]  # deterministic


def test_diff_round_trip_and_reverse_restores_the_tree():
    before = {"a.py": b"x = 1\ny = 2\n", "b.py": b"keep\n"}
    after = {"a.py": b"x = 1\ny = 3\n", "b.py": b"keep\n", "c.py": b"new\n"}
    d = make_diff(before, after)
    assert changed_paths(d) == ["a.py", "c.py"]
    assert {**before, **apply_diff(before, d)} == after
    back = make_diff(after, before)
    over = apply_diff(after, back)
    assert over["c.py"] is None and over["a.py"] == before["a.py"]


def test_a_stale_hunk_is_refused_naming_the_file():
    d = make_diff({"a.py": b"x = 1\n"}, {"a.py": b"x = 2\n"})
    with pytest.raises(PatchError, match="a.py"):
        apply_diff({"a.py": b"x = 5\n"}, d)


def test_actions_parse_and_bad_ones_say_why():
    acts = parse_actions('<ls/> <read path="p/m.py" start="3" end="9"/>'
                         '<edit path="p/m.py">\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n'
                         '</edit><run>pytest -q tests</run><submit/>')
    assert [a[0] for a in acts] == ["ls", "read", "edit", "run", "submit"]
    assert acts[1][2:] == (3, 9)
    with pytest.raises(ValueError, match="commands are"):
        parse_actions("<run>rm -rf /</run>")
    with pytest.raises(ValueError, match="last action"):
        parse_actions("<submit/><ls/>")
    with pytest.raises(ValueError, match="inside the workspace"):
        parse_actions('<read path="../etc/passwd"/>')


def test_test_paths_and_junit_names():
    assert is_test_path("toolz/tests/test_x.py") and is_test_path("test_inflection.py")
    assert is_test_path("pkg/conftest.py") and is_test_path("setup.cfg")
    assert not is_test_path("toolz/itertoolz.py")
    assert junit_key("toolz/tests/test_x.py::TestC::test_m[1]") == (
        "toolz.tests.test_x.TestC", "test_m[1]")


def test_static_flags_count_only_what_the_candidate_added():
    buggy = {"m.py": b"import sys\nx = sys.modules\n"}
    assert static_flags(buggy, {"m.py": b"import sys\nx = sys.modules\ny = 1\n"}) == ()
    got = static_flags(buggy, {"m.py": b"import sys\nx = sys.modules\n"
                                       b"t = open('test_inflection.py').read()\n"})
    assert "reads_tests" in got


def test_pass_to_pass_names_shorten_only_where_every_collected_node_is_graded():
    from envs.repo.build import compress
    from envs.repo.grading import outcome_of

    universe = {"f.py::a", "f.py::b[1]", "f.py::b[2]", "g.py::C::x", "g.py::C::y", "g.py::z",
                "g.py::flaky"}
    p2p = ["f.py::a", "f.py::b[1]", "g.py::C::x", "g.py::C::y", "g.py::z"]
    names = compress(p2p, ["f.py::b[2]"], universe)
    assert names == ["f.py", "g.py::C", "g.py::z"]  # g.py holds a test that is not graded
    ran = {"f.py::a": "passed", "f.py::b[1]": "passed", "f.py::b[2]": "failed"}
    assert outcome_of("f.py", ran, frozenset({"f.py::b[2]"})) == "passed"  # F2P counted apart
    assert outcome_of("g.py::C", ran, frozenset()) == "missing"


def _repo_records(summary: dict) -> tuple:
    import json

    from sandbox.base import ExecResult

    xml = ('<testsuites><testsuite><testcase classname="tests.test_m" name="test_a"/>'
           '</testsuite></testsuites>')
    res = ExecResult("ok", 0, "", "ROLLFORGE-LOADED n0\n", 0.1, "process",
                     files={"r.xml": xml, "s.json": json.dumps(summary)})
    return res


def test_repo_grader_reads_the_plugin_records_as_the_testfile_verifier_does():
    from envs.repo.grading import judge

    good = {"nonce": "n0", "collected": ["tests/test_m.py::test_a"],
            "outcomes": {"tests/test_m.py::test_a": "passed"}, "errors": {},
            "collect_errors": [], "internal_error": None, "exitstatus": 0, "flags": []}
    run = judge(_repo_records(good), "r.xml", "s.json", "n0")
    assert run.outcomes == {"tests/test_m.py::test_a": "passed"} and run.flags == ()
    # shapes the plugin never writes (a collect error without its message used to raise
    # IndexError in the repo grader; a missing exit status used to be read as a mismatch only)
    for bad in (dict(good, collect_errors=[["tests/test_m.py"]]), dict(good, exitstatus=None),
                dict(good, flags="x"), dict(good, outcomes={"tests/test_m.py::test_a": "won"})):
        run = judge(_repo_records(bad), "r.xml", "s.json", "n0")
        assert run.outcomes == {} and "forged_report" in run.flags


def test_the_builder_rejects_a_run_near_a_time_limit_with_its_reason():
    from envs.repo.build import BuildOptions, too_near
    from envs.repo.grading import judge
    from sandbox.base import Limits

    good = {"nonce": "n0", "collected": ["tests/test_m.py::test_a"],
            "outcomes": {"tests/test_m.py::test_a": "passed"}, "errors": {},
            "collect_errors": [], "internal_error": None, "exitstatus": 0, "flags": [],
            "cpu": {"tests/test_m.py::test_a": 2.5}, "cpu_total": 3.0}
    limits, opts = Limits(timeout_s=60.0), BuildOptions()  # per test 10 s CPU, margin 0.3

    def near(**changed):
        return too_near(judge(_repo_records(dict(good, **changed)), "r.xml", "s.json", "n0"),
                        1, limits, opts)

    assert near() is None  # 2.5 s of a 10 s limit: far enough from it at any load
    # 4 s passes here, but a third of the limit is as near as a decision may come to it
    assert near(cpu={"tests/test_m.py::test_a": 4.0}).startswith("slow: tests/test_m.py::test_a")
    assert near(cpu_total=30.0).startswith("slow: the run")  # 0.3 of its 70 s wall limit: 21 s
    assert near(outcomes={"tests/test_m.py::test_a": "timeout"}).startswith("timeout")
    run = judge(_repo_records(dict(good, cpu={"tests/test_m.py::test_a": "1"})), "r.xml",
                "s.json", "n0")
    assert run.outcomes == {} and "forged_report" in run.flags  # not what the plugin writes
