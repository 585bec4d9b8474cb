"""HumanEval's 164 problems as Task records, and the plan of each check."""
from __future__ import annotations

import gzip
import shutil

import pytest

from envs.humaneval.grading import task_plan
from envs.humaneval.plan import Unplannable, plan_check
from envs.humaneval.problems import data_path, load_humaneval


def test_all_164_problems_load_as_humaneval_tasks():
    tasks = load_humaneval()
    assert [t.task_id for t in tasks] == [f"HumanEval/{i}" for i in range(164)]
    assert all(t.kind == "humaneval" and t.reference and t.split == "heldout" for t in tasks)


def test_every_check_is_graded_outside_the_sandbox():
    # No HumanEval assert needs to run inside the candidate's process.
    plans = {t.task_id: task_plan(t) for t in load_humaneval()}
    assert sum(len(p.asserts) for p in plans.values()) > 164
    assert all(len(p.asserts) >= 1 for p in plans.values())


def test_test_helpers_come_from_the_prompt_not_the_completion():
    # HumanEval/38 checks decode_cyclic(encode_cyclic(s)) == s: the grader runs the prompt's
    # encode_cyclic, so a completion redefining it to the identity gains nothing.
    t = {t.task_id: t for t in load_humaneval()}["HumanEval/38"]
    plan = task_plan(t)
    assert len(plan.calls) == 100 and "encode_cyclic" in plan.namespace


def test_a_check_that_would_need_the_candidates_process_is_refused():
    with pytest.raises(Unplannable):
        plan_check("def f(x):\n    pass\n",
                   "def check(candidate):\n    assert all(candidate(i) == i for i in range(3))\n",
                   "f")


def test_altered_data_file_is_refused(tmp_path):
    copy = tmp_path / "HumanEval.jsonl.gz"
    shutil.copy(data_path(), copy)
    with gzip.open(copy, "rt") as fh:
        text = fh.read()
    with gzip.open(copy, "wt") as fh:
        fh.write(text.replace("assert candidate(3.5) == 0.5", "assert True"))
    with pytest.raises(ValueError, match="sha256"):
        load_humaneval(str(copy))
