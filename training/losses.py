"""RL and SFT losses as small registered pure functions over per-token tensors."""
from __future__ import annotations

from typing import Callable, Literal

import torch

Aggregation = Literal["seq_mean", "token_mean"]


def _aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: Aggregation) -> torch.Tensor:
    """seq_mean: mean over each sequence's tokens, then over sequences (GRPO paper);
    token_mean: one mean over all tokens of the batch (DAPO), so long answers weigh more."""
    if how == "token_mean":
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return per_seq.mean()


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, clip_eps: float = 0.2,
              aggregation: Aggregation = "seq_mean") -> tuple[torch.Tensor, dict]:
    """PPO-clipped surrogate with per-sequence advantages.

    logp, old_logp, mask: [B, T]; advantages: [B]. Loss = -min(r A, clip(r, 1-e, 1+e) A).
    """
    ratio = torch.exp(logp - old_logp)
    adv = advantages[:, None]
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * adv
    per_token = -torch.minimum(unclipped, clipped)
    loss = _aggregate(per_token, mask, aggregation)
    with torch.no_grad():
        n = mask.sum().clamp(min=1.0)
        clip_frac = (((ratio - 1.0).abs() > clip_eps).float() * mask).sum() / n
    return loss, {"clip_frac": float(clip_frac)}


def sft_loss(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of the completion tokens, averaged over them."""
    return -(logp * mask).sum() / mask.sum().clamp(min=1.0)


LOSSES: dict[str, Callable] = {"grpo": grpo_loss, "sft": sft_loss}
