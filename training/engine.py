"""The one module that knows DeepSpeed: process-group set-up and the training engine.

On CPU the engine runs over gloo (`DS_ACCELERATOR=cpu`); on GPUs and under the `deepspeed`
launcher the same code takes NCCL and the launcher's RANK/WORLD_SIZE.
"""
from __future__ import annotations

import os
import socket

import torch

from training.config import RLConfig


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup_distributed() -> None:
    """Join (or, alone, create) the process group. Idempotent."""
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed  # after DS_ACCELERATOR is set
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return
    # Launched alone (not by `deepspeed`/torchrun): a world of one process.
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo",
                               verbose=False)


def ds_config(cfg: RLConfig, micro_batch_size: int, grad_accum: int) -> dict:
    return {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": grad_accum,
        "gradient_clipping": cfg.grad_clip,
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": cfg.dtype == "bf16"},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def make_engine(model: torch.nn.Module, cfg: RLConfig, lr: float, micro_batch_size: int,
                grad_accum: int):
    """A DeepSpeed engine around `model` with a torch AdamW (no fused-Adam build on CPU)."""
    setup_distributed()
    import deepspeed

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                           config=ds_config(cfg, micro_batch_size, grad_accum))
    return engine


if __name__ == "__main__":  # `python -m training.engine --warm-up`: build DeepSpeed's CPU ops once
    import sys

    if sys.argv[1:] != ["--warm-up"]:
        sys.exit("usage: python -m training.engine --warm-up")
    setup_distributed()
    print("DeepSpeed process group ready")
