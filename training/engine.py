"""The one module that knows DeepSpeed: process-group set-up, the training engine, and the
collective pieces of saving (gathering ZeRO-3 shards, one writer per checkpoint).

On CPU the engine runs over gloo (`DS_ACCELERATOR=cpu`); on GPUs and under the `deepspeed`
launcher the same code takes NCCL and the launcher's RANK/WORLD_SIZE. Several CPU processes:
`DS_ACCELERATOR=cpu deepspeed --num_gpus 2 --module training.update --spec spec.json`
(the launcher's "gpus" are process slots; on CPU each one is a gloo rank).
"""
from __future__ import annotations

import atexit
import os
from typing import Any, Callable

import torch

from training.config import RLConfig


def setup_distributed() -> None:
    """Join (or, alone, create) the process group. Idempotent. A world of one made here is left
    again at interpreter exit (`teardown_distributed`); a launched rank leaves it itself."""
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed  # after DS_ACCELERATOR is set
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return
    from training.build_lock import watched  # noqa: PLC0415

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    alone = "MASTER_PORT" not in os.environ and os.environ.get("WORLD_SIZE", "1") == "1"
    # Launched alone (not by `deepspeed`/torchrun): a world of one process.
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    if alone:
        # Its store lives in this process: no port. A port picked free and bound later was
        # taken in between by another process's connection (the first start compiles
        # DeepSpeed's CPU op, a minute, in that gap), and a MASTER_PORT left in os.environ
        # was inherited by every process this one starts, binding the port it still held.
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    with watched():  # a build lock left by a process killed mid-build would block forever
        # on a group made above, DeepSpeed takes it as it is (and builds its CPU op)
        deepspeed.init_distributed(dist_backend=backend, verbose=False)
    if world_size() == 1:
        atexit.register(teardown_distributed, sync=False)


def teardown_distributed(sync: bool = True) -> None:
    """Leave the process group, on every rank after its last collective (`sync`: a barrier first,
    so no rank tears down while another still talks to it). Only after success: a rank that failed
    must not wait for the others here. Without it a gloo rank can abort at interpreter exit
    ("terminate called without an active exception", exit -6): the group's worker threads are
    destroyed while still joinable, failing a launch whose work had finished. Idempotent."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    if sync and dist.get_world_size() > 1:
        dist.barrier()
    dist.destroy_process_group()


def rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def barrier() -> None:
    import torch.distributed as dist

    if world_size() > 1:
        dist.barrier()


def broadcast(obj: Any) -> Any:
    """Rank 0's `obj` on every rank (a picklable value)."""
    if world_size() == 1:
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def ds_config(cfg: RLConfig, micro_batch_size: int, grad_accum: int) -> dict:
    return {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": grad_accum,
        "gradient_clipping": cfg.grad_clip,
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": cfg.dtype == "bf16"},
        # ZeRO wraps our torch AdamW (a DeepSpeed-built Adam would compile an op on CPU).
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def make_engine(model: torch.nn.Module, cfg: RLConfig, lr: float, micro_batch_size: int,
                grad_accum: int, lr_scheduler: Callable | None = None):
    """A DeepSpeed engine around `model` with a torch AdamW (no fused-Adam build on CPU).
    `lr_scheduler(optimizer)` builds a scheduler DeepSpeed steps and checkpoints with the engine."""
    setup_distributed()
    import deepspeed

    # Only what trains gets optimizer state (a LoRA policy: the adapters, not the base).
    trainable = [p for p in model.parameters() if p.requires_grad]
    # torch's fused AdamW, one kernel over every tensor (the Hugging Face Trainer's default, and
    # so TRL's): a step of SmolLM2-135M's full weights took 88 ms against 385-685 ms for the
    # default per-tensor loop on this 2-core CPU, the bench model's 0.7 against 2.3 ms. The same
    # update up to rounding (7e-9 apart after 5 steps). Where a tensor cannot take it, the loop.
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in trainable)
    optimizer = torch.optim.AdamW(trainable, lr=lr, betas=(0.9, 0.99), weight_decay=0.0,
                                  fused=fused or None)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                           lr_scheduler=lr_scheduler,
                                           config=ds_config(cfg, micro_batch_size, grad_accum))
    if lone_plain_rank(engine):
        engine.enable_backward_allreduce = False
    return engine


