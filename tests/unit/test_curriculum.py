"""Difficulty ledger, curriculum sampler and DAPO dynamic sampling (pure, no services)."""
import math

import numpy as np
import pandas as pd
import pytest

from envs.io.procedural import generate_suite
from rewards.outcome import fill_solved
from tasks.curriculum import (CurriculumConfig, DifficultyLedger, drop_uninformative_groups,
                              fill_informative_batch, informative_groups, sample_batch,
                              task_weights)


def _rows(task, iteration, rewards, group="g"):
    return pd.DataFrame({"task_id": task.task_id, "iteration": iteration,
                         "reward": rewards, "pass_fraction": rewards,
                         "solved": [None if math.isnan(r) else r == 1.0 for r in rewards],
                         "family": task.family, "difficulty": task.difficulty,
                         "split": task.split, "group_id": f"{iteration}:{group}:{task.task_id}"})


@pytest.fixture(scope="module")
def pool():
    return [t for t in generate_suite(["add", "poly", "caesar"], [1, 2, 3], 4) if t.split == "train"]


def test_ledger_keeps_pass_rate_history_per_iteration_and_is_idempotent(pool):
    t = pool[0]
    rows = pd.concat([_rows(t, 0, [0.0, 0.0, 1.0, 0.5]), _rows(t, 1, [1.0, 1.0, 1.0, np.nan])])
    led = DifficultyLedger.from_trajectories(rows)
    h = led.history(t.task_id)
    # it 0: 1 of 4 solved (0.5 is partial credit); it 1: 3 of 3 scored (NaN = not scored)
    assert h["solve_rate"].tolist() == [0.25, 1.0]
    assert h["informative_groups"].tolist() == [1, 0]
    assert led.update(rows).to_frame().equals(led.to_frame())  # re-reading changes nothing
    assert DifficultyLedger.from_frame(led.to_frame()).to_frame().equals(led.to_frame())


def test_a_hack_flagged_rollout_is_never_solved_for_the_ledger(pool):
    # Each test passed but a hack check fired: reward -1 (the penalty), pass_fraction 1.
    # The ledger reads the rows' one definition (rewards/outcome.py), not pass_fraction.
    rows = fill_solved(pd.DataFrame({
        "task_id": pool[0].task_id, "iteration": 0, "reward": [-1.0, 1.0, 0.0],
        "pass_fraction": [1.0, 1.0, 0.0], "tests_passed": [3, 3, 0], "tests_total": 3,
        "hack_flags": [["exit_called"], [], []], "infra_error": False,
        "family": pool[0].family, "difficulty": pool[0].difficulty, "split": "train",
        "group_id": "0:0"}))
    assert rows["solved"].tolist() == [False, True, False]
    h = DifficultyLedger.from_trajectories(rows).history(pool[0].task_id)
    assert h["solved"].tolist() == [1] and h["solve_rate"].tolist() == [pytest.approx(1 / 3)]


def test_ledger_refuses_rows_missing_a_column(pool):
    with pytest.raises(ValueError, match=r"missing columns \['group_id'\]"):
        DifficultyLedger.from_trajectories(_rows(pool[0], 0, [1.0]).drop(columns="group_id"))


def test_weights_favour_sometimes_solved_tasks_over_always_or_never_solved(pool):
    # three tasks of one family and level, so only their own histories tell them apart
    same = [t for t in pool if (t.family, t.difficulty) == (pool[0].family, pool[0].difficulty)]
    easy, mid, hard = same[:3]
    rows = pd.concat([_rows(easy, 0, [1.0] * 8), _rows(mid, 0, [1.0, 0.0] * 4),
                      _rows(hard, 0, [0.0] * 8)])
    w = task_weights([easy, mid, hard], DifficultyLedger.from_trajectories(rows))
    # One group of 8 is weak evidence: the ledger's smoothed solve rates (about 0.9 and 0.1)
    # still leave the extremes a 57% chance of an informative group, against ~100% for `mid`.
    assert w[1] > 1.5 * w[0] and w[1] > 1.5 * w[2]
    assert w[0] == pytest.approx(w[2])
    assert min(w) > 0  # nothing is starved for good: solved tasks get revisited


def test_heldout_tasks_are_never_sampled_for_training():
    tasks = generate_suite(["add", "poly"], [1, 2], 10, heldout_fraction=0.5)
    rng = np.random.default_rng(0)
    drawn = sample_batch(tasks, DifficultyLedger(), 1000, rng)
    assert drawn and all(t.split == "train" for t in drawn)
    assert len({t.task_id for t in drawn}) == len(drawn)


