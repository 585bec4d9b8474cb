"""Advantage estimators over groups of completions of one prompt, as registered pure functions:
the one implementation, used by the flows (the stored `advantage` column) and by the trainer.

rewards: [N] floats (NaN = not scored: advantage 0, left out of its group's statistics);
group_ids: [N] hashable labels. Returns [N] float64.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np


def _groups(rewards: np.ndarray, group_ids: np.ndarray):
    """The scored indices of each group (ascending), groups in order of first appearance. One
    pass over the labels, not a scan of every row per group (O(rows x groups): the score stage
    of a 50k-rollout iteration, bench/bench_scale.py)."""
    first: dict = {}
    codes = np.fromiter((first.setdefault(g, len(first)) for g in group_ids.tolist()),
                        dtype=np.int64, count=len(group_ids))
    scored = np.flatnonzero(~np.isnan(rewards))
    order = scored[np.argsort(codes[scored], kind="stable")]
    ends = np.cumsum(np.bincount(codes[scored], minlength=len(first)))
    for idx in np.split(order, ends[:-1]):
        if idx.size:
            yield idx


def group_norm(rewards, group_ids, eps: float = 1e-6) -> np.ndarray:
    """GRPO (Shao et al. 2024): reward minus its group's mean, over the group's std."""
    r, g = np.asarray(rewards, dtype=np.float64), np.asarray(group_ids)
    adv = np.zeros_like(r)
    for idx in _groups(r, g):
        adv[idx] = (r[idx] - r[idx].mean()) / (r[idx].std() + eps)
    return adv


def group_center(rewards, group_ids) -> np.ndarray:
    """Dr.GRPO (Liu et al. 2025): reward minus its group's mean, not divided by the std."""
    r, g = np.asarray(rewards, dtype=np.float64), np.asarray(group_ids)
    adv = np.zeros_like(r)
    for idx in _groups(r, g):
        adv[idx] = r[idx] - r[idx].mean()
    return adv


def leave_one_out(rewards, group_ids) -> np.ndarray:
    """RLOO (Kool et al. 2019; Ahmadian et al. 2024): reward minus the mean of the *other*
    completions of its group, r_i - (sum_j r_j - r_i) / (k - 1). A group of one has no
    baseline and gets 0."""
    r, g = np.asarray(rewards, dtype=np.float64), np.asarray(group_ids)
    adv = np.zeros_like(r)
    for idx in _groups(r, g):
        k = idx.size
        if k > 1:
            adv[idx] = r[idx] - (r[idx].sum() - r[idx]) / (k - 1)
    return adv


ADVANTAGES: dict[str, Callable[..., np.ndarray]] = {
    "grpo": group_norm, "dr_grpo": group_center, "rloo": leave_one_out}


def estimator_for(algorithm: str, scale: bool) -> str:
    """The ADVANTAGES key a run's `rl.algorithm` and `rl.scale_advantages` select: rloo has its
    own baseline; grpo and ppo (GRPO with dual clip) take the group's, over its std unless
    scale is off (Dr.GRPO)."""
    if algorithm == "rloo":
        return "rloo"
    if algorithm in ("grpo", "ppo"):
        return "grpo" if scale else "dr_grpo"
    raise ValueError(f"rl.algorithm {algorithm!r}: expected grpo, ppo or rloo")


def advantages_for(algorithm: str, scale: bool, rewards, group_ids) -> np.ndarray:
    """The advantages the update of `algorithm` uses: what the store should hold."""
    return ADVANTAGES[estimator_for(algorithm, scale)](rewards, np.asarray(group_ids))


def group_advantages(rewards, group_ids, eps: float = 1e-6, scale: bool = True) -> np.ndarray:
    """GRPO: reward minus its group's mean, over the group's std (scale=False: Dr.GRPO, not
    divided). NaN rewards get advantage 0 and are left out of their group's statistics (they
    were not scored, not scored zero)."""
    return group_norm(rewards, group_ids, eps) if scale else group_center(rewards, group_ids)


def progress_potentials(progress) -> list[float]:
    """Phi_t of each turn of one episode: the best progress (a fraction in [0, 1]) any turn
    *before* turn t showed, 0 for the first turn and while none showed any. `progress[t]` is
    what turn t's own step reported (None: nothing measurable). Phi_t is known before turn t's
    tokens are sampled: that is what keeps `turn_advantages` unbiased."""
    best, out = 0.0, []
    for p in progress:
        out.append(best)
        if p is not None and not math.isnan(p):
            best = max(best, min(1.0, max(0.0, float(p))))
    return out


def turn_advantages(advantage: float, progress, coef: float) -> list[float]:
    """The advantage of each turn's tokens under potential-based shaping (Ng, Harada and Russell
    1999) with a zero terminal potential: turn t's return-to-go is R + sum_{u>=t}(Phi_{u+1} -
    Phi_u) = R - Phi_t, so its advantage is the episode's minus coef x Phi_t. The episode's total
    is the verified reward exactly (the shaping telescopes away: nothing is paid for running
    tests, however often), and the extra term is a function of the history before turn t
    (a state-dependent baseline): E[grad log pi(turn t) x Phi_t] = 0, so the expected update
    is the episode-credit one whatever each episode's turn count, and whichever group estimator
    made `advantage`. What it changes is the credit split: turns after the visible tests passed
    inherit less of the outcome than the turn that made them pass.
    NaN `advantage` (not scored): every turn 0."""
    if math.isnan(advantage):
        return [0.0] * len(progress)
    return [advantage - coef * phi for phi in progress_potentials(progress)]
