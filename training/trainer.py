"""The policy's updates: SFT warm start and the GRPO step, both through the DeepSpeed engine,
each reading one checkpoint version and publishing the next."""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from training import checkpoints
from training.batch import make_batch, token_logprobs
from training.config import PolicyConfig, RLConfig, SFTConfig
from training.engine import make_engine
from training.losses import grpo_loss, sft_loss
from training.policy import build_policy, load_policy, save_policy
from training.tokenizer import ByteTokenizer


@dataclass(frozen=True)
class RLSample:
    """One rollout as the update sees it."""

    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]  # [T] sampling log-probs of completion_ids
    advantage: float


def _lr_at(step: int, total: int, lr: float, warmup: int) -> float:
    """Linear warm-up, then linear decay to 10% (nanoGPT's get_lr, linear)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return lr * (1.0 - 0.9 * frac)


def _engine_for(model, rl: RLConfig, lr: float, micro: int, accum: int, resume_from: Path | None):
    engine = make_engine(model, rl, lr, micro, accum)
    if resume_from is not None and (resume_from / "engine").is_dir():
        engine.load_checkpoint(str(resume_from / "engine"), tag="state",
                               load_optimizer_states=True, load_lr_scheduler_states=False,
                               load_module_only=False)
    return engine


def _publish(engine, run_dir: str, version: int, meta: dict) -> Path:
    stage = checkpoints.staging_dir(run_dir, version)
    save_policy(engine.module, str(stage / "model"))
    engine.save_checkpoint(str(stage / "engine"), tag="state")
    return checkpoints.publish(stage, checkpoints.checkpoint_dir(run_dir, version), meta)


def sft_warm_start(run_dir: str, prompts: list[str], references: list[str], policy: PolicyConfig,
                   sft: SFTConfig, rl: RLConfig, seed: int) -> dict:
    """Train a fresh policy on (prompt, reference) pairs; publish it as version 0."""
    if not prompts:
        raise ValueError("SFT warm start needs at least one task with a reference solution")
    tok = ByteTokenizer()
    torch.manual_seed(seed)
    model = build_policy(policy)
    engine = _engine_for(model, rl, sft.lr, sft.batch_size, 1, None)
    rng = random.Random(seed)
    data = [(tok.encode(p), tok.encode(r, bos=False) + [tok.eos_token_id])
            for p, r in zip(prompts, references)]
    t0, losses = time.perf_counter(), []
    for step in range(sft.steps):
        for group in engine.optimizer.param_groups:
            group["lr"] = _lr_at(step, sft.steps, sft.lr, sft.warmup_steps)
        batch = [data[rng.randrange(len(data))] for _ in range(sft.batch_size)]
        b = make_batch([p for p, _ in batch], [c for _, c in batch], tok.pad_token_id, policy.max_len)
        loss = sft_loss(token_logprobs(engine, b), b.loss_mask)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss))
    metrics = {"sft/steps": sft.steps, "sft/final_loss": float(np.mean(losses[-20:])) if losses else math.nan,
               "sft/seconds": time.perf_counter() - t0, "sft/examples": len(data)}
    _publish(engine, run_dir, 0, {"version": 0, "kind": "sft", **metrics})
    return metrics


def grpo_update(run_dir: str, version: int, samples: list[RLSample], policy: PolicyConfig,
                rl: RLConfig, temperature: float, seed: int) -> dict:
    """One GRPO iteration: read version `version`, publish `version + 1`.

    Samples whose advantage is 0 add nothing to the gradient and are skipped (their group had
    one reward for all); when none is left, the next version is a copy of this one.
    """
    tok = ByteTokenizer()
    src = checkpoints.checkpoint_dir(run_dir, version)
    torch.manual_seed(seed * 100003 + version)
    live = [s for s in samples if s.advantage != 0.0 and s.completion_ids]
    micro = rl.micro_batch_size
    accum = max(1, math.ceil(len(live) / micro))
    model = load_policy(str(src / "model"))
    engine = _engine_for(model, rl, rl.lr, micro, accum, src)
    t0 = time.perf_counter()
    stats: dict[str, list[float]] = {"loss": [], "clip_frac": []}
    order = list(range(len(live)))
    rng = random.Random(seed + version)
    for _ in range(rl.epochs if live else 0):
        rng.shuffle(order)
        for k in range(accum):
            idx = order[k * micro:(k + 1) * micro]
            if not idx:  # keep the engine's accumulation boundary: an empty micro-batch adds 0
                idx = order[:1]
                weight = 0.0
            else:
                weight = 1.0
            part = [live[i] for i in idx]
            b = make_batch([s.prompt_ids for s in part], [s.completion_ids for s in part],
                           tok.pad_token_id, policy.max_len)
            logp = token_logprobs(engine, b, temperature)
            old = torch.zeros_like(logp)
            for row, s in enumerate(part):
                start = len(s.prompt_ids) - 1
                n = min(len(s.old_logprobs), old.shape[1] - start)
                old[row, start:start + n] = torch.tensor(s.old_logprobs[:n])
            adv = torch.tensor([s.advantage for s in part], dtype=torch.float32)
            loss, info = grpo_loss(logp, old, adv, b.loss_mask, rl.clip_eps)
            engine.backward(loss * weight)
            engine.step()
            if weight:
                stats["loss"].append(float(loss))
                stats["clip_frac"].append(info["clip_frac"])
    metrics = {
        "train/loss": float(np.mean(stats["loss"])) if stats["loss"] else 0.0,
        "train/clip_frac": float(np.mean(stats["clip_frac"])) if stats["clip_frac"] else 0.0,
        "train/sequences": len(live), "train/skipped_zero_adv": len(samples) - len(live),
        "train/seconds": time.perf_counter() - t0,
    }
    _publish(engine, run_dir, version + 1, {"version": version + 1, "kind": "grpo", **metrics})
    return metrics


_LOADED: dict[str, torch.nn.Module] = {}


def policy_for_sampling(run_dir: str, version: int) -> torch.nn.Module:
    """The HF model of a version, loaded once per process (generation lives with the policy)."""
    path = str(checkpoints.checkpoint_dir(run_dir, version) / "model")
    if path not in _LOADED:
        _LOADED.clear()
        _LOADED[path] = load_policy(path).eval()
    return _LOADED[path]
