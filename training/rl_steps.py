"""What one RL update runs (training/trainer.py `grpo_update` drives it): the advantages it
weighs samples by, which samples can move the step, how many loss units each counts for and the
micro-batches they fall into, and each micro-batch's forward, loss (with the KL and replay
terms and the off-policy correction) and optimizer step. Apart from the driver so that the
step's maths reads in one place, without the engine's set-up and the checkpoint it publishes.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Sequence

import numpy as np
import torch

from rewards.advantages import advantages_for
from training import engine as eng
from training import memory
from training.batch import RLSample, make_batch, token_logprobs
from training.config import PolicyConfig, RLConfig
from training.episodes import policy_token_units
from training.lora import ADAPTERS_OFF, autocast, autocast_applies, reference_view
from training.losses import LOSSES, kl_penalty, sft_loss
from training.microbatch import MicroBatch, Plan, loss_units, plan_update
from training.offpolicy import LogprobGap, completion_values, truncated_is
from training.sft_steps import encode_pair


def with_advantages(samples: list[RLSample], rl: RLConfig) -> list[RLSample]:
    """The samples as the loss weighs them: with rl.algorithm='rloo' their advantages are
    recomputed from their rewards within each group; otherwise they are left as they came."""
    if rl.algorithm != "rloo":
        return samples
    bad = [i for i, s in enumerate(samples) if s.group_id is None]
    if bad:
        raise ValueError(f"rl.algorithm='rloo' recomputes advantages from RLSample.reward and "
                         f"RLSample.group_id; sample(s) {bad[:5]} have no group_id")
    adv = advantages_for("rloo", rl.scale_advantages, [s.reward for s in samples],
                         [str(s.group_id) for s in samples])
    return [dataclasses.replace(s, advantage=float(a)) for s, a in zip(samples, adv)]


def _per_token(part: list[RLSample], values, width: int, fill: float = 0.0) -> torch.Tensor:
    """[B, width] tensor with each sample's per-completion-token values at its target positions."""
    out = torch.full((len(part), width), fill)
    for row, (s, v) in enumerate(zip(part, values)):
        start = len(s.prompt_ids) - 1
        n = max(0, min(len(v), width - start))  # a prompt past max_len leaves nothing
        out[row, start:start + n] = torch.tensor(v[:n])
    return out


def moves(s: RLSample, rl: RLConfig) -> bool:
    """Whether running the sample can change the step. With advantage 0 on every token its
    surrogate and gradient are exactly 0; it still moves the step through the KL term, and
    through the replay term, which is added per micro-batch, so leaving it out would change
    how many micro-batches draw replay pairs."""
    if rl.kl_coef > 0 or rl.replay_coef > 0:
        return True
    return s.advantage != 0.0 or any(a != 0.0 for a in (s.token_advantages or ()))


# The normaliser of each rl.loss_aggregation, over ALL the iteration's samples with a completion
# (zero-advantage ones included, as in the papers each cites; dropping them would scale the step
# by the share of informative groups and leave them out of the KL term):
#   seq_mean      1/G per sample, G = every sample: GRPO (Shao et al. 2024, eq. 3) averages over
#                 all G outputs of a group, each over its own tokens;
#   token_mean    1 / (all completion tokens of the batch): DAPO (Yu et al. 2025, eq. 8);
#   seq_sum_norm  a constant (policy.max_len tokens) per sample, then 1/G: Dr.GRPO (Liu et al.
#                 2025), so neither the length nor the informative share rescales a sample.
# `losses.aggregate` applies it inside a micro-batch and `microbatch.plan_update` across
# micro-batches and processes (its weights use `total_units` over every counted sample).
def _units(s: RLSample, policy: PolicyConfig, rl: RLConfig) -> int:
    """What the loss averages over for this sample: 1 sequence, or its tokens for token_mean."""
    if s.completion_mask is None:
        return loss_units(len(s.prompt_ids), len(s.completion_ids), policy.max_len,
                          rl.loss_aggregation)
    return policy_token_units(s, policy.max_len, rl.loss_aggregation)


