"""Policy checkpoints: `<run_dir>/checkpoints/v<N>/` holds a plain Hugging Face model directory
(`model/`) and the DeepSpeed engine state (`engine/`: optimizer moments, step counters).
A version appears by an atomic rename of a finished temporary folder, so a crash never leaves a
half-written checkpoint where a reader would find it."""
from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path


def checkpoint_dir(run_dir: str, version: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"v{version:04d}"


def staging_dir(run_dir: str, version: int) -> Path:
    p = Path(run_dir) / "checkpoints" / f".tmp-v{version:04d}-{uuid.uuid4().hex[:8]}"
    p.mkdir(parents=True)
    return p


def publish(staging: Path, final: Path, meta: dict) -> Path:
    """Write meta.json into `staging`, then move it to `final` (replacing an older copy)."""
    (staging / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
    if final.exists():
        trash = final.with_name(f".trash-{final.name}-{uuid.uuid4().hex[:8]}")
        os.rename(final, trash)
        os.rename(staging, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.rename(staging, final)
    return final


def exists(run_dir: str, version: int) -> bool:
    return (checkpoint_dir(run_dir, version) / "meta.json").is_file()


def prune(run_dir: str, keep_last: int, keep: set[int] = frozenset()) -> list[int]:
    """Delete all but the newest `keep_last` versions (and those in `keep`); returns deleted."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    for stale in root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    versions = sorted(int(p.name[1:]) for p in root.glob("v[0-9]*") if (p / "meta.json").is_file())
    doomed = [v for v in versions[:-keep_last] if v not in keep] if keep_last else []
    for v in doomed:
        shutil.rmtree(checkpoint_dir(run_dir, v), ignore_errors=True)
    return doomed
