"""The policy's updates: SFT warm start and the RL step (GRPO, PPO-clip, RLOO; optional KL to a
frozen reference and replay of reference solutions), both through the DeepSpeed engine, each
reading one checkpoint version and publishing the next. Every process of a `deepspeed` launch
runs the same function; rank 0 writes.
"""
from __future__ import annotations

import dataclasses
import math
import random
import shutil
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from rewards.advantages import advantages_for
from training import checkpoints, memory, threads
from training import engine as eng
from training.batch import RLSample, make_batch, token_logprobs
from training.config import PolicyConfig, RLConfig, SFTConfig
from training.episodes import encode_transcript, policy_token_units
from training.lora import ADAPTERS_OFF, autocast, prepare_for_training, reference_view
from training.losses import LOSSES, kl_penalty, sft_loss
from training.microbatch import MicroBatch, Plan, loss_units, plan_update
from training.offpolicy import LogprobGap, completion_values, starting_logprobs, truncated_is
from training.policy import build_policy, load_policy, save_policy, tokenizer_of
from training.progress import Progress


def _lr_at(step: int, total: int, lr: float, warmup: int) -> float:
    """Linear warm-up, then linear decay to 10% (nanoGPT's get_lr, linear)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return lr * (1.0 - 0.9 * frac)


class WarmupLinearDecay(torch.optim.lr_scheduler.LRScheduler):
    """`_lr_at` as a scheduler, so DeepSpeed steps it and saves it with the engine state."""

    def __init__(self, optimizer, total: int, peak: float, warmup: int):
        self.total, self.peak, self.warmup = total, peak, warmup
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        # After the last step the lr stays at the last step's value: the RL update inherits it
        # (rl.lr_schedule="inherit"), as it did when the loop set the lr by hand before each step.
        step = min(self.last_epoch, self.total - 1)
        lr = self.peak if step < 0 else _lr_at(step, self.total, self.peak, self.warmup)
        return [lr for _ in self.optimizer.param_groups]


class WarmupHoldDecay(torch.optim.lr_scheduler.LRScheduler):
    """The schedule of a warm start trained until a criterion (`sft.until_pass`): linear
    warm-up, the peak lr held until `decay_from` is set (the criterion met), then linear decay
    to 10% over `decay` steps. `decay_from` is scheduler state, so it is saved and restored with
    the engine's (`sft.save_every`)."""

    def __init__(self, optimizer, peak: float, warmup: int, decay: int):
        self.peak, self.warmup, self.decay = peak, warmup, decay
        self.decay_from: int | None = None
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        step = max(0, self.last_epoch)
        if step < self.warmup:
            lr = self.peak * (step + 1) / self.warmup
        elif self.decay_from is None or step < self.decay_from:
            lr = self.peak
        else:
            lr = self.peak * (1.0 - 0.9 * min(1.0, (step - self.decay_from) / self.decay))
        return [lr for _ in self.optimizer.param_groups]


def _engine_for(model, rl: RLConfig, lr: float, micro: int, accum: int, resume_from: Path | None,
                scheduler=None) -> tuple[object, bool]:
    """The engine, with the optimizer state of `resume_from` when it can be loaded here."""
    engine = eng.make_engine(model, rl, lr, micro, accum, scheduler)
    restored = False
    if resume_from is not None and (resume_from / "engine").is_dir():
        if eng.state_compatible(checkpoints.read_meta(resume_from).get("engine"), rl):
            eng.load_state(engine, str(resume_from / "engine"), "state")
            restored = True
    return engine, restored