def _advantages(part: list[RLSample], rl: RLConfig, width: int) -> torch.Tensor:
    """The advantages the loss weighs the micro-batch by: per token ([B, width]) where a sample
    has per-token ones (a turn's credit, rl.turn_credit; a value model's), else one per sample
    ([B])."""
    if any(s.token_advantages for s in part):
        return _per_token(part, [s.token_advantages or [s.advantage] * len(s.completion_ids)
                                 for s in part], width)
    return torch.tensor([s.advantage for s in part], dtype=torch.float32)


def update_plan(live: list[RLSample], counted: list[RLSample], policy: PolicyConfig,
                rl: RLConfig, rng: random.Random) -> Plan:
    """The update's micro-batches, per epoch, for this process: each epoch in its own shuffled
    order of `live`. Sets up the process group first, since the plan splits over it."""
    orders, order = [], list(range(len(live)))
    for _ in range(rl.epochs if live else 0):
        rng.shuffle(order)
        orders.append(list(order))
    lengths = [min(len(s.prompt_ids) + len(s.completion_ids), policy.max_len) for s in live]
    units = [_units(s, policy, rl) for s in live]
    total_units = sum(_units(s, policy, rl) for s in counted)
    eng.setup_distributed()
    return plan_update(orders, lengths, units, rl.micro_batch_size, rl.micro_batch_tokens,
                       eng.world_size(), eng.rank(), total_units)


