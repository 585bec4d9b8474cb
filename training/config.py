"""The policy and its training: model shape, sampling, SFT warm start, RL update, DeepSpeed."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class PolicyConfig(BaseModel):
    """The default policy is a small GPT-2-shaped causal LM over bytes, built from a config."""

    model_config = ConfigDict(extra="forbid")

    n_layer: int = Field(4, ge=1, description="transformer blocks")
    n_embd: int = Field(192, ge=16, description="hidden size")
    n_head: int = Field(6, ge=1, description="attention heads (must divide n_embd)")
    max_len: int = Field(320, ge=32, description="longest prompt + completion, in tokens")
    seed: int = Field(0, description="initial weights")


class SamplingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group_size: int = Field(8, ge=2, description="G: completions sampled per task (GRPO group)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature of rollouts")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling mass")
    max_new_tokens: int = Field(48, ge=1, description="longest completion, in tokens")
    batch_size: int = Field(64, ge=1, description="sequences generated together")


class SFTConfig(BaseModel):
    """Supervised warm start on reference solutions of the training split."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(600, ge=0, description="optimizer steps (0: no warm start)")
    batch_size: int = Field(32, ge=1)
    lr: float = Field(2e-3, gt=0)
    warmup_steps: int = Field(50, ge=0)


class RLConfig(BaseModel):
    """GRPO (Shao et al. 2024): group-normalised advantages, PPO-clipped ratio (Schulman 2017)."""

    model_config = ConfigDict(extra="forbid")

    algorithm: Literal["grpo"] = "grpo"
    lr: float = Field(3e-4, gt=0, description="learning rate of the RL update")
    epochs: int = Field(2, ge=1, description="passes over each iteration's rollouts")
    micro_batch_size: int = Field(32, ge=1, description="sequences per forward/backward")
    clip_eps: float = Field(0.2, gt=0, description="PPO clip range of the importance ratio")
    grad_clip: float = Field(1.0, gt=0, description="max global grad norm")
    scale_advantages: bool = Field(True, description="divide by group std (GRPO); False: Dr.GRPO")
    zero_stage: Literal[0, 1, 2, 3] = Field(0, description="DeepSpeed ZeRO stage")
    dtype: Literal["fp32", "bf16"] = Field("fp32", description="training precision")
