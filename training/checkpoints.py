"""Policy checkpoints: `<run_dir>/checkpoints/v<N>/` holds a plain Hugging Face model directory
(`model/`) and the DeepSpeed engine state (`engine/`: optimizer moments, step counters).
A version appears by an atomic rename of a finished temporary folder, so a crash never leaves a
half-written checkpoint where a reader would find it (and one written again replaces the old
by an atomic exchange: `swap_in`)."""
from __future__ import annotations

import ctypes
import errno
import functools
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


# renameat2(2)'s flag that swaps two existing paths in one step (Linux 3.15+, glibc 2.28+;
# ext4, xfs, btrfs, tmpfs and overlayfs have it, NFS does not). Python's os has no renameat2.
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@functools.lru_cache(maxsize=1)
def _renameat2():
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not Linux, or a libc without it
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _exchange(a: Path, b: Path) -> bool:
    """Swap the two existing paths atomically; False where the system or file system cannot."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def swap_in(staging: Path, final: Path) -> Path:
    """Move the finished folder `staging` to `final`, replacing an older copy so that a reader
    of `final` finds the whole old folder or the whole new one, never none: the two are
    exchanged in one step, then the old copy (now at `staging`) is deleted. Where the file
    system cannot exchange (NFS), two renames: `final` is missing for the moment between."""
    if not final.exists():
        os.rename(staging, final)
    elif _exchange(staging, final):
        shutil.rmtree(staging, ignore_errors=True)
    else:
        trash = final.with_name(f".trash-{final.name}-{uuid.uuid4().hex[:8]}")
        os.rename(final, trash)
        os.rename(staging, final)
        shutil.rmtree(trash, ignore_errors=True)
    return final


def publish(staging: Path, final: Path, meta: dict) -> Path:
    """Write meta.json into `staging`, then move it to `final` (replacing an older copy)."""
    (staging / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
    return swap_in(staging, final)


def exists(run_dir: str, version: int) -> bool:
    return (checkpoint_dir(run_dir, version) / "meta.json").is_file()


def clear_staging(run_dir: str) -> None:
    """Delete the staging folders a killed writer left (none may be in use)."""
    for stale in (Path(run_dir) / "checkpoints").glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)


def prune(run_dir: str, keep_last: int, keep: set[int] = frozenset(),
          best_metric: str | None = None, mode: str = "max",
          staging: bool = True) -> list[int]:
    """Delete all but the newest `keep_last` versions (and those in `keep`, and the best by
    `best_metric` from `record_scores`, if named); returns deleted. `staging`: also the
    staging folders of unfinished writes (False while a writer may be at work)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    if staging:
        clear_staging(run_dir)
    found = versions(run_dir)
    if best_metric is not None:
        best = best_version(run_dir, best_metric, mode)
        keep = set(keep) | ({best} if best is not None else set())
    doomed = [v for v in found[:-keep_last] if v not in keep] if keep_last else []
    for v in doomed:
        shutil.rmtree(checkpoint_dir(run_dir, v), ignore_errors=True)
    return doomed


def read_meta(version_dir: Path) -> dict:
    """A published version's meta.json ({} when it has none)."""
    p = Path(version_dir) / "meta.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def sft_progress_dir(run_dir: str) -> Path:
    """Resumable engine states of an unfinished SFT warm start (not a published version)."""
    return Path(run_dir) / "checkpoints" / "sft-progress"


def versions(run_dir: str) -> list[int]:
    """Published versions, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(int(p.name[1:]) for p in root.glob("v[0-9]*") if (p / "meta.json").is_file())


SCORES_FILE = "scores.json"


def record_scores(run_dir: str, version: int, scores: dict[str, float]) -> None:
    """Attach evaluation figures to a published version (merged into its scores.json, replaced
    atomically), so `best_version` and `prune(best_metric=...)` can find the best one."""
    folder = checkpoint_dir(run_dir, version)
    if not (folder / "meta.json").is_file():
        raise FileNotFoundError(f"version {version} of {run_dir} is not published")
    p = folder / SCORES_FILE
    merged = {**(json.loads(p.read_text()) if p.is_file() else {}), **scores}
    tmp = folder / f".{SCORES_FILE}.{uuid.uuid4().hex[:8]}"
    tmp.write_text(json.dumps(merged, indent=2, sort_keys=True))
    os.replace(tmp, p)


def best_version(run_dir: str, metric: str, mode: str = "max") -> int | None:
    """The version whose scores.json has the best `metric` (NaN and missing are never best;
    ties go to the newest)."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode {mode!r}: expected 'max' or 'min'")
    best, best_v = None, None
    for v in versions(run_dir):
        p = checkpoint_dir(run_dir, v) / SCORES_FILE
        value = json.loads(p.read_text()).get(metric) if p.is_file() else None
        if value is None or value != value:
            continue
        if best is None or (value >= best if mode == "max" else value <= best):
            best, best_v = value, v
    return best_v
