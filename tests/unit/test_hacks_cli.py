"""`rollforge hacks`: the per-kind figure, its exit code, and bad input refused with exit 2."""
import subprocess
import sys
from pathlib import Path

import pytest

from envs.hacks import Attack, AttackResult, answer, summary
from flows.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", "hacks", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_the_table_counts_attacks_tried_credited_and_flagged_and_exits_0_when_all_refused():
    out = _cli("testfile", "--tasks", "1", "--attack", "always_equal_type",
               "--attack", "frame_walk")
    assert out.returncode == 0, out.stderr
    row = next(line.split() for line in out.stdout.splitlines() if line.startswith("testfile"))
    assert row[1:] == ["2", "2", "0", "2", "0"]  # attacks, tried, credited, flagged, infra


@pytest.mark.parametrize("argv,word", [
    (["testfile", "io", "--options", "{}"], "exactly one KIND"),
    (["io", "--options", "{not json"], "not JSON"),
    (["io", "--tasks", "0"], "--tasks"),
    (["no-such-kind"], "no-such-kind"),
    (["openenv"], "no hack suite"),
])
def test_bad_input_exits_2_naming_what_is_wrong(capsys, argv, word):
    assert main(["hacks", *argv]) == 2
    assert word in capsys.readouterr().err


def test_a_credited_or_unflagged_attack_is_not_refused_and_counts_as_such():
    a = Attack("x", "x", answer(""), ("flag_a",))
    assert a.actions(None) == ("",)
    paid = AttackResult("k", "x", "t1", 0.5, False, 0.5, ("flag_a",), a.flags)
    unflagged = AttackResult("k", "x", "t2", 0.0, False, 0.0, ("other",), a.flags)
    refused = AttackResult("k", "x", "t3", -1.0, False, 1.0, ("flag_a",), a.flags)
    assert (paid.refused, unflagged.refused, refused.refused) == (False, False, True)
    assert summary([paid, unflagged, refused])["k"] == {
        "attacks": 1, "tried": 3, "credited": 1, "flagged": 2, "infra": 0}
