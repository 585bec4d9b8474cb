"""The SFT warm start's steps (training/trainer.py `sft_warm_start` drives them): its examples
as tokens, its learning-rate schedules, the draw and optimizer step of each batch, the probe that
decides when the decay starts, and the state a restarted warm start resumes from. Apart from the
driver so that what one step computes can be read and tested without the engine's set-up and the
checkpoint it publishes.
"""
from __future__ import annotations

import dataclasses
import math
import random
import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from training import engine as eng
from training import threads
from training.batch import make_batch, token_logprobs
from training.config import PolicyConfig, RLConfig, SFTConfig
from training.episodes import encode_transcript
from training.lora import autocast
from training.losses import sft_loss
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


def sft_examples(tok, prompts, references, demos, encoded) -> list[tuple]:
    """Every warm-start example as (prompt ids, completion ids, completion mask or None)."""
    data = [(*encode_pair(tok, p, r), None) for p, r in zip(prompts, references)]
    data += [encode_transcript(tok, p, segs) for p, segs in demos]
    return data + [(list(p), list(c), list(m)) for p, c, m in encoded]


def encode_pair(tok, prompt: str, reference: str) -> tuple[list[int], list[int]]:
    """Token ids of a (prompt, reference) pair as the SFT loss reads them: the reference ends
    with EOS."""
    return tok.encode_prompt(prompt), tok.encode(reference, bos=False) + [tok.eos_token_id]


def resume_sft(engine, folder: Path, rng: random.Random) -> int:
    """The step a restarted warm start continues from, the engine's and `rng`'s state restored
    from `folder` (0, and nothing restored, when nothing was saved there)."""
    if not (folder / "latest").is_file():
        return 0
    client = eng.load_state(engine, str(folder), None, optimizer=True, scheduler=True)
    _set_rng_state(rng, client["rng"])
    return int(client["step"])


def _rng_state(rng: random.Random) -> dict:
    return {"python": rng.getstate(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_state(rng: random.Random, state: dict) -> None:
    rng.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _save_progress(engine, folder: Path, step: int, rng: random.Random) -> None:
    tag = f"step{step:07d}"
    eng.save_state(engine, str(folder), tag, {"step": step, "rng": _rng_state(rng)})
    eng.barrier()
    if eng.rank() == 0:  # keep only the newest resumable state
        for old in folder.glob("step*"):
            if old.name != tag:
                shutil.rmtree(old, ignore_errors=True)


@dataclasses.dataclass
class SFTRun:
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
