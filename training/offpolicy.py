"""The update's side of one-step off-policy samples (rl.overlap): the starting weights'
log-probs of each sample (pi_start, the proximal policy of AReaL's decoupled PPO objective, Fu
et al. 2025) and the truncated importance weight pi_start / pi_sampler per token."""
from __future__ import annotations

import torch

from training.batch import RLSample, make_batch, token_logprobs
from training.config import PolicyConfig, RLConfig
from training.lora import autocast


def completion_values(logp: torch.Tensor, row: int, s: RLSample) -> list[float]:
    """Row `row` of a [B, T] log-prob tensor at `s`'s completion tokens (the inverse of
    training.rl_steps._per_token)."""
    start = len(s.prompt_ids) - 1
    n = max(0, min(len(s.completion_ids), logp.shape[1] - start))
    return logp[row, start:start + n].detach().float().tolist()


def truncated_is(start_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
                 cap: float) -> tuple[torch.Tensor, dict]:
    """Per-token pi_start / pi_sampler, at most `cap` (no gradient), and its sums over the
    mask (for the metrics)."""
    with torch.no_grad():
        raw = torch.exp(start_logp - sampler_logp)
        w = raw.clamp(max=cap) * mask
        counts = {"weight": float(w.sum()), "capped": float(((raw > cap).float() * mask).sum()),
                  "tokens": float(mask.sum())}
    return w, counts


def starting_logprobs(engine, live: list[RLSample], plan, tok, policy: PolicyConfig,
                       rl: RLConfig, temperature: float) -> dict[int, list[float]]:
    """Log-probs under the update's starting weights of the samples this rank trains on after
    epoch 1 but not in it (with several ranks an epoch's shuffle moves samples between them);
    those of epoch 1 come free from its own forward passes, taken before the first optimizer
    step."""
    first = {i for mb in plan.steps[0] for i in mb.indices} if plan.steps else set()
    need = sorted({i for epoch in plan.steps[1:] for mb in epoch for i in mb.indices} - first)
    out: dict[int, list[float]] = {}
    for k in range(0, len(need), rl.micro_batch_size):
        idx = need[k:k + rl.micro_batch_size]
        part = [live[i] for i in idx]
        b = make_batch([s.prompt_ids for s in part], [s.completion_ids for s in part],
                       tok.pad_token_id, policy.max_len, [s.completion_mask for s in part])
        b.to(engine.device)
        with torch.no_grad(), autocast(rl.autocast, engine.device):
            logp = token_logprobs(engine, b, temperature, tok.banned_ids)
        for row, i in enumerate(idx):
            out[i] = completion_values(logp, row, part[row])
    return out


GAP_OVER = 0.1  # |log-prob gap| in nats above which a token counts in `train/logprob_gap_over`


class LogprobGap:
    """The gap between the sampler's log-probs and the trainer's on the same tokens, under the
    weights that sampled them (the update's starting weights, on-policy samples only): mean and
    max |delta| over policy tokens, the share of tokens over GAP_OVER nats, and the mean
    |p_trainer - p_sampler| (verl's rollout_probs_diff_mean). Near 0 when the same code in the
    same precision samples and trains; an engine in another precision or with other kernels
    shows here first, and a growing gap biases every update."""

    def __init__(self) -> None:
        self.sum = self.prob_sum = self.over = self.tokens = 0.0
        self.max = 0.0

    def add(self, trainer_logp: torch.Tensor, sampler_logp: torch.Tensor,
            mask: torch.Tensor) -> None:
        with torch.no_grad():
            m = mask.bool()
            if not bool(m.any()):
                return
            t, s = trainer_logp.detach().float()[m], sampler_logp.float()[m]
            d = (t - s).abs()
            self.sum += float(d.sum())
            self.max = max(self.max, float(d.max()))
            self.over += float((d > GAP_OVER).sum())
            self.prob_sum += float((t.exp() - s.exp()).abs().sum())
            self.tokens += float(m.sum())

    def metrics(self) -> dict:
        if not self.tokens:
            return {}
        return {"train/logprob_gap_mean": self.sum / self.tokens,
                "train/logprob_gap_max": self.max,
                "train/logprob_gap_over": self.over / self.tokens,
                "train/prob_gap_mean": self.prob_sum / self.tokens,
                "train/logprob_gap_tokens": int(self.tokens)}
