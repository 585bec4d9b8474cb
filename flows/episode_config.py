"""The `episodes` section of the run config: multi-turn agent episodes instead of one-shot
completions (sandbox/EPISODES.md says how to run them)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class EpisodeConfig(BaseModel):
    """Off by default: the single-turn loop is unchanged unless `enabled` is true."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="run G multi-turn episodes per task (the policy "
                          "writes, runs the visible tests, reads the output, fixes, submits) "
                          "instead of G one-shot completions; same group size, GRPO over whole "
                          "episodes with the environment's tokens masked out of the loss")
    max_turns: int = Field(3, ge=1, description="policy turns per episode; at the last one the "
                           "workspace is graded whatever the policy did")
    time_budget_s: float = Field(30.0, gt=0, description="seconds of sandbox time per episode "
                                 "(all its commands together); each command's limit is cut to "
                                 "what is left, and the episode ends when it is spent")
    action_tokens: int = Field(160, ge=8, description="longest action (one turn of the policy), "
                               "in tokens")
    obs_tokens: int = Field(256, ge=32, description="token budget of one observation in the "
                            "policy's context: a longer one keeps whole lines, the ones that say "
                            "what happened (FAIL lines, errors, the verdict, the turn counter) "
                            "before PASS lines and tracebacks, with markers where lines were cut "
                            "(training/episodes.py fit_observation)")
    obs_bytes: int = Field(4096, ge=256, description="hard cap of the environment's observation "
                           "text before the token budget applies")
    intro: Literal["prompt", "brief", "full"] = Field(
        "prompt", description="the first observation: prompt = the task prompt only (for a "
        "small policy warm-started on the action format); brief = instructions + prompt; full = "
        "instructions + prompt + the visible examples (sandbox/episode.py)")
    shaping: Literal["none", "visible_progress"] = Field(
        "none", description="per-turn shaping added to the final reward: visible_progress = "
        "shaping_coef x (best visible pass fraction reached by any turn's <run_tests/>), the sum "
        "of potential-based per-turn gains (Ng et al. 1999); none: the hidden-test grade alone")
    shaping_coef: float = Field(0.1, ge=0, description="weight of the shaping term")
    sft_demos: bool = Field(True, description="warm start on action-format demonstrations "
                            "instead of bare reference bodies: multi-turn transcripts through the "
                            "real environment for the edge families (naive attempt, real test "
                            "output, fix, submit), write + submit for every other family")
    demo_first_try_share: float = Field(
        0.25, ge=0, le=1, description="share of edge-family demonstrations whose first attempt "
        "is already right (the visible tests pass and turn 2 only submits), so that the policy "
        "must read the observation to choose between fixing and submitting")

    @model_validator(mode="after")
    def _cross_checks(self) -> "EpisodeConfig":
        if self.shaping != "none" and self.shaping_coef == 0:
            raise ValueError(f"episodes.shaping={self.shaping!r} with shaping_coef=0 does "
                             "nothing; set shaping='none' or a positive coefficient")
        return self