def lone_plain_rank(engine) -> bool:
    """One data-parallel rank under ZeRO 0 with a plain torch optimizer: DeepSpeed's backward
    all-reduce would flatten every gradient into one buffer, multiply it by 1/1, reduce it over
    the one rank and copy it back, which changes no bit and costs a copy of the gradients (and
    that much memory: 540 MB for SmolLM2-135M's full weights) at every optimizer step. A ZeRO
    or bf16 optimizer learns the accumulation boundary from that call, so it keeps it."""
    return (engine.dp_world_size == 1 and engine.zero_optimization_stage() == 0
            and not hasattr(engine.optimizer, "set_gradient_accumulation_boundary"))


def engine_facts(cfg: RLConfig) -> dict:
    """What decides whether a saved optimizer state can be loaded again (kept in meta.json)."""
    return {"zero_stage": cfg.zero_stage, "dtype": cfg.dtype, "world_size": world_size()}


def state_compatible(saved: dict | None, cfg: RLConfig) -> bool:
    """ZeRO shards its optimizer state per process: a state saved under another stage, precision
    or (for ZeRO >= 1) process count cannot be loaded as is. Checkpoints of the first loop have
    no record and were all ZeRO-0 fp32 single-process."""
    saved = saved or {"zero_stage": 0, "dtype": "fp32", "world_size": 1}
    now = engine_facts(cfg)
    same = saved["zero_stage"] == now["zero_stage"] and saved["dtype"] == now["dtype"]
    return same and (now["zero_stage"] == 0 or saved["world_size"] == now["world_size"])


def full_state_dict(engine) -> dict | None:
    """The whole model's weights, or None where `engine.module.state_dict()` already is whole.
    Under ZeRO-3 every rank must call this (the shards are gathered collectively)."""
    if engine.zero_optimization_stage() != 3:
        return None
    import deepspeed

    params = list(engine.module.parameters())
    with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
        return {k: v.detach().clone().cpu() for k, v in engine.module.state_dict().items()}


def save_state(engine, folder: str, tag: str, client_state: dict | None = None) -> None:
    """Model, optimizer, scheduler (and `client_state`, e.g. RNG) through DeepSpeed: collective.
    Frozen weights (a LoRA policy's base) are left out: they never change and reload from the
    base model."""
    engine.save_checkpoint(folder, tag=tag, client_state=client_state or {},
                           exclude_frozen_parameters=_has_frozen(engine))


def _has_frozen(engine) -> bool:
    return any(not p.requires_grad for p in engine.module.parameters())


def load_state(engine, folder: str, tag: str | None, optimizer: bool = True,
               scheduler: bool = False) -> dict:
    """Restore what `save_state` wrote; returns its client state."""
    path, client = engine.load_checkpoint(folder, tag=tag, load_optimizer_states=optimizer,
                                          load_lr_scheduler_states=scheduler,
                                          load_module_only=False,
                                          load_module_strict=not _has_frozen(engine))
    if path is None:
        raise FileNotFoundError(f"no DeepSpeed checkpoint (tag {tag!r}) under {folder}")
    return client or {}


if __name__ == "__main__":  # `python -m training.engine --warm-up`: build DeepSpeed's CPU ops once
    import sys

    if sys.argv[1:] != ["--warm-up"]:
        sys.exit("usage: python -m training.engine --warm-up")
    # Into the cache the runs load it from (one per Python environment), not the user's shared
    # one: otherwise a fresh set-up's first run compiles it again, a minute without a word.
    from training.env import apply_defaults  # noqa: PLC0415

    apply_defaults()
    setup_distributed()
    print("DeepSpeed process group ready")
