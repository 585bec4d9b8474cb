"""Token batches for training: prompt + completion, right-padded, with a mask over the completion.

A multi-turn episode's completion holds the policy's actions *and* the environment's
observations between them; its `completion_mask` (1 = policy token, 0 = environment token, see
training/episodes.py) keeps the environment's tokens out of every loss."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class RLSample:
    """One rollout as the update sees it."""

    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]  # [T] sampling log-probs of completion_ids
    advantage: float
    reward: float = math.nan  # needed by rl.algorithm="rloo" (advantages recomputed)
    group_id: str | int | None = None  # completions of one prompt share it (rloo)
    token_advantages: list[float] | None = None  # [T] per-token advantages (rl.algorithm="ppo")
    completion_mask: list[int] | None = None  # [T] 1 = policy token, 0 = environment token
    # (a multi-turn episode's observations; training/episodes.py); None: all policy tokens
    version: int | None = None  # the policy version that sampled it; None: the update's own
    # old_logprobs came from another engine (vLLM): other kernels, maybe another precision, so
    # the update takes its ratio against its own starting log-probs and weights each token by
    # pi_start/pi_sampler, truncated (as for an older version's samples; verl's TIS)
    engine_sampled: bool = False


@dataclass
class TokenBatch:
    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    loss_mask: torch.Tensor  # [B, T-1] 1 where target token t+1 is a completion token
    targets: torch.Tensor  # [B, T-1] input_ids shifted left

    def to(self, device) -> "TokenBatch":
        """Move every tensor to `device` (in place; returns self)."""
        for name in ("input_ids", "attention_mask", "loss_mask", "targets"):
            setattr(self, name, getattr(self, name).to(device))
        return self


def make_batch(prompts: list[list[int]], completions: list[list[int]], pad: int,
               max_len: int | None = None,
               completion_masks: list[list[int] | None] | None = None) -> TokenBatch:
    """`completion_masks[i]` (same length as `completions[i]`; None: all ones) says which
    completion tokens the loss covers."""
    seqs, masks = [], []
    cms = completion_masks if completion_masks is not None else [None] * len(completions)
    for i, (p, c, cm) in enumerate(zip(prompts, completions, cms)):
        if cm is not None and len(cm) != len(c):
            raise ValueError(f"completion_masks[{i}] has {len(cm)} entries for {len(c)} "
                             "completion tokens; expected one per token")
        s = p + c
        m = [0] * len(p) + ([1] * len(c) if cm is None else [int(bool(v)) for v in cm])
        if max_len is not None and len(s) > max_len:
            s, m = s[:max_len], m[:max_len]
        seqs.append(s)
        masks.append(m)
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    lm = torch.zeros((len(seqs), width), dtype=torch.float32)
    for i, (s, m) in enumerate(zip(seqs, masks)):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
        lm[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
    return TokenBatch(ids, attn, lm[:, 1:], ids[:, 1:])


def token_logprobs(model, batch: TokenBatch, temperature: float = 1.0,
                   banned: list[int] | tuple[int, ...] = ()) -> torch.Tensor:
    """log p(target_t | prefix) for every position: [B, T-1].

    `banned`: ids the sampler never draws (its distribution renormalises without them); pass the
    same ids here so the RL importance ratio compares the same distributions (ratio 1 on-policy).
    """
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logits = logits[:, :-1].float() / temperature
    if banned:
        logits[..., list(banned)] = float("-inf")
    lp = torch.gather(F.log_softmax(logits, -1), -1, batch.targets.unsqueeze(-1)).squeeze(-1)
    if banned:  # a banned target (PAD after a sequence ends) has -inf: keep it out of the sums
        lp = lp.masked_fill(batch.loss_mask == 0, 0.0)
    return lp
