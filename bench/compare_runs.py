"""Two runs of the same config and seed, compared: the trajectory rows column by column and every
checkpoint's weights tensor by tensor. It shows whether a change that should not alter behaviour
(a refactor) left rows, rewards and weights exactly as they were, and, where it did not, which
columns and which versions moved.

    python bench/compare_runs.py RUN_DIR_A RUN_DIR_B

Columns that differ by nature between two runs (wall times, timestamps, ids made at run time,
the code version) are listed apart and not counted. Exit 0 when rows and weights are equal, 1
when anything counted differs, 2 on bad input.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# differ between any two runs: time, and what names the run or the code rather than the work
VOLATILE = ("seconds", "time", "timestamp", "created", "duration", "code_version", "run_uid",
            "worker", "host", "hostname", "pid", "image_digest", "queue")
KEY = ["iteration", "group_id", "sample_index"]


def volatile(column: str) -> bool:
    return any(v in column for v in VOLATILE)


def _steady(v):
    """A map column's entries (Arrow gives (key, value) pairs) without its volatile keys."""
    if isinstance(v, (list, np.ndarray)) and len(v) and all(
            isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], str) for e in v):
        return [e for e in v if not volatile(e[0])]
    return v


def _same(a, b) -> bool:
    a, b = _steady(a), _steady(b)
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    if isinstance(a, (list, tuple, np.ndarray)) or isinstance(b, (list, tuple, np.ndarray)):
        try:
            return bool(np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object)))
        except (TypeError, ValueError):
            return False
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def compare_rows(a: pd.DataFrame, b: pd.DataFrame) -> tuple[dict[str, int], list[str], dict]:
    """(differing rows per counted column, volatile columns skipped, columns in one run only)."""
    if len(a) != len(b):
        return {"(row count)": abs(len(a) - len(b))}, [], {}
    a = a.sort_values(KEY).reset_index(drop=True)
    b = b.sort_values(KEY).reset_index(drop=True)
    only = {"only in A": sorted(set(a.columns) - set(b.columns)),
            "only in B": sorted(set(b.columns) - set(a.columns))}
    diffs, skipped = {}, []
    for col in [c for c in a.columns if c in b.columns]:
        if volatile(col):
            skipped.append(col)
            continue
        n = sum(not _same(x, y) for x, y in zip(a[col], b[col]))
        if n:
            diffs[col] = n
    return diffs, skipped, only


def compare_weights(run_a: Path, run_b: Path) -> dict[str, float]:
    """Largest |difference| of any parameter, per checkpoint version present in both runs."""
    from safetensors.torch import load_file

    out = {}
    versions = sorted({p.name for p in (run_a / "checkpoints").glob("v*") if p.is_dir()}
                      & {p.name for p in (run_b / "checkpoints").glob("v*") if p.is_dir()})
    for v in versions:
        worst = 0.0
        for fa in sorted((run_a / "checkpoints" / v / "model").glob("*.safetensors")):
            fb = run_b / "checkpoints" / v / "model" / fa.name
            ta, tb = load_file(str(fa)), load_file(str(fb)) if fb.exists() else {}
            if set(ta) != set(tb):
                worst = float("inf")
                continue
            for k in ta:
                d = (ta[k].float() - tb[k].float()).abs().max().item() if ta[k].numel() else 0.0
                worst = max(worst, d if ta[k].shape == tb[k].shape else float("inf"))
        out[v] = worst
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_a")
    p.add_argument("run_b")
    a = p.parse_args(argv)
    runs = [Path(a.run_a), Path(a.run_b)]
    for r in runs:
        if not (r / "checkpoints").is_dir():
            print(f"compare_runs: {r} is not a run folder (no checkpoints/)", file=sys.stderr)
            return 2
    from storage.trajectories import read_trajectories

    rows = [read_trajectories(str(r)) for r in runs]
    diffs, skipped, only = compare_rows(*rows)
    weights = compare_weights(*runs)
    print(f"rows: A {len(rows[0])}, B {len(rows[1])}")
    print("columns that differ (rows):", diffs or "none")
    print("not compared (differ by nature):", ", ".join(skipped) or "none")
    for side, cols in only.items():
        if cols:
            print(f"columns {side}: {', '.join(cols)}")
    for v, d in weights.items():
        print(f"checkpoint {v}: max |weight difference| {d:.3g}")
    same = not diffs and all(d == 0.0 for d in weights.values()) and bool(weights)
    print("EQUAL" if same else "DIFFERENT")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