def test_difficulty_ramps_up_as_the_policy_masters_a_level(pool):
    cfg = CurriculumConfig(group_size=8)
    rng = np.random.default_rng(0)
    fresh = sample_batch(pool, DifficultyLedger(cfg=cfg), 8, rng)
    assert np.mean([t.difficulty for t in fresh]) < 1.6  # new policy: mostly level 1
    rows = pd.concat([_rows(t, 0, [1.0] * 8) for t in pool if t.difficulty == 1])  # mastered
    later = sample_batch(pool, DifficultyLedger.from_trajectories(rows, cfg), 8, rng)
    assert np.mean([t.difficulty for t in later]) > 1.8


def test_drop_uninformative_groups_keeps_only_groups_with_reward_variance():
    rows = pd.DataFrame({"group_id": ["a"] * 3 + ["b"] * 3 + ["c"] * 3,
                         "reward": [1, 1, 1, 0, 1, 0, 0.5, np.nan, 0.5]})
    kept, dropped = drop_uninformative_groups(rows)
    assert kept["group_id"].unique().tolist() == ["b"] and dropped == ["a", "c"]
    assert informative_groups(np.array([np.nan, 1.0]), np.array([1, 1])).tolist() == [False, False]


def test_fill_refills_the_batch_with_fresh_tasks_until_enough_groups_are_informative(pool):
    rng = np.random.default_rng(1)
    solve = {t.task_id: (0.0 if i % 3 == 0 else 1.0 if i % 3 == 1 else 0.5)
             for i, t in enumerate(pool)}
    sample = lambda k, used: sample_batch(pool, DifficultyLedger(), k, rng,  # noqa: E731
                                          CurriculumConfig(strategy="uniform"), exclude=used)
    run = lambda tasks: [(t, (rng.random(8) < solve[t.task_id]).astype(float)) for t in tasks]  # noqa: E731
    out = fill_informative_batch(sample, run, lambda g: g[1], n_groups=4, max_rounds=10)
    assert len(out.groups) == 4
    assert all(np.ptp(g[1]) > 0 for g in out.groups)
    assert len({g[0].task_id for g in out.groups}) == 4  # a task is never sampled twice
    assert out.stats.groups_generated > 4 and out.stats.rounds >= 2
    assert math.isclose(out.stats.informative_share, 4 / out.stats.groups_generated)


def test_families_are_drawn_by_their_signal_not_by_how_many_tasks_they_have():
    # `affine` has ~90 training tasks, `written` ~10; unseen, both look equally uncertain
    pool = [t for t in generate_suite(["affine", "written"], [1, 2], 60) if t.split == "train"]
    n = {f: sum(t.family == f for t in pool) for f in ("affine", "written")}
    assert n["affine"] > 5 * n["written"]

    def drawn(balance):
        cfg = CurriculumConfig(group_size=8, balance_families=balance)
        rng = np.random.default_rng(0)
        fams = [t.family for _ in range(200) for t in sample_batch(pool, DifficultyLedger(cfg=cfg), 4, rng, cfg)]
        return fams.count("written") / len(fams)

    assert 0.4 < drawn(True) < 0.6  # half the draws each
    assert drawn(False) < 0.2  # per task: the big family crowds the small one out
    # within a family, the balance only rescales: the tasks keep their order of preference
    on, off = (task_weights(pool, DifficultyLedger(), CurriculumConfig(group_size=8, balance_families=b))
               for b in (True, False))
    for f in n:
        m = np.array([t.family == f for t in pool])
        assert on[m] * n[f] == pytest.approx(off[m])


def test_a_family_whose_first_groups_all_failed_is_still_drawn_now_and_then():
    # `plus` drew two tasks at iteration 0 and solved none; `add` is sometimes solved at
    # iterations 0..5. Per task, plus's level rate is exactly 0 for good (its tasks sit at the
    # floor, ~50x below add's): one unlucky iteration would decide the whole run. The family
    # floor keeps it in play at a fraction of a live family's weight.
    pool = [t for t in generate_suite(["add", "plus"], [1], 60) if t.split == "train"]
    rows = pd.concat([_rows(t, 0, [0.0] * 8) for t in pool if t.family == "plus"][:2]
                     + [_rows(t, i, [1.0, 0.0] * 4)
                        for i, t in enumerate(t for t in pool if t.family == "add")])
    is_plus = np.array([t.family == "plus" for t in pool])

    def share(family_floor):
        cfg = CurriculumConfig(group_size=8, family_floor=family_floor)
        w = task_weights(pool, DifficultyLedger.from_trajectories(rows, cfg), cfg)
        return w[is_plus].sum() / w.sum()

    assert share(0.0) < 0.03  # starved
    assert 0.1 < share(0.15) < 0.2  # tried about one draw in eight, against add's seven
    # a family sometimes solved is above the floor: the floor changes nothing for it
    cfg = CurriculumConfig(group_size=8)
    led = DifficultyLedger.from_trajectories(rows, cfg)
    w_on, w_off = (task_weights(pool, led, cfg.model_copy(update={"family_floor": f}))
                   for f in (0.15, 0.0))
    assert np.allclose(w_on[~is_plus], w_off[~is_plus])