def _publish(engine, run_dir: str, version: int, meta: dict) -> Path:
    """All ranks: gather (ZeRO-3) and save the engine state; rank 0 writes the model and renames."""
    stage = eng.broadcast(str(checkpoints.staging_dir(run_dir, version)) if eng.rank() == 0 else None)
    state = eng.full_state_dict(engine)
    if eng.rank() == 0:
        save_policy(engine.module, str(Path(stage) / "model"), state_dict=state)
    eng.save_state(engine, str(Path(stage) / "engine"), "state")
    eng.barrier()
    final = checkpoints.checkpoint_dir(run_dir, version)
    if eng.rank() == 0:
        checkpoints.publish(Path(stage), final, meta)
    eng.barrier()
    return final


def _rng_state(rng: random.Random) -> dict:
    return {"python": rng.getstate(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_state(rng: random.Random, state: dict) -> None:
    rng.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def sft_warm_start(run_dir: str, prompts: list[str], references: list[str], policy: PolicyConfig,
                   sft: SFTConfig, rl: RLConfig, seed: int, stop_after: int | None = None,
                   demos: list | None = None,
                   probe: Callable[[torch.nn.Module], float] | None = None,
                   encoded: list | None = None) -> dict:
    """Train a fresh policy on (prompt, reference) pairs; publish it as version 0.

    `demos`: transcripts `(prompt, [(text, by_policy), ...])` (training/episodes.py), trained
    on alongside the pairs with the loss over the policy's segments only. `encoded`:
    demonstrations already as tokens `(prompt_ids, completion_ids, completion_mask)` (a chat
    template's episodes, appended turn by turn as RL's are: flows/warm_start.py `tool_demos`),
    the loss where the mask is 1.

    With `sft.save_every`, the engine state (weights, optimizer, scheduler, RNG) is saved under
    `checkpoints/sft-progress/` and a restarted warm start continues from it with the same next
    step. `stop_after=N` stops after step N without publishing (a deliberate interruption).

    With `sft.until_pass`, `probe(model)` (the greedy pass rate of the probe tasks, run on rank
    0 every `sft.probe_every` steps) decides when the decay starts (`WarmupHoldDecay`): the warm
    start ends past the point where the model has learnt the task format, wherever on a given
    machine that point falls, instead of at a step count tuned on one machine."""
    until = sft.until_pass is not None
    if not prompts and not demos and not encoded and (sft.steps or until):  # 0 steps publish the model as it is
        raise ValueError(f"SFT warm start of {sft.steps} steps needs at least one task with a "
                         "reference solution (none of the sources has one; sft.steps=0 starts "
                         "from the model as it is)")
    if until and probe is None:
        raise ValueError("sft.until_pass needs a probe (a single-turn source with references)")
    torch.manual_seed(seed)
    model = prepare_for_training(build_policy(policy), policy)
    tok = tokenizer_of(model)
    engine, _ = _engine_for(model, rl, sft.lr, sft.batch_size, 1, None, _sft_schedule(sft))
    if sft.batch_size < eng.world_size():
        raise ValueError(f"sft.batch_size={sft.batch_size} must be >= the process count "
                         f"{eng.world_size()}")
    rng = random.Random(seed)
    data = _sft_examples(tok, prompts, references, demos or (), encoded or ())
    progress = checkpoints.sft_progress_dir(run_dir)
    first = _resume_sft(engine, progress, rng) if sft.save_every else 0
    t0 = time.perf_counter()
    run = _SFTRun(engine, tok, data, rng, policy, sft, rl, probe, progress,
                  engine.lr_scheduler if until else None)
    step = run.train(first, sft.steps if stop_after is None else stop_after)
    if step < run.end():
        return {"sft/stopped_at": step, "sft/resumed_from": first}
    metrics = {"sft/steps": step,
               "sft/final_loss": float(np.mean(run.losses[-20:])) if run.losses else math.nan,
               "sft/seconds": time.perf_counter() - t0, "sft/examples": len(data)}
    metrics.update(run.probe_metrics())
    if first:
        metrics["sft/resumed_from"] = first
    _publish(engine, run_dir, 0, {"version": 0, "kind": "sft", **metrics,
                                  "engine": eng.engine_facts(rl), "policy": policy.model_dump(),
                                  "sft": sft.model_dump()})
    if eng.rank() == 0:
        shutil.rmtree(progress, ignore_errors=True)
    return metrics


def _sft_schedule(sft: SFTConfig):
    """The warm start's learning-rate schedule: a hold until the probe's criterion
    (`sft.until_pass`), else a linear decay over exactly `sft.steps`."""
    if sft.until_pass is not None:
        return lambda opt: WarmupHoldDecay(opt, sft.lr, sft.warmup_steps, sft.decay_steps)
    return lambda opt: WarmupLinearDecay(opt, sft.steps, sft.lr, sft.warmup_steps)


def _sft_examples(tok, prompts, references, demos, encoded) -> list[tuple]:
    """Every warm-start example as (prompt ids, completion ids, completion mask or None)."""
    data = [(*_encode_pair(tok, p, r), None) for p, r in zip(prompts, references)]
    data += [encode_transcript(tok, p, segs) for p, segs in demos]
    return data + [(list(p), list(c), list(m)) for p, c, m in encoded]


def _resume_sft(engine, folder: Path, rng: random.Random) -> int:
    """The step a restarted warm start continues from, the engine's and `rng`'s state restored
    from `folder` (0, and nothing restored, when nothing was saved there)."""
    if not (folder / "latest").is_file():
        return 0
    client = eng.load_state(engine, str(folder), None, optimizer=True, scheduler=True)
    _set_rng_state(rng, client["rng"])
    return int(client["step"])


@dataclasses.dataclass
class _SFTRun:
    """The steps of one warm start: its examples, their draw, and with `sft.until_pass` the
    schedule whose decay the probe starts (`sched`, None otherwise)."""

    engine: object
    tok: object
    data: list  # (prompt ids, completion ids, completion mask or None)
    rng: random.Random
    policy: PolicyConfig
    sft: SFTConfig
    rl: RLConfig
    probe: Callable[[torch.nn.Module], float] | None
    progress: Path  # where the resumable state is saved (`sft.save_every`)
    sched: WarmupHoldDecay | None
    losses: list[float] = dataclasses.field(default_factory=list)
    probes: list[tuple[int, float]] = dataclasses.field(default_factory=list)  # (step, pass)

    def end(self) -> int:
        """The step the warm start stops at: `sft.steps`, or `sft.decay_steps` past the step
        the decay started from."""
        sched = self.sched
        return self.sft.steps if sched is None or sched.decay_from is None else \
            sched.decay_from + self.sft.decay_steps

    def train(self, first: int, stop_after: int) -> int:
        """Steps from `first` until the end or `stop_after`; the step reached."""
        sft, rank = self.sft, eng.rank()
        with Progress("sft warm start", self.end(), "steps", start=first,
                      enabled=rank == 0) as shown:
            step = first
            while step < min(self.end(), stop_after):
                if step % 25 == 0:  # before a probe, whose rollouts would read as a neighbour
                    threads.retune()
                batch = [self.data[self.rng.randrange(len(self.data))]
                         for _ in range(sft.batch_size)]
                self.losses.append(self.step(batch))
                shown.set(loss=float(np.mean(self.losses[-20:])))  # smoothed as sft/final_loss is
                step += 1
                shown.update(step)
                if self.sched is not None and self.sched.decay_from is None:
                    self.decide_decay(step, shown)
                if sft.save_every and step % sft.save_every == 0 and step < self.end():
                    _save_progress(self.engine, self.progress, step, self.rng)
        return step

    def step(self, batch: list) -> float:
        """One optimizer step on `batch`, of which this process takes its share; the loss."""
        engine, tok, policy, rl = self.engine, self.tok, self.policy, self.rl
        world, rank = eng.world_size(), eng.rank()
        mine = batch[rank::world]
        b = make_batch([d[0] for d in mine], [d[1] for d in mine], tok.pad_token_id,
                       policy.max_len, [d[2] for d in mine])
        b.to(engine.device)
        with autocast(rl.autocast, engine.device):
            loss = sft_loss(token_logprobs(engine, b), b.loss_mask)
        if world > 1:  # token-weighted so the step is the mean over the whole batch's tokens
            full = make_batch([d[0] for d in batch], [d[1] for d in batch], tok.pad_token_id,
                              policy.max_len, [d[2] for d in batch])
            loss = loss * (b.loss_mask.sum() / full.loss_mask.sum().clamp(min=1.0) * world)
        engine.backward(loss)
        engine.step()
        return float(loss.detach())

    def decide_decay(self, step: int, shown: Progress) -> None:
        """`sft.until_pass`: the decay starts at the first probe that passes, or in time to end
        within `sft.steps` when none does."""
        sft, sched = self.sft, self.sched
        if step % sft.probe_every == 0:
            passed = eng.broadcast(self.probe(self.engine.module) if eng.rank() == 0 else None)
            self.probes.append((step, passed))
            shown.set(probe=f"{passed:.2f}")
            if passed >= sft.until_pass:
                sched.decay_from = step
        if sched.decay_from is None and step >= sft.steps - sft.decay_steps:
            sched.decay_from = step  # the criterion was not met: decay within `steps`
        shown.total = self.end()

    def probe_metrics(self) -> dict:
        """With `sft.until_pass`: the final probe and when the criterion was met (runs the
        probe once more, on rank 0)."""
        if self.sched is None:
            return {}
        final = eng.broadcast(self.probe(self.engine.module) if eng.rank() == 0 else None)
        met = [s for s, p in self.probes if p >= self.sft.until_pass]
        return {"sft/probe_pass": final, "sft/decay_from": self.sched.decay_from,
                "sft/criterion_met_at": met[0] if met else math.nan,
                "sft/probes": len(self.probes)}


def _encode_pair(tok, prompt: str, reference: str) -> tuple[list[int], list[int]]:
    """Token ids of a (prompt, reference) pair as the SFT loss reads them: the reference ends
    with EOS."""
    return tok.encode_prompt(prompt), tok.encode(reference, bos=False) + [tok.eos_token_id]


def _save_progress(engine, folder: Path, step: int, rng: random.Random) -> None:
    tag = f"step{step:07d}"
    eng.save_state(engine, str(folder), tag, {"step": step, "rng": _rng_state(rng)})
    eng.barrier()
    if eng.rank() == 0:  # keep only the newest resumable state
        for old in folder.glob("step*"):
            if old.name != tag:
                shutil.rmtree(old, ignore_errors=True)


def _with_advantages(samples: list[RLSample], rl: RLConfig) -> list[RLSample]:
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


def _moves(s: RLSample, rl: RLConfig) -> bool:
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


def _plan(live: list[RLSample], counted: list[RLSample], policy: PolicyConfig, rl: RLConfig,
          rng: random.Random) -> Plan:
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
class _Update:
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
        pick = [_encode_pair(tok, *self.replay[self.replay_rng.randrange(len(self.replay))])
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


def grpo_update(run_dir: str, version: int, samples: list[RLSample], policy: PolicyConfig,
                rl: RLConfig, temperature: float, seed: int,
                replay: Sequence[tuple[str, str]] = ()) -> dict:
    """One RL iteration (rl.algorithm: grpo, ppo or rloo): read version `version`, publish
    `version + 1`.

    Every sample with a completion counts in the loss's normaliser and in the KL term, whatever
    its advantage (the comment above `_units`); one whose loss is identically zero is counted
    but not run. When nothing is left to run, the next version is a copy of this one.
    `replay`: (prompt, reference) pairs; with `rl.replay_coef > 0`, each micro-batch adds that
    weight times the SFT loss of `rl.replay_per_step` of them, drawn at random.
    """
    if rl.replay_coef > 0 and not replay:
        raise ValueError(f"rl.replay_coef={rl.replay_coef} needs reference solutions to replay; "
                         "none was given (no training task with a reference in the mix?)")
    src = checkpoints.checkpoint_dir(run_dir, version)
    memory.reset_peak()  # this update's peak, also in a rank that stays up between updates
    torch.manual_seed(seed * 100003 + version)
    samples = _with_advantages(samples, rl)
    counted = [s for s in samples if s.completion_ids]  # an empty completion has no token to train
    live = [s for s in counted if _moves(s, rl)]
    model = prepare_for_training(load_policy(str(src / "model")), policy)
    tok = tokenizer_of(model)
    plan = _plan(live, counted, policy, rl, random.Random(seed + version))
    engine, restored = _engine_for(model, rl, rl.lr, rl.micro_batch_size, plan.accum, src)
    if rl.lr_schedule == "constant":
        for group in engine.optimizer.param_groups:
            group["lr"] = rl.lr
    reference = _reference(run_dir, rl, engine.device, policy)
    # Samples of an older version than the one updated (rl.overlap): the decoupled objective
    # needs each token's log-prob under the starting weights (`prox`, by live index).
    stale = [s.version for s in live if s.version is not None and s.version != version]
    correct = bool(stale) or any(s.engine_sampled for s in live)
    prox = starting_logprobs(engine, live, plan, tok, policy, rl, temperature) if correct else {}
    update = _Update(engine, tok, live, policy, rl, temperature, version, reference, correct,
                     prox, replay, random.Random(f"replay:{seed}:{version}:{eng.rank()}"))
    t0 = time.perf_counter()
    for e, epoch in enumerate(plan.steps):
        threads.retune()  # an update can be minutes long: follow a neighbour that came or went
        shown = Progress(f"rl update v{version} -> v{version + 1}, epoch {e + 1}/{len(plan.steps)}",
                         len(epoch), "micro-batches", enabled=eng.rank() == 0)
        for mb in shown.over(epoch):
            update.step(mb, first_epoch=e == 0)
            if mb.weight:
                shown.set(loss=float(np.mean(update.stats["loss"][-20:])))
    metrics = update.metrics(time.perf_counter() - t0, len(counted) - len(live),
                             plan.accum * len(plan.steps), restored, stale)
    _publish(engine, run_dir, version + 1, {"version": version + 1, "kind": rl.algorithm,
                                            **metrics, "engine": eng.engine_facts(rl),
                                            "rl": rl.model_dump(), "policy": policy.model_dump()})
    return metrics


def _reference(run_dir: str, rl: RLConfig, device,
               policy: PolicyConfig | None = None) -> torch.nn.Module | str | None:
    """The frozen reference policy for the KL penalty: version 0 (the SFT start); with LoRA
    the base model, i.e. the policy itself with its adapters disabled (ADAPTERS_OFF), so no
    second copy is loaded (the SFT start when the warm start did not train the adapter)."""
    if rl.kl_coef == 0.0:
        return None
    if policy is not None and policy.lora_rank:
        return ADAPTERS_OFF
    path = checkpoints.checkpoint_dir(run_dir, 0) / "model"
    if not path.is_dir():
        raise FileNotFoundError(f"rl.kl_coef={rl.kl_coef} needs the reference policy at {path} "
                                "(version 0); it was pruned or never written")
    ref = load_policy(str(path)).to(device).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


_LOADED: dict[str, torch.nn.Module] = {}


def policy_for_sampling(run_dir: str, version: int) -> torch.nn.Module:
    """The HF model of a version, loaded once per process (generation lives with the policy)."""
    path = str(checkpoints.checkpoint_dir(run_dir, version) / "model")
    if path not in _LOADED:
        _LOADED.clear()
        _LOADED[path] = load_policy(path).eval()
    return _LOADED[path]
