"""RL and SFT losses as small registered pure functions over per-token tensors.

Shapes: logp, old_logp, ref_logp, mask are [B, T] (T = positions of the shifted targets);
sequence advantages are [B], token advantages [B, T]. Each loss returns (scalar, info dict).
"""
from __future__ import annotations

from typing import Callable, Literal

import torch

Aggregation = Literal["seq_mean", "token_mean", "seq_sum_norm"]


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: Aggregation,
              norm_tokens: float | None = None) -> torch.Tensor:
    """seq_mean: mean over each sequence's tokens, then over sequences (GRPO paper);
    token_mean: one mean over all tokens of the batch (DAPO), so long answers weigh more;
    seq_sum_norm: each sequence's sum over the constant `norm_tokens`, then the mean over
    sequences (Dr.GRPO), which removes GRPO's length bias without DAPO's batch coupling.
    This is the normaliser inside one micro-batch; across the step it covers every sample,
    zero-advantage ones included (training/rl_steps.py, the comment above `_units`)."""
    if how == "token_mean":
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    if how == "seq_sum_norm":
        if not norm_tokens or norm_tokens <= 0:
            raise ValueError(f"seq_sum_norm needs norm_tokens > 0, got {norm_tokens!r}")
        return ((per_token * mask).sum(-1) / norm_tokens).mean()
    if how != "seq_mean":
        raise ValueError(f"aggregation {how!r}: expected seq_mean, token_mean or seq_sum_norm")
    per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return per_seq.mean()


def _clipped_surrogate(logp, old_logp, adv, mask, clip_eps, clip_eps_high, dual_clip):
    """Per-token -min(r A, clip(r, 1-e_lo, 1+e_hi) A), optionally bounded by -c A for A < 0."""
    high = clip_eps if clip_eps_high is None else clip_eps_high
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    if dual_clip is not None:
        per_token = torch.where(adv < 0, torch.minimum(per_token, -dual_clip * adv), per_token)
    with torch.no_grad():
        n = mask.sum().clamp(min=1.0)
        out = ((ratio < 1.0 - clip_eps) | (ratio > 1.0 + high)).float()
        clip_frac = (out * mask).sum() / n
    return per_token, clip_frac


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, clip_eps: float = 0.2, aggregation: Aggregation = "seq_mean",
              clip_eps_high: float | None = None,
              norm_tokens: float | None = None,
              is_weight: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """PPO-clipped surrogate with per-sequence advantages.

    logp, old_logp, mask: [B, T]; advantages: [B], or [B, T] per token (a turn's credit).
    Loss = -min(r A, clip(r, 1-e, 1+e) A).
    `is_weight` [B, T] (no gradient): each token's surrogate times it, the decoupled PPO
    objective of samples from an older policy (AReaL, Fu et al. 2025), where `old_logp` is then
    the update's starting policy and `is_weight` pi_start / pi_sampler, truncated; None: 1.
    """
    adv = advantages if advantages.dim() == 2 else advantages[:, None]
    if clip_eps_high is None:  # the first loop's exact arithmetic (symmetric clip)
        ratio = torch.exp(logp - old_logp)
        unclipped = ratio * adv
        clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * adv
        per_token = -torch.minimum(unclipped, clipped)
        if is_weight is not None:
            per_token = per_token * is_weight
        loss = aggregate(per_token, mask, aggregation, norm_tokens)
        with torch.no_grad():
            n = mask.sum().clamp(min=1.0)
            clip_frac = (((ratio - 1.0).abs() > clip_eps).float() * mask).sum() / n
        return loss, {"clip_frac": float(clip_frac)}
    per_token, clip_frac = _clipped_surrogate(logp, old_logp, adv, mask, clip_eps,
                                              clip_eps_high, None)
    if is_weight is not None:
        per_token = per_token * is_weight
    return aggregate(per_token, mask, aggregation, norm_tokens), {"clip_frac": float(clip_frac)}


def ppo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
             mask: torch.Tensor, clip_eps: float = 0.2, aggregation: Aggregation = "seq_mean",
             clip_eps_high: float | None = None, norm_tokens: float | None = None,
             dual_clip: float | None = None,
             is_weight: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """PPO clipped surrogate (Schulman 2017) with the importance ratio against the rollout
    log-probs. advantages: [B, T] per token, or [B] broadcast over the sequence. `dual_clip`
    (c > 1) bounds the loss of negative-advantage tokens at -c A (Ye et al. 2020).
    `is_weight`: as in `grpo_loss`."""
    adv = advantages if advantages.dim() == 2 else advantages[:, None]
    per_token, clip_frac = _clipped_surrogate(logp, old_logp, adv, mask, clip_eps,
                                              clip_eps_high, dual_clip)
    if is_weight is not None:
        per_token = per_token * is_weight
    return aggregate(per_token, mask, aggregation, norm_tokens), {"clip_frac": float(clip_frac)}


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor,
               estimator: Literal["k1", "k2", "k3"] = "k3", aggregation: Aggregation = "seq_mean",
               norm_tokens: float | None = None) -> tuple[torch.Tensor, dict]:
    """Estimate of KL(pi || pi_ref) from tokens sampled from pi (Schulman 2020, "Approximating
    KL divergence"): with log r = ref_logp - logp, k1 = -log r, k2 = (log r)^2 / 2,
    k3 = exp(log r) - 1 - log r. The reference is frozen: no gradient flows into ref_logp."""
    log_r = ref_logp.detach() - logp
    if estimator == "k1":
        per_token = -log_r
    elif estimator == "k2":
        per_token = 0.5 * log_r ** 2
    elif estimator == "k3":
        per_token = torch.exp(log_r) - 1.0 - log_r
    else:
        raise ValueError(f"kl estimator {estimator!r}: expected k1, k2 or k3")
    value = aggregate(per_token, mask, aggregation, norm_tokens)
    return value, {"kl": float(value.detach())}


def sft_loss(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of the completion tokens, averaged over them."""
    return -(logp * mask).sum() / mask.sum().clamp(min=1.0)


LOSSES: dict[str, Callable] = {"grpo": grpo_loss, "ppo": ppo_loss, "rloo": grpo_loss,
                               "kl": kl_penalty, "sft": sft_loss}
