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
from training.episodes import policy_token_units
from training.lora import ADAPTERS_OFF, autocast, prepare_for_training, reference_view
from training.losses import LOSSES, kl_penalty, sft_loss
from training.microbatch import loss_units, plan_update
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
                   probe: Callable[[torch.nn.Module], float] | None = None) -> dict:
    """Train a fresh policy on (prompt, reference) pairs; publish it as version 0.

    `demos`: transcripts `(prompt, [(text, by_policy), ...])` (training/episodes.py), trained
    on alongside the pairs with the loss over the policy's segments only.

    With `sft.save_every`, the engine state (weights, optimizer, scheduler, RNG) is saved under
    `checkpoints/sft-progress/` and a restarted warm start continues from it with the same next
    step. `stop_after=N` stops after step N without publishing (a deliberate interruption).

    With `sft.until_pass`, `probe(model)` (the greedy pass rate of the probe tasks, run on rank
    0 every `sft.probe_every` steps) decides when the decay starts (`WarmupHoldDecay`): the warm
    start ends past the point where the model has learnt the task format, wherever on a given
    machine that point falls, instead of at a step count tuned on one machine."""
    if not prompts and not demos:
        raise ValueError("SFT warm start needs at least one task with a reference solution")
    until = sft.until_pass is not None
    if until and probe is None:
        raise ValueError("sft.until_pass needs a probe (a single-turn source with references)")
    torch.manual_seed(seed)
    model = prepare_for_training(build_policy(policy), policy)
    tok = tokenizer_of(model)
    if until:
        schedule = (lambda opt: WarmupHoldDecay(opt, sft.lr, sft.warmup_steps, sft.decay_steps))
    else:
        schedule = (lambda opt: WarmupLinearDecay(opt, sft.steps, sft.lr, sft.warmup_steps))
    engine, _ = _engine_for(model, rl, sft.lr, sft.batch_size, 1, None, schedule)
    world, rank = eng.world_size(), eng.rank()
    if sft.batch_size < world:
        raise ValueError(f"sft.batch_size={sft.batch_size} must be >= the process count {world}")
    rng = random.Random(seed)
    data = [(*_encode_pair(tok, p, r), None) for p, r in zip(prompts, references)]
    if demos:
        from training.episodes import encode_transcript  # noqa: PLC0415

        data += [encode_transcript(tok, p, segs) for p, segs in demos]
    progress = checkpoints.sft_progress_dir(run_dir)
    first = 0
    if sft.save_every and (progress / "latest").is_file():
        client = eng.load_state(engine, str(progress), None, optimizer=True, scheduler=True)
        first = int(client["step"])
        _set_rng_state(rng, client["rng"])
    t0, losses = time.perf_counter(), []
    device = engine.device
    sched = engine.lr_scheduler if until else None
    probes: list[tuple[int, float]] = []

    def end() -> int:  # the step the warm start stops at
        return sft.steps if sched is None or sched.decay_from is None else \
            sched.decay_from + sft.decay_steps

    with Progress("sft warm start", end(), "steps", start=first, enabled=rank == 0) as shown:
        step = first
        while step < min(end(), sft.steps if stop_after is None else stop_after):
            if step % 25 == 0:  # before a probe, whose rollouts would read as a neighbour
                threads.retune()
            batch = [data[rng.randrange(len(data))] for _ in range(sft.batch_size)]
            mine = batch[rank::world]
            b = make_batch([d[0] for d in mine], [d[1] for d in mine], tok.pad_token_id,
                           policy.max_len, [d[2] for d in mine])
            b.to(device)
            with autocast(rl.autocast, device):
                loss = sft_loss(token_logprobs(engine, b), b.loss_mask)
            if world > 1:  # token-weighted so the step is the mean over the whole batch's tokens
                full = make_batch([d[0] for d in batch], [d[1] for d in batch], tok.pad_token_id,
                                  policy.max_len, [d[2] for d in batch])
                loss = loss * (b.loss_mask.sum() / full.loss_mask.sum().clamp(min=1.0) * world)
            engine.backward(loss)
            engine.step()
            losses.append(float(loss.detach()))
            shown.set(loss=float(np.mean(losses[-20:])))  # smoothed as sft/final_loss is
            step += 1
            shown.update(step)
            if sched is not None and sched.decay_from is None:
                if step % sft.probe_every == 0:
                    passed = eng.broadcast(probe(engine.module) if rank == 0 else None)
                    probes.append((step, passed))
                    shown.set(probe=f"{passed:.2f}")
                    if passed >= sft.until_pass:
                        sched.decay_from = step
                if sched.decay_from is None and step >= sft.steps - sft.decay_steps:
                    sched.decay_from = step  # the criterion was not met: decay within `steps`
                shown.total = end()
            if sft.save_every and step % sft.save_every == 0 and step < end():
                _save_progress(engine, progress, step, rng)
    if step < end():
        return {"sft/stopped_at": step, "sft/resumed_from": first}
    metrics = {"sft/steps": step, "sft/final_loss": float(np.mean(losses[-20:])) if losses else math.nan,
               "sft/seconds": time.perf_counter() - t0, "sft/examples": len(data)}
    if sched is not None:
        final = eng.broadcast(probe(engine.module) if rank == 0 else None)
        met = [s for s, p in probes if p >= sft.until_pass]
        metrics.update({"sft/probe_pass": final, "sft/decay_from": sched.decay_from,
                        "sft/criterion_met_at": met[0] if met else math.nan,
                        "sft/probes": len(probes)})
    if first:
        metrics["sft/resumed_from"] = first
    _publish(engine, run_dir, 0, {"version": 0, "kind": "sft", **metrics,
                                  "engine": eng.engine_facts(rl), "policy": policy.model_dump(),
                                  "sft": sft.model_dump()})
    if eng.rank() == 0:
        shutil.rmtree(progress, ignore_errors=True)
    return metrics


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
    orders, order = [], list(range(len(live)))
    rng = random.Random(seed + version)
    for _ in range(rl.epochs if live else 0):
        rng.shuffle(order)
        orders.append(list(order))
    lengths = [min(len(s.prompt_ids) + len(s.completion_ids), policy.max_len) for s in live]
    units = [_units(s, policy, rl) for s in live]
    total_units = sum(_units(s, policy, rl) for s in counted)
    eng.setup_distributed()
    plan = plan_update(orders, lengths, units, rl.micro_batch_size, rl.micro_batch_tokens,
                       eng.world_size(), eng.rank(), total_units)
    engine, restored = _engine_for(model, rl, rl.lr, rl.micro_batch_size, plan.accum, src)
    if rl.lr_schedule == "constant":
        for group in engine.optimizer.param_groups:
            group["lr"] = rl.lr
    reference = _reference(run_dir, rl, engine.device, policy)
    # Samples of an older version than the one updated (rl.overlap): the decoupled objective
    # needs each token's log-prob under the starting weights (`prox`, by live index).
    stale = [s.version for s in live if s.version is not None and s.version != version]
    correct = bool(stale) or any(s.engine_sampled for s in live)
    prox: dict[int, list[float]] = {}
    if correct:
        prox = starting_logprobs(engine, live, plan, tok, policy, rl, temperature)
    gap = LogprobGap()
    is_stats = {"weight": 0.0, "capped": 0.0, "tokens": 0.0}
    loss_fn = LOSSES[rl.algorithm]
    extra = {"dual_clip": rl.dual_clip} if rl.algorithm == "ppo" else {}
    t0, n_tokens = time.perf_counter(), 0
    stats: dict[str, list[float]] = {"loss": [], "clip_frac": [], "kl": [], "replay_nll": []}
    replay_rng = random.Random(f"replay:{seed}:{version}:{eng.rank()}")
    replay_on = rl.replay_coef > 0
    for e, epoch in enumerate(plan.steps):
        threads.retune()  # an update can be minutes long: follow a neighbour that came or went
        shown = Progress(f"rl update v{version} -> v{version + 1}, epoch {e + 1}/{len(plan.steps)}",
                         len(epoch), "micro-batches", enabled=eng.rank() == 0)
        for mb in shown.over(epoch):
            part = [live[i] for i in mb.indices]
            b = make_batch([s.prompt_ids for s in part], [s.completion_ids for s in part],
                           tok.pad_token_id, policy.max_len, [s.completion_mask for s in part])
            b.to(engine.device)
            with autocast(rl.autocast, engine.device):
                logp = token_logprobs(engine, b, temperature, tok.banned_ids)
            old = _per_token(part, [s.old_logprobs for s in part], logp.shape[1]).to(logp.device)
            is_weight = None
            if e == 0:  # the starting weights: the sampler's log-probs of its own samples
                on = [r for r, x in enumerate(part) if x.version in (None, version)]
                if on:
                    gap.add(logp[on], old[on], b.loss_mask[on])
            if correct:
                if e == 0:  # no optimizer step before epoch 1: these are the starting weights
                    for row, i in enumerate(mb.indices):
                        prox.setdefault(i, completion_values(logp, row, part[row]))
                sampler, old = old, _per_token(part, [prox[i] for i in mb.indices],
                                               logp.shape[1]).to(logp.device)
                is_weight, counts = truncated_is(old, sampler, b.loss_mask,
                                                  rl.off_policy_is_cap)
                if mb.weight:
                    for k in is_stats:
                        is_stats[k] += counts[k]
            if rl.algorithm == "ppo" and any(s.token_advantages for s in part):
                adv = _per_token(part, [s.token_advantages or [s.advantage] * len(s.completion_ids)
                                        for s in part], logp.shape[1])
            else:
                adv = torch.tensor([s.advantage for s in part], dtype=torch.float32)
            loss, info = loss_fn(logp, old, adv.to(logp.device), b.loss_mask, rl.clip_eps,
                                 rl.loss_aggregation, rl.clip_eps_high, policy.max_len, **extra,
                                 is_weight=is_weight)
            if reference is not None:
                with torch.no_grad(), reference_view(engine, reference), \
                        autocast(rl.autocast, engine.device):
                    ref_logp = token_logprobs(engine if reference == ADAPTERS_OFF else reference,
                                              b, temperature, tok.banned_ids)
                kl, kinfo = kl_penalty(logp, ref_logp, b.loss_mask, rl.kl_estimator,
                                       rl.loss_aggregation, policy.max_len)
                loss = loss + rl.kl_coef * kl
                info.update(kinfo)
            if replay_on and mb.weight:  # only the pairs drawn are tokenized
                pick = [_encode_pair(tok, *replay[replay_rng.randrange(len(replay))])
                        for _ in range(rl.replay_per_step)]
                rb = make_batch([d[0] for d in pick], [d[1] for d in pick], tok.pad_token_id,
                                policy.max_len)
                rb.to(engine.device)
                with autocast(rl.autocast, engine.device):
                    nll = sft_loss(token_logprobs(engine, rb), rb.loss_mask)
                loss = loss + rl.replay_coef * nll
                stats["replay_nll"].append(float(nll.detach()))
            engine.backward(loss * mb.weight)
            engine.step()
            if mb.weight:
                n_tokens += int(b.attention_mask.sum())
                stats["loss"].append(float(loss.detach()))
                stats["clip_frac"].append(info["clip_frac"])
                if "kl" in info:
                    stats["kl"].append(info["kl"])
                shown.set(loss=float(np.mean(stats["loss"][-20:])))
    seconds = time.perf_counter() - t0
    metrics = {
        "train/loss": float(np.mean(stats["loss"])) if stats["loss"] else 0.0,
        "train/clip_frac": float(np.mean(stats["clip_frac"])) if stats["clip_frac"] else 0.0,
        "train/sequences": len(live), "train/skipped_zero_adv": len(counted) - len(live),
        "train/seconds": seconds,
    }
    extra_metrics = {"train/tokens": n_tokens, "train/tokens_per_s": n_tokens / max(seconds, 1e-9),
                     "train/micro_steps": plan.accum * len(plan.steps),
                     "train/optimizer_restored": int(restored), "train/processes": eng.world_size(),
                     "train/lr": float(engine.optimizer.param_groups[0]["lr"]),
                     **memory.rank_memory(engine)}
    if stats["kl"]:
        extra_metrics["train/kl"] = float(np.mean(stats["kl"]))
    if stats["replay_nll"]:
        extra_metrics["train/replay_nll"] = float(np.mean(stats["replay_nll"]))
    extra_metrics.update(gap.metrics())
    if stale:
        extra_metrics.update({"train/stale_samples": len(stale),
                              "train/staleness": version - min(stale)})
    if correct:
        n = max(is_stats["tokens"], 1.0)
        extra_metrics.update({"train/is_weight_mean": is_stats["weight"] / n,
                              "train/is_weight_capped": is_stats["capped"] / n})
    meta = {"version": version + 1, "kind": rl.algorithm,
            **metrics, **extra_metrics, "engine": eng.engine_facts(rl), "rl": rl.model_dump(),
            "policy": policy.model_dump()}
    _publish(engine, run_dir, version + 1, meta)
    return {**metrics, **extra_metrics}


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
