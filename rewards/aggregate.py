"""From test outcomes, static and runtime signals to one scalar reward. Every component stays in
the `RewardBreakdown` next to the scalar. Group advantages live in rewards/advantages.py
(`group_advantages` is importable from here too)."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from rewards.advantages import group_advantages  # noqa: F401  (the flows' entry point)
from rewards.outcome import solved
from rewards.reports import TestReport
from rewards.static_checks import StaticReport


class RewardConfig(BaseModel):
    """Weights of the reward's components. The defaults reward the fraction of hidden tests passed
    and nothing else, so the shaping terms are opt-in."""

    model_config = ConfigDict(extra="forbid")

    pass_weight: float = Field(1.0, ge=0, description="weight of the fraction of hidden tests passed")
    all_pass_bonus: float = Field(0.0, ge=0, description="extra reward when every test passes")
    hack_penalty: float = Field(1.0, ge=0, description="reward is zeroed and this subtracted on a hack flag")
    per_test_timeout_s: float = Field(1.0, gt=0, description="time limit of one test call")
    lint_weight: float = Field(0.0, ge=0, description="subtracted per pyflakes finding in the "
                               "completion (undefined names, unused imports), up to lint_cap")
    lint_cap: int = Field(5, ge=0, description="most lint findings that count against the reward")
    forbidden_weight: float = Field(0.0, ge=0, description="subtracted per suspicious construct "
                                    "(eval, exec, globals, import os/sys)")
    timeout_weight: float = Field(0.0, ge=0, description="subtracted times the fraction of tests "
                                  "that timed out (a slow solution costs more than a wrong one)")


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
    syntax_ok: bool = True
    lint_findings: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    timeouts: int = 0
    errors: int = 0
    error_counts: tuple[tuple[str, int], ...] = ()  # exception type -> tests it broke
    memory_exceeded: bool = False
    output_bytes: int = 0
    test_names: tuple[str, ...] = ()  # what each outcome checked, where the kind names them

    @property
    def solved(self) -> bool:
        """What pass@k counts (rewards/outcome.py: every test passed, nothing flagged; an
        unscored rollout is not solved)."""
        return solved(self.tests_passed, self.tests_total, self.hack_flags,
                      self.infra_error) is True

    def components(self) -> dict[str, float]:
        """Numeric components for the trajectory row's `reward_components` column."""
        return {
            "pass_fraction": self.pass_fraction, "syntax_ok": float(self.syntax_ok),
            "lint_findings": float(len(self.lint_findings)), "forbidden": float(len(self.forbidden)),
            "timeouts": float(self.timeouts), "errors": float(self.errors),
            "memory_exceeded": float(self.memory_exceeded), "output_bytes": float(self.output_bytes),
            "hack_flags": float(len(self.hack_flags)), "exec_time_s": self.exec_time_s,
        }


def aggregate(report: TestReport, cfg: RewardConfig, static: StaticReport | None = None
              ) -> RewardBreakdown:
    total = len(report.outcomes)
    res = report.exec_result
    exec_time = res.duration_s if res else 0.0
    first_error = report.error_types[0] if report.error_types else (
        report.load_error.split(":")[0] if report.load_error else None)
    flags = tuple(dict.fromkeys(report.hack_flags + (static.hack_flags if static else ())))
    signals = dict(
        syntax_ok=report.status != "syntax_error" and (static is None or static.syntax_ok),
        lint_findings=static.lint if static else (), forbidden=static.forbidden if static else (),
        timeouts=sum(o == "timeout" for o in report.outcomes),
        errors=sum(o == "error" for o in report.outcomes),
        error_counts=tuple(sorted(Counter(report.error_types).items())),
        memory_exceeded=report.status == "memory_exceeded" or "MemoryError" in report.error_types,
        output_bytes=len(res.stdout.encode()) + len(res.stderr.encode()) if res else 0,
        test_names=tuple(report.test_names),
    )
    if report.infra_error:
        return RewardBreakdown(math.nan, math.nan, 0, total, report.outcomes, report.status,
                               "InfraError", flags, True, exec_time, **signals)
    # a kind's own score where it has one (TestReport.score), else the share of tests passed
    frac = report.score if report.score is not None else (
        report.passed / total if total else 0.0)
    if flags:
        reward = -cfg.hack_penalty  # no credit, whatever the tests said
    else:
        reward = (cfg.pass_weight * frac
                  + (cfg.all_pass_bonus if total and report.passed == total else 0.0)
                  - cfg.lint_weight * min(len(signals["lint_findings"]), cfg.lint_cap)
                  - cfg.forbidden_weight * len(signals["forbidden"])
                  - cfg.timeout_weight * (signals["timeouts"] / total if total else 0.0))
    return RewardBreakdown(reward, frac, report.passed, total, report.outcomes, report.status,
                           first_error, flags, False, exec_time, **signals)