@dataclasses.dataclass
class RLUpdate:
    """One RL update's micro-batches: what each of them reads (the engine, the live samples,
    the reference, the starting log-probs) and the figures they add up for the metrics."""

    engine: object
    tok: object
    live: list[RLSample]
    policy: PolicyConfig
    rl: RLConfig
    temperature: float
    version: int
    reference: torch.nn.Module | str | None
    correct: bool  # off-policy samples: the ratio is taken to the starting weights' `prox`
    prox: dict[int, list[float]]  # the starting weights' log-probs, by live index
    replay: Sequence[tuple[str, str]]
    replay_rng: random.Random
    gap: LogprobGap = dataclasses.field(default_factory=LogprobGap)
    is_stats: dict[str, float] = dataclasses.field(
        default_factory=lambda: {"weight": 0.0, "capped": 0.0, "tokens": 0.0})
    stats: dict[str, list[float]] = dataclasses.field(
        default_factory=lambda: {"loss": [], "clip_frac": [], "kl": [], "replay_nll": []})
    n_tokens: int = 0

    def step(self, mb: MicroBatch, first_epoch: bool) -> None:
        """Forward, loss, backward and optimizer step of one micro-batch."""
        rl, engine, tok = self.rl, self.engine, self.tok
        part = [self.live[i] for i in mb.indices]
        b = make_batch([s.prompt_ids for s in part], [s.completion_ids for s in part],
                       tok.pad_token_id, self.policy.max_len, [s.completion_mask for s in part])
        b.to(engine.device)
        with autocast(rl.autocast, engine.device):
            logp = token_logprobs(engine, b, self.temperature, tok.banned_ids)
        old, is_weight = self._old_logprobs(mb, part, b, logp, first_epoch)
        adv = _advantages(part, rl, logp.shape[1])
        extra = {"dual_clip": rl.dual_clip} if rl.algorithm == "ppo" else {}
        loss, info = LOSSES[rl.algorithm](logp, old, adv.to(logp.device), b.loss_mask,
                                          rl.clip_eps, rl.loss_aggregation, rl.clip_eps_high,
                                          self.policy.max_len, **extra, is_weight=is_weight)
        if self.reference is not None:
            kl, kinfo = self._kl(b, logp)
            loss = loss + rl.kl_coef * kl
            info.update(kinfo)
        if rl.replay_coef > 0 and mb.weight:  # only the pairs drawn are tokenized
            nll = self._replay_nll()
            loss = loss + rl.replay_coef * nll
            self.stats["replay_nll"].append(float(nll.detach()))
        engine.backward(loss * mb.weight)
        engine.step()
        if mb.weight:
            self.n_tokens += int(b.attention_mask.sum())
            self.stats["loss"].append(float(loss.detach()))
            self.stats["clip_frac"].append(info["clip_frac"])
            if "kl" in info:
                self.stats["kl"].append(info["kl"])

    def _old_logprobs(self, mb: MicroBatch, part: list[RLSample], b, logp: torch.Tensor,
                      first_epoch: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The log-probs the loss's ratio is taken to, and the truncated importance weight of
        the sampler's log-probs to them (None when the samples are on-policy)."""
        old = _per_token(part, [s.old_logprobs for s in part], logp.shape[1]).to(logp.device)
        if first_epoch:  # the starting weights: the sampler's log-probs of its own samples
            on = [r for r, x in enumerate(part) if x.version in (None, self.version)]
            if on:
                self.gap.add(logp[on], old[on], b.loss_mask[on])
        if not self.correct:
            return old, None
        if first_epoch:  # no optimizer step before epoch 1: these are the starting weights
            for row, i in enumerate(mb.indices):
                self.prox.setdefault(i, completion_values(logp, row, part[row]))
        sampler, old = old, _per_token(part, [self.prox[i] for i in mb.indices],
                                       logp.shape[1]).to(logp.device)
        is_weight, counts = truncated_is(old, sampler, b.loss_mask, self.rl.off_policy_is_cap)
        if mb.weight:
            for k in self.is_stats:
                self.is_stats[k] += counts[k]
        return old, is_weight

    def _kl(self, b, logp: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The KL penalty of the micro-batch to the frozen reference, and its figures."""
        engine, rl = self.engine, self.rl
        with torch.no_grad(), reference_view(engine, self.reference), \
                autocast(rl.autocast, engine.device):
            ref_logp = token_logprobs(engine if self.reference == ADAPTERS_OFF else self.reference,
                                      b, self.temperature, self.tok.banned_ids)
        return kl_penalty(logp, ref_logp, b.loss_mask, rl.kl_estimator, rl.loss_aggregation,
                          self.policy.max_len)

    def _replay_nll(self) -> torch.Tensor:
        """The SFT loss of `rl.replay_per_step` reference pairs drawn at random."""
        tok, engine, rl = self.tok, self.engine, self.rl
        pick = [encode_pair(tok, *self.replay[self.replay_rng.randrange(len(self.replay))])
                for _ in range(rl.replay_per_step)]
        rb = make_batch([d[0] for d in pick], [d[1] for d in pick], tok.pad_token_id,
                        self.policy.max_len)
        rb.to(engine.device)
        with autocast(rl.autocast, engine.device):
            return sft_loss(token_logprobs(engine, rb), rb.loss_mask)

    def metrics(self, seconds: float, skipped: int, micro_steps: int, restored: bool,
                stale: list[int]) -> dict:
        """The update's `train/` figures, in the order its checkpoint's metadata lists them."""
        stats, engine = self.stats, self.engine
        out = {
            "train/loss": float(np.mean(stats["loss"])) if stats["loss"] else 0.0,
            "train/clip_frac": float(np.mean(stats["clip_frac"])) if stats["clip_frac"] else 0.0,
            "train/sequences": len(self.live), "train/skipped_zero_adv": skipped,
            "train/seconds": seconds,
            "train/tokens": self.n_tokens, "train/tokens_per_s": self.n_tokens / max(seconds, 1e-9),
            "train/micro_steps": micro_steps, "train/optimizer_restored": int(restored),
            "train/processes": eng.world_size(),
            "train/autocast_bf16": int(autocast_applies(self.rl.autocast, engine.device)),
            "train/lr": float(engine.optimizer.param_groups[0]["lr"]),
            **memory.rank_memory(engine)}
        if stats["kl"]:
            out["train/kl"] = float(np.mean(stats["kl"]))
        if stats["replay_nll"]:
            out["train/replay_nll"] = float(np.mean(stats["replay_nll"]))
        out.update(self.gap.metrics())
        if stale:
            out.update({"train/stale_samples": len(stale),
                        "train/staleness": self.version - min(stale)})
        if self.correct:
            n = max(self.is_stats["tokens"], 1.0)
            out.update({"train/is_weight_mean": self.is_stats["weight"] / n,
                        "train/is_weight_capped": self.is_stats["capped"] / n})
        return out
