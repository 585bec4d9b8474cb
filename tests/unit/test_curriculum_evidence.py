"""Evidence: on a fixed policy, the curriculum raises the share of informative groups (reward
variance > 0) in a batch compared with uniform sampling.

The policy is simulated as a known solve probability per task (a unit test of the sampler
layer): most tasks are either nearly always or nearly never solved, as for a real policy on a
broad suite. Each iteration samples a batch of tasks, draws G Bernoulli rewards per task, and
feeds the rows to the ledger, exactly as the flow will. Run with `-s` to see the figures.
"""
import numpy as np
import pandas as pd
import pytest

from envs.io.procedural import FAMILIES, generate_suite
from tasks.curriculum import CurriculumConfig, DifficultyLedger, informative_groups, sample_batch

G, BATCH, ITERS, WARMUP, SEEDS = 8, 32, 15, 5, (0, 1, 2, 3)


@pytest.fixture(scope="module")
def policy():
    pool = [t for t in generate_suite(list(FAMILIES), [1, 2, 3], 4) if t.split == "train"]
    rng = np.random.default_rng(123)
    skill = {f: rng.normal(1.0, 1.5) for f in FAMILIES}
    logit = {t.task_id: 2.5 * (skill[t.family] - 1.5 * (t.difficulty - 1)) + rng.normal(0, 1.5)
             for t in pool}
    return pool, {k: 1.0 / (1.0 + np.exp(-v)) for k, v in logit.items()}


def _informative_share(strategy, pool, solve_p, seed):
    cfg = CurriculumConfig(strategy=strategy, group_size=G)
    rng = np.random.default_rng(seed)
    ledger, shares = DifficultyLedger(cfg=cfg), []
    for it in range(ITERS):
        batch = sample_batch(pool, ledger, BATCH, rng, cfg)
        frames = []
        for gi, t in enumerate(batch):
            r = (rng.random(G) < solve_p[t.task_id]).astype(float)
            frames.append(pd.DataFrame({"task_id": t.task_id, "iteration": it, "reward": r,
                                        "pass_fraction": r, "solved": r == 1.0,
                                        "family": t.family,
                                        "difficulty": t.difficulty, "split": t.split,
                                        "group_id": f"{it}:{gi}"}))
        rows = pd.concat(frames, ignore_index=True)
        keep = informative_groups(rows["reward"].to_numpy(), rows["group_id"].to_numpy())
        if it >= WARMUP:
            shares.append(rows.assign(k=keep).groupby("group_id")["k"].first().mean())
        ledger = ledger.update(rows)
    return float(np.mean(shares))


def test_curriculum_raises_the_share_of_informative_groups_over_uniform_sampling(policy):
    pool, solve_p = policy
    p = np.array(list(solve_p.values()))
    expected_uniform = float(np.mean(1 - p ** G - (1 - p) ** G))
    uniform = [_informative_share("uniform", pool, solve_p, s) for s in SEEDS]
    curriculum = [_informative_share("curriculum", pool, solve_p, s) for s in SEEDS]
    print(f"\npool={len(pool)} train tasks, G={G}, batch={BATCH}, iterations {WARMUP}..{ITERS - 1}"
          f" measured; tasks with p<0.05: {np.mean(p < 0.05):.0%}, p>0.95: {np.mean(p > 0.95):.0%}")
    print(f"informative share, uniform:    {np.mean(uniform):.3f} per seed {np.round(uniform, 3)}"
          f" (analytic {expected_uniform:.3f})")
    print(f"informative share, curriculum: {np.mean(curriculum):.3f} per seed "
          f"{np.round(curriculum, 3)}")
    print(f"groups generated per informative group kept (DAPO refill): uniform "
          f"{1 / np.mean(uniform):.2f}, curriculum {1 / np.mean(curriculum):.2f}")
    assert abs(np.mean(uniform) - expected_uniform) < 0.06  # the baseline is what it should be
    assert all(c > u for c, u in zip(curriculum, uniform))
    assert np.mean(curriculum) > 1.5 * np.mean(uniform)
