"""`rollforge eval`: the standalone harness, through the real CLI and the real sandbox."""
from __future__ import annotations

import json
import os

import pytest

from envs.humaneval.problems import load_humaneval
from flows.cli import main


def write_samples(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def run(capsys, *argv):
    code = main(["eval", "--suite", "humaneval", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_canonical_solutions_score_164_of_164_and_return_none_scores_0(tmp_path, capsys):
    tasks = load_humaneval()
    good = write_samples(tmp_path / "canonical.jsonl",
                         [{"task_id": t.task_id, "completion": t.reference} for t in tasks])
    code, out, _ = run(capsys, "--samples", good, "--workers", "2")
    assert code == 0 and "pass@1: 1.0000" in out and "solved 164/164" in out
    assert "mean reward: 1.0000" in out
    bad = write_samples(tmp_path / "none.jsonl",
                        [{"task_id": t.task_id, "completion": "    return None\n"} for t in tasks])
    code, out, _ = run(capsys, "--samples", bad, "--workers", "2")
    assert code == 0 and "pass@1: 0.0000" in out and "solved 0/164" in out
    rows = [json.loads(x) for x in open(bad + "_results.jsonl")]
    assert len(rows) == 164 and not any(r["passed"] for r in rows)
    assert all(r["status"] == "ok" and r["hack_flags"] == [] for r in rows)


def test_several_samples_per_task_give_pass_at_k_and_results_in_input_order(tmp_path, capsys):
    # HumanEval/2 gets 1 correct of 3 samples, HumanEval/0 0 of 3.
    # pass@1 = mean(1/3, 0) = 0.1667; pass@2 = mean(1 - C(2,2)/C(3,2), 0) = mean(2/3, 0) = 0.3333
    # pass@3 = mean(1, 0) = 0.5
    rows = [{"task_id": "HumanEval/2", "completion": c, "note": i} for i, c in enumerate(
        ["    return number % 1.0\n", "    return 0.5\n", "    return 0\n"])]
    rows += [{"task_id": "HumanEval/0", "completion": "    return None\n"}] * 3
    path = write_samples(tmp_path / "s.jsonl", rows)
    code, out, _ = run(capsys, "--samples", path, "--k", "1,2,3,10", "--workers", "2")
    assert code == 0
    assert "pass@1: 0.1667" in out and "pass@2: 0.3333" in out and "pass@3: 0.5000" in out
    assert "pass@10" not in out  # no problem has 10 samples
    res = [json.loads(x) for x in open(path + "_results.jsonl")]
    assert [r.get("note") for r in res[:3]] == [0, 1, 2]  # input fields kept, input order
    assert res[0]["passed"] and res[0]["tests_passed"] == 3
    assert res[1]["tests_passed"] == 1 and res[1]["reward"] == pytest.approx(1 / 3)
    assert res[1]["test_outcomes"] == ["passed", "failed", "failed"]
    assert set(res[1]["components"]) >= {"pass_fraction", "lint_findings", "hack_flags"}
    assert [f for f in os.listdir(tmp_path) if ".tmp" in f] == []


def test_hacked_sample_is_reported_with_its_flag_and_not_counted(tmp_path, capsys):
    path = write_samples(tmp_path / "h.jsonl", [
        {"task_id": "HumanEval/2", "completion": "    return number % 1.0\nimport os\nos._exit(0)\n"}])
    code, out, _ = run(capsys, "--samples", path, "--workers", "1")
    res = json.loads(open(path + "_results.jsonl").readline())
    assert code == 0 and "pass@1: 0.0000" in out
    assert "early_exit" in res["hack_flags"] and res["passed"] is False


@pytest.mark.parametrize("line, message", [
    ('{"task_id": "HumanEval/0", "completion": ', ":2: not valid JSON"),
    ('["HumanEval/0", "x"]', ":2: expected a JSON object"),
    ('{"task_id": "HumanEval/0"}', ":2: field 'completion' must be a string, got missing"),
    ('{"task_id": "HumanEval/999", "completion": "x"}', ":2: task_id 'HumanEval/999'"),
])
def test_malformed_line_is_refused_naming_its_line_number(tmp_path, capsys, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"task_id": "HumanEval/0", "completion": "    return 1\n"})
                    + "\n" + line + "\n")
    code, _, err = run(capsys, "--samples", str(path))
    assert code == 2 and message in err
    assert not os.path.exists(str(path) + "_results.jsonl")


def test_missing_samples_file_is_a_usage_error(tmp_path, capsys):
    code, _, err = run(capsys, "--samples", str(tmp_path / "nope.jsonl"))
    assert code == 2 and "no such file" in err
