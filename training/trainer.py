"""The policy's updates: SFT warm start and the RL step (GRPO, PPO-clip, RLOO; optional KL to a
frozen reference and replay of reference solutions), both through the DeepSpeed engine, each
reading one checkpoint version and publishing the next. Every process of a `deepspeed` launch
runs the same function; rank 0 writes. The steps they drive are training/sft_steps.py's and
training/rl_steps.py's.
"""
from __future__ import annotations

import copy
import hashlib
import math
import random
import shutil
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from training import checkpoints, memory, threads
from training import engine as eng
from training.batch import RLSample
from training.config import PolicyConfig, RLConfig, SFTConfig
from training.lora import ADAPTERS_OFF, is_lora, prepare_for_training
from training.offpolicy import starting_logprobs
from training.policy import build_policy, load_policy, save_policy, tokenizer_of
from training.progress import Progress
from training.rl_steps import RLUpdate, moves, update_plan, with_advantages
from training.sft_steps import (SFTRun, WarmupHoldDecay, WarmupLinearDecay, resume_sft,
                                sft_examples)


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


def _publish(engine, run_dir: str, version: int, meta: dict,
             trained_from: int | None = None) -> Path:
    """All ranks: gather (ZeRO-3) and save the engine state; rank 0 writes the model and renames,
    then hands the weights to this process's sampling model of `trained_from`, if it holds it."""
    stage = eng.broadcast(str(checkpoints.staging_dir(run_dir, version)) if eng.rank() == 0 else None)
    state = eng.full_state_dict(engine)
    if eng.rank() == 0:
        save_policy(engine.module, str(Path(stage) / "model"), state_dict=state)
    eng.save_state(engine, str(Path(stage) / "engine"), "state")
    eng.barrier()
    final = checkpoints.checkpoint_dir(run_dir, version)
    if eng.rank() == 0:
        checkpoints.publish(Path(stage), final, meta)
        if trained_from is not None:
            _hand_to_sampling(engine.module, state,
                              checkpoints.checkpoint_dir(run_dir, trained_from), final)
    eng.barrier()
    return final


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
    data = sft_examples(tok, prompts, references, demos or (), encoded or ())
    progress = checkpoints.sft_progress_dir(run_dir)
    first = resume_sft(engine, progress, rng) if sft.save_every else 0
    t0 = time.perf_counter()
    run = SFTRun(engine, tok, data, rng, policy, sft, rl, probe, progress,
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


def grpo_update(run_dir: str, version: int, samples: list[RLSample], policy: PolicyConfig,
                rl: RLConfig, temperature: float, seed: int,
                replay: Sequence[tuple[str, str]] = ()) -> dict:
    """One RL iteration (rl.algorithm: grpo, ppo or rloo): read version `version`, publish
    `version + 1`.

    Every sample with a completion counts in the loss's normaliser and in the KL term, whatever
    its advantage (training/rl_steps.py, the comment above `_units`); one whose loss is
    identically zero is counted but not run. When nothing is left to run, the next version is a
    copy of this one.
    `replay`: (prompt, reference) pairs; with `rl.replay_coef > 0`, each micro-batch adds that
    weight times the SFT loss of `rl.replay_per_step` of them, drawn at random.
    """
    if rl.replay_coef > 0 and not replay:
        raise ValueError(f"rl.replay_coef={rl.replay_coef} needs reference solutions to replay; "
                         "none was given (no training task with a reference in the mix?)")
    src = checkpoints.checkpoint_dir(run_dir, version)
    memory.reset_peak()  # this update's peak, also in a rank that stays up between updates
    torch.manual_seed(seed * 100003 + version)
    samples = with_advantages(samples, rl)
    counted = [s for s in samples if s.completion_ids]  # an empty completion has no token to train
    live = [s for s in counted if moves(s, rl)]
    plan = update_plan(live, counted, policy, rl, random.Random(seed + version))
    hold_key = _hold_key(policy, rl, plan.accum)
    engine = _held_engine(src, hold_key)
    restored = engine is not None  # the optimizer state that `src` saved, in memory
    if engine is None:
        model = prepare_for_training(_policy_to_train(src), policy)
        engine, restored = _engine_for(model, rl, rl.lr, rl.micro_batch_size, plan.accum, src)
    tok = tokenizer_of(engine)
    if rl.lr_schedule == "constant":
        for group in engine.optimizer.param_groups:
            group["lr"] = rl.lr
    reference = kl_reference(run_dir, rl, engine.device, policy)
    # Samples of an older version than the one updated (rl.overlap): the decoupled objective
    # needs each token's log-prob under the starting weights (`prox`, by live index).
    stale = [s.version for s in live if s.version is not None and s.version != version]
    correct = bool(stale) or any(s.engine_sampled for s in live)
    prox = starting_logprobs(engine, live, plan, tok, policy, rl, temperature) if correct else {}
    update = RLUpdate(engine, tok, live, policy, rl, temperature, version, reference, correct,
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
    final = _publish(engine, run_dir, version + 1, {
        "version": version + 1, "kind": rl.algorithm, **metrics, "engine": eng.engine_facts(rl),
        "rl": rl.model_dump(), "policy": policy.model_dump()}, trained_from=version)
    _hold(engine, final, hold_key, rl)
    return metrics


def kl_reference(run_dir: str, rl: RLConfig, device,
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


# The engine of this process's last update, with the checkpoint it published and what it was
# made for (_hold_key). Taken by the next update of that checkpoint (_held_engine).
_HELD: dict[str, object] = {}


def _hold_key(policy: PolicyConfig, rl: RLConfig, accum: int) -> str:
    """What an engine was made for: the run's policy and RL settings and the update's gradient
    accumulation (the DeepSpeed config its checkpoints record)."""
    return f"{policy.model_dump_json()}|{rl.model_dump_json()}|{accum}|{eng.world_size()}"


def _hold(engine, published: Path, key: str, rl: RLConfig) -> None:
    """Keep the engine that published `published` for the next update, where it stands for a
    fresh engine that would load that checkpoint's weights and optimizer state from disk
    (0.034 s an iteration of bench/bench_trl.py's model in engine set-up and state load, plus
    0.010 s copying the policy; seconds for a real one). Only where the weights were handed to
    this process's sampling model (so the next update is of them, here), and only a plain
    policy trained by one process on the CPU under ZeRO 0 with a plain optimizer: a GPU's
    memory is the sampler's between updates, and a sharded or mixed-precision optimizer keeps
    state of its own."""
    _HELD.clear()
    if (str(published / "model") in _LOADED and eng.world_size() == 1 and rl.zero_stage == 0
            and rl.dtype == "fp32" and not is_lora(engine.module)
            and engine.device.type == "cpu"):
        _HELD.update(path=str(published), engine=engine, key=key, stamp=_stamp(published))


def _stamp(version_dir: Path) -> tuple[int, str] | None:
    """Which copy of a checkpoint is on disk (its meta.json's inode and a digest of its bytes,
    which hold the update's own figures): the one published here, or one written since (a
    checkpoint replaced or rewritten, deleted). Not the mtime: its clock ticks coarsely."""
    path = version_dir / "meta.json"
    try:
        return path.stat().st_ino, hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _held_engine(src: Path, key: str):
    """The engine held for an update of checkpoint `src` (`_hold`), or None: another checkpoint,
    other settings, the checkpoint on disk is no longer the one it published, or the process no
    longer holds `src`'s policy for sampling (a new process, a model loaded since). Taken
    either way, so an update that fails leaves nothing held. DeepSpeed's micro-step count is
    set back to a fresh engine's, so the accumulation boundary falls where it would; all that a
    checkpoint holds (weights, optimizer state, step and sample counts) is what loading it
    would give: the next checkpoint is the same bit for bit (tests/unit/test_training_updates.py)."""
    held = dict(_HELD)
    _HELD.clear()
    if (held.get("path") != str(src) or held.get("key") != key
            or held.get("stamp") != _stamp(src) or str(src / "model") not in _LOADED):
        return None
    engine = held["engine"]
    engine.micro_steps = 0
    return engine


def policy_for_sampling(run_dir: str, version: int) -> torch.nn.Module:
    """The HF model of a version, loaded once per process (generation lives with the policy),
    or handed the weights of the update that published it in this process (`_hand_to_sampling`)."""
    path = str(checkpoints.checkpoint_dir(run_dir, version) / "model")
    if path not in _LOADED:
        _LOADED.clear()
        _LOADED[path] = load_policy(path).eval()
    return _LOADED[path]


def _policy_to_train(src: Path) -> torch.nn.Module:
    """The policy of checkpoint `src` for an update to train: a copy of the model this process
    holds for sampling it, when it holds one (loaded from `src`, or handed the weights `src`
    was published with: `_hand_to_sampling`; a plain policy on the CPU), which saves loading
    from disk what is in memory already; otherwise loaded from disk."""
    held = _LOADED.get(str(src / "model"))
    if held is None or is_lora(held) or any(p.device.type != "cpu" for p in held.parameters()):
        return load_policy(str(src / "model"))
    tok = tokenizer_of(held)
    return copy.deepcopy(held, {id(tok): tok})  # one tokenizer, shared: it is read-only


def _hand_to_sampling(trained: torch.nn.Module, state: dict | None, src: Path,
                      published: Path) -> None:
    """The weights just published as `published` copied into the model this process holds for
    sampling `src` (the version they were trained from), which then stands for `published`:
    the next sample call does not load from disk what is in memory already (0.04-0.05 s an
    iteration of bench/bench_trl.py's tiny model; seconds for a real one). Only a plain
    policy whose every tensor matches the held one's name, shape and dtype, so the copy is the
    checkpoint bit for bit (a test compares it with `load_policy`); otherwise, as when no model
    of `src` is held, the next call loads `published` from disk."""
    held = _LOADED.get(str(src / "model"))
    if held is None or is_lora(trained) or is_lora(held):
        return
    state = state if state is not None else trained.state_dict()
    mine = held.state_dict()
    if mine.keys() != state.keys() or any(
            (v.shape, v.dtype) != (mine[k].shape, mine[k].dtype) for k, v in state.items()):
        return
    _LOADED.clear()
    with torch.no_grad():
        held.load_state_dict(state)
    _LOADED[str(published / "model")] = held
