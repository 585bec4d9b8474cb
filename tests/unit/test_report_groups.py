"""The end-of-run summary: verification-only families against the rest, task-weighted."""
import pandas as pd

from flows.report import family_groups, summary


def _ev(rates: dict[str, tuple[float, float, int]]) -> dict:
    out = {"heldout/tasks": sum(n for _, _, n in rates.values()),
           "heldout/pass_greedy": 0.5, "heldout/pass_sampled": 0.5}
    for fam, (g, s, n) in rates.items():
        out |= {f"heldout/{fam}/pass_greedy": g, f"heldout/{fam}/pass_sampled": s,
                f"heldout/{fam}/tasks": n}
    return out


def test_groups_split_verification_only_families_from_the_rest():
    assert family_groups(["add", "sum_times", "count_plus"]) == {
        "verify-only": ["sum_times", "count_plus"], "with reference": ["add"]}
    assert family_groups(["add", "mul"]) == {}  # one kind only: no group rows


def test_summary_shows_task_weighted_group_rates_at_start_and_end():
    base = _ev({"add": (1.0, 0.9, 30), "sum_times": (0.0, 0.1, 10), "count_plus": (0.5, 0.5, 30)})
    final = _ev({"add": (1.0, 1.0, 30), "sum_times": (1.0, 0.9, 10), "count_plus": (0.5, 0.7, 30)})
    text = summary({"baseline": base, "final": final, "iterations": 2},
                   pd.DataFrame({"iteration": [0, 1], "rollout/mean_reward": [0.1, 0.2]}))
    line = next(x for x in text.splitlines() if x.strip().startswith("verify-only"))
    # (0*10 + 0.5*30)/40 = 0.375 greedy at the start; (1*10 + 0.5*30)/40 = 0.625 at the end
    assert "verify-only (40)" in line and "0.375 / 0.400" in line and "0.625 / 0.750" in line
    assert line.index("0.375") == next(x for x in text.splitlines() if "add (30)" in x).index("1.000")
    assert any(x.strip().startswith("with reference (30)") for x in text.splitlines())
