"""From test outcomes to one scalar reward, and from rewards to GRPO group advantages."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rewards.io_tests import TestReport


class RewardConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pass_weight: float = Field(1.0, ge=0, description="weight of the fraction of hidden tests passed")
    all_pass_bonus: float = Field(0.0, ge=0, description="extra reward when every test passes")
    hack_penalty: float = Field(1.0, ge=0, description="reward is zeroed and this subtracted on a hack flag")
    per_test_timeout_s: float = Field(1.0, gt=0, description="time limit of one test call")


@dataclass(frozen=True)
class RewardBreakdown:
    """The reward of one rollout and every component it came from. NaN reward: not scorable."""

    reward: float
    pass_fraction: float
    tests_passed: int
    tests_total: int
    test_outcomes: tuple[str, ...]
    status: str
    error_type: str | None
    hack_flags: tuple[str, ...]
    infra_error: bool
    exec_time_s: float

    @property
    def solved(self) -> bool:
        return self.tests_total > 0 and self.tests_passed == self.tests_total


def aggregate(report: TestReport, cfg: RewardConfig) -> RewardBreakdown:
    total = len(report.outcomes)
    exec_time = report.exec_result.duration_s if report.exec_result else 0.0
    first_error = report.error_types[0] if report.error_types else (
        report.load_error.split(":")[0] if report.load_error else None)
    if report.infra_error:
        return RewardBreakdown(math.nan, math.nan, 0, total, report.outcomes, report.status,
                               "InfraError", report.hack_flags, True, exec_time)
    frac = report.passed / total if total else 0.0
    reward = cfg.pass_weight * frac + (cfg.all_pass_bonus if report.passed == total else 0.0)
    if report.hack_flags:
        reward = -cfg.hack_penalty
    return RewardBreakdown(reward, frac, report.passed, total, report.outcomes, report.status,
                           first_error, report.hack_flags, False, exec_time)


def group_advantages(rewards: np.ndarray, group_ids: np.ndarray, eps: float = 1e-6,
                     scale: bool = True) -> np.ndarray:
    """GRPO: reward minus its group's mean, over the group's std. NaN rewards get advantage 0
    and are left out of their group's statistics (they were not scored, not scored zero)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    adv = np.zeros_like(rewards)
    for g in np.unique(group_ids):
        idx = np.flatnonzero((group_ids == g) & ~np.isnan(rewards))
        if idx.size == 0:
            continue
        r = rewards[idx]
        a = r - r.mean()
        if scale:
            a = a / (r.std() + eps)
        adv[idx] = a
    return adv
