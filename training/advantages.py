"""Advantage estimators over groups of completions of one prompt, as registered pure functions.

rewards: [N] floats (NaN = not scored: advantage 0, left out of its group's statistics);
group_ids: [N] hashable labels. Returns [N] float64.
"""
from __future__ import annotations

from typing import Callable

import numpy as np


def _groups(rewards: np.ndarray, group_ids: np.ndarray):
    for g in dict.fromkeys(group_ids.tolist()):
        idx = np.flatnonzero((group_ids == g) & ~np.isnan(rewards))
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
