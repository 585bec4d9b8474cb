"""What one rank's update holds in memory: its peak (device memory on a GPU, resident set on
CPU) and the bytes of the training state ZeRO shards (the optimizer's moments from stage 1,
the weights themselves at stage 3), so the fall per rank from sharding is a measured figure.

Plain Python over torch and /proc; the engine is only read (its optimizer and parameters).
"""
from __future__ import annotations

import resource
from pathlib import Path

import torch

MB = 2 ** 20


def reset_peak() -> None:
    """Start a new peak: CUDA's allocator counter, or Linux's resident high-water mark
    (writing 5 to /proc/self/clear_refs resets VmHWM), so a resident rank's figure is this
    update's, not the largest since the process started."""
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        return
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:  # not Linux, or not allowed: the peak is then the process's lifetime peak
        pass


def peak_mb() -> float:
    """The peak since `reset_peak`: CUDA memory allocated by this process on its device, else
    the process's peak resident set (VmHWM; ru_maxrss where /proc is missing)."""
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / MB
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / MB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB


def _bytes(t) -> int:
    return t.numel() * t.element_size() if torch.is_tensor(t) else 0


def state_mb(engine) -> dict[str, float]:
    """This rank's share of the training state, in MB: `optimizer_mb` the optimizer's moments
    (what ZeRO-1 and -2 divide among ranks; under ZeRO a torch optimizer is wrapped, and its
    state is over this rank's flat partition), `params_mb` the model weights this rank holds
    (ZeRO-3 keeps only its partition, `ds_tensor`)."""
    opt = engine.optimizer
    inner = getattr(opt, "optimizer", opt)  # DeepSpeed's ZeRO optimizers wrap the torch one
    moments = sum(_bytes(v) for s in inner.state.values() for v in s.values())
    params = 0
    for p in engine.module.parameters():
        shard = getattr(p, "ds_tensor", None)
        params += _bytes(shard) if shard is not None else _bytes(p)
    return {"optimizer_mb": moments / MB, "params_mb": params / MB}


def rank_memory(engine) -> dict[str, float]:
    """The metrics of one rank's update: `train/peak_mem_mb`, `train/optimizer_mb`,
    `train/params_mb`."""
    return {"train/peak_mem_mb": peak_mb(),
            **{f"train/{k}": v for k, v in state_mb(engine).items()}}
