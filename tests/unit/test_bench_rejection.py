"""bench/bench_rejection_round.py's bookkeeping: the greedy flips are paired over the tasks both
evaluations scored, and the control arm is reported beside the round (the bench's runs
themselves are the CLI's, tested where the CLI is)."""
from bench.bench_rejection_round import paired, report


def _ev(greedy_by_task: dict) -> dict:
    solved = sum(greedy_by_task.values())
    return {"tasks": len(greedy_by_task), "greedy": solved / len(greedy_by_task),
            "greedy_ci": [0.0, 1.0], "sampled": 0.5, "sampled_ci": [0.25, 0.75],
            "greedy_by_task": greedy_by_task}


def test_flips_are_counted_over_the_tasks_both_scored():
    before = _ev({"a": True, "b": False, "c": False, "gone": True})
    after = _ev({"a": False, "b": True, "c": True, "new": True})
    assert paired(before, after) == {"paired_tasks": 3, "fixed": 2, "broken": 1}


def test_the_control_arm_is_reported_beside_the_round():
    before, after, control = _ev({"a": False, "b": True}), _ev({"a": True, "b": True}), \
        _ev({"a": False, "b": False})
    r = {"seed": 3, "before": before, "after": after, **paired(before, after),
         "control": control, "control_flips": paired(before, control),
         "dataset": {"kept": {"train": 7}}}
    text = report([r], n=2)
    assert "| 3 | 2 | 7 | 0.500 [0.000, 1.000] | 1.000 [0.000, 1.000] | 1 / 0 |" in text
    assert "Control" in text and "| 3 | 0.000 [0.000, 1.000] | 0 / 1 |" in text
    assert "Control" not in report([{**r, "control": None, "control_flips": None}], n=2)
