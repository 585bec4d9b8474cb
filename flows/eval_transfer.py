"""The transfer matrix: rows are checkpoints (the base, then each run's final version, labelled
by what it trained on), columns are task sources, a cell is greedy pass@1 with its Wilson 95%
interval and the change from the base with a paired-bootstrap 95% interval. Plain functions over
evaluation rows (storage/evaluations.py's columns): no Prefect, no Dask.

Why a paired bootstrap for the change: every checkpoint is evaluated on the same tasks of a
source (same source, split and seed), so the per-task difference d_t = passed_run(t) -
passed_base(t) is one draw per task and the tasks are the unit sampled. Resampling tasks with
replacement and taking the 2.5% and 97.5% quantiles of mean(d) keeps the pairing (two unpaired
Wilson intervals would ignore that the same easy tasks are solved by both and be too wide).
Like every bootstrap it is too narrow with few tasks, and a difference of exactly zero on every
task gives [0, 0]: the task count is written beside every cell.
"""
from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# the paired interval is the percentile bootstrap of the mean of the per-task differences
from flows.eval_stats import bootstrap_mean, wilson


@dataclass(frozen=True)
class Cell:
    """One (checkpoint, source) cell."""
    tasks: int                       # tasks with a scored greedy sample
    pass1: float                     # greedy pass@1 (nan: no scored row)
    ci: tuple[float, float]          # Wilson 95%
    delta: float | None = None       # pass1 - base's pass1 on the paired tasks (None: the base)
    delta_ci: tuple[float, float] | None = None  # paired bootstrap 95% over tasks
    paired: int = 0                  # tasks scored for both this checkpoint and the base


@dataclass(frozen=True)
class Matrix:
    rows: list[str]                  # checkpoint labels, the base first
    columns: list[str]               # source labels
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)


def greedy_outcomes(rows: list[dict]) -> dict[str, bool]:
    """task_id -> passed for the greedy rows that were scored (infra errors left out, never
    counted as failures)."""
    return {r["task_id"]: bool(r["passed"]) for r in rows
            if r["mode"] == "greedy" and r["passed"] is not None}


def build_matrix(rows_by_cell: dict[tuple[str, str], list[dict]], checkpoints: list[str],
                 sources: list[str], seed: int = 0) -> Matrix:
    """The matrix from each (checkpoint, source)'s evaluation rows; checkpoints[0] is the base."""
    base = checkpoints[0]
    cells = {}
    for src in sources:
        base_out = greedy_outcomes(rows_by_cell.get((base, src), []))
        for ck in checkpoints:
            out = greedy_outcomes(rows_by_cell.get((ck, src), []))
            k, n = sum(out.values()), len(out)
            cell = Cell(n, k / n if n else math.nan, wilson(k, n))
            if ck != base:
                common = sorted(set(out) & set(base_out))
                diffs = [float(out[t]) - float(base_out[t]) for t in common]
                cell = Cell(n, cell.pass1, cell.ci,
                            float(np.mean(diffs)) if diffs else math.nan,
                            bootstrap_mean(diffs, seed), len(common))
            cells[(ck, src)] = cell
    return Matrix(list(checkpoints), list(sources), cells)


def _f(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.3f}"


def _signed(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:+.3f}"


def cell_text(c: Cell) -> str:
    text = f"{_f(c.pass1)} [{_f(c.ci[0])}, {_f(c.ci[1])}] (n={c.tasks})"
    if c.delta is not None:
        lo, hi = c.delta_ci
        text += f"; Δ {_signed(c.delta)} [{_signed(lo)}, {_signed(hi)}]"
    return text


def to_markdown(m: Matrix) -> str:
    head = ["checkpoint"] + m.columns
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for ck in m.rows:
        lines.append("| " + " | ".join([ck] + [cell_text(m.cells[(ck, s)]) for s in m.columns])
                     + " |")
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ["checkpoint", "source", "tasks", "pass1", "pass1_low", "pass1_high", "delta",
               "delta_low", "delta_high", "paired_tasks"]


def csv_records(m: Matrix) -> list[dict]:
    """One record a cell (long format: what a plotting or stats tool wants)."""
    out = []
    for ck in m.rows:
        for s in m.columns:
            c = m.cells[(ck, s)]
            d_lo, d_hi = c.delta_ci if c.delta_ci else (None, None)
            out.append({"checkpoint": ck, "source": s, "tasks": c.tasks, "pass1": c.pass1,
                        "pass1_low": c.ci[0], "pass1_high": c.ci[1], "delta": c.delta,
                        "delta_low": d_lo, "delta_high": d_hi, "paired_tasks": c.paired})
    return out


def to_csv(m: Matrix) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in csv_records(m):
        w.writerow({k: "" if v is None or (isinstance(v, float) and math.isnan(v)) else v
                    for k, v in r.items()})
    return buf.getvalue()


def heatmap_png(m: Matrix) -> bytes:
    """pass@1 as colour, each cell annotated with pass@1 and the change from the base."""
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    grid = np.array([[m.cells[(ck, s)].pass1 for s in m.columns] for ck in m.rows], dtype=float)
    fig, ax = plt.subplots(figsize=(1.8 + 2.2 * len(m.columns), 1.2 + 0.7 * len(m.rows)))
    im = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(m.columns)), m.columns)
    ax.set_yticks(range(len(m.rows)), m.rows)
    for i, ck in enumerate(m.rows):
        for j, s in enumerate(m.columns):
            c = m.cells[(ck, s)]
            text = _f(c.pass1) + ("" if c.delta is None else f"\nΔ {_signed(c.delta)}")
            ax.text(j, i, text, ha="center", va="center", fontsize=8,
                    color="white" if not (c.pass1 > 0.6) else "black")
    fig.colorbar(im, ax=ax, label="greedy pass@1")
    ax.set_title("transfer: greedy pass@1 (Δ from the base)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_outputs(m: Matrix, out_dir: str | Path) -> dict[str, Path]:
    """transfer.md, transfer.csv and transfer.png in out_dir, each by one rename."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / "transfer.md", "csv": out / "transfer.csv",
             "png": out / "transfer.png"}
    _write_atomic(paths["markdown"], to_markdown(m).encode())
    _write_atomic(paths["csv"], to_csv(m).encode())
    _write_atomic(paths["png"], heatmap_png(m))
    return paths
