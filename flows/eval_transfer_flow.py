"""`rollforge eval transfer`: the base and each run's final checkpoint, evaluated on every source
through `rollforge eval --model`'s own flow (flows/eval_model.py), one evaluation a (checkpoint,
source) cell; a cell whose evaluation is already whole in the store (same model, version,
source, split, seed, n, config and chunk size: the same eval_id) is read, not run. The matrix
(flows/eval_transfer.py) is written as Markdown, CSV and a heatmap PNG, and published as a
Prefect table artifact.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from prefect import flow

from flows.config import ConfigError, RunConfig, task_sources
from flows.eval_model import EvalInputError, evaluate_model_flow, parse_source, plan
from flows.eval_transfer import build_matrix, csv_records, to_markdown, write_outputs
from storage import evaluations, registry
from training import checkpoints


@dataclass(frozen=True)
class Checkpoint:
    label: str      # the matrix's row
    model: str      # what `rollforge eval --model` takes


def has_training_tasks(src) -> bool:
    """Whether a source gives the run anything to train on (HumanEval, a source with no
    training split, does not); True when its tasks cannot be listed here."""
    from envs.base import EnvError  # noqa: PLC0415
    from envs.sources import load_source  # noqa: PLC0415

    try:
        return any(t.split == "train" for t in load_source(src))
    except (EnvError, OSError, ValueError):
        return True


def trained_on(run_dir: str) -> str:
    """What a run trained on, from its resolved config's sources: `io[add]`, `logic`, ...;
    a source with no training split (evaluated by the run, never trained on) is left out."""
    try:
        cfg = RunConfig.model_validate(registry.read_run_config(run_dir))
        srcs = task_sources(cfg)
    except (FileNotFoundError, ValueError, ConfigError) as exc:
        raise EvalInputError(f"run {run_dir!r}: cannot read what it trained on ({exc})") from None
    parts = []
    for s in srcs:
        if not has_training_tasks(s):
            continue
        fams = s.families or s.options.get("families")
        # the kind, not the source's label: configs name their io source "procedural"
        parts.append((s.kind or s.label) + (f"[{','.join(fams)}]" if fams else ""))
    return "+".join(parts) or "no training task"


def final_version(run_dir: str) -> int:
    path = Path(run_dir)
    if not path.is_dir():
        raise EvalInputError(f"run {run_dir!r}: no such folder")
    vs = sorted(int(d.name[1:]) for d in (path / "checkpoints").glob("v[0-9]*")
                if d.name[1:].isdigit() and checkpoints.exists(str(path), int(d.name[1:])))
    if not vs:
        raise EvalInputError(f"run {run_dir!r}: no finished checkpoint under "
                             f"{path / 'checkpoints'} (expected a `rollforge run` folder)")
    return vs[-1]


def checkpoints_of(base: str, runs: list[str]) -> list[Checkpoint]:
    """The base first, then each run's final version labelled by what it trained on."""
    if not runs:
        raise EvalInputError("give at least one run folder to compare with the base")
    out = [Checkpoint(f"base ({Path(base).name or base})", base)]
    for run in runs:
        v = final_version(run)
        label = f"{Path(run).resolve().name} v{v} (trained on {trained_on(run)})"
        out.append(Checkpoint(label, f"{run}:{v}"))
    if len({c.label for c in out}) < len(out):
        raise EvalInputError(f"two checkpoints share a label: {[c.label for c in out]}")
    return out


def source_labels(sources: list[str]) -> list[str]:
    labels = [parse_source(s).label for s in sources]
    if len(set(labels)) < len(labels):
        raise EvalInputError(f"--sources: two sources share the label {labels}; give each a "
                             "\"name\" in its JSON object")
    return labels


def plans(cks: list[Checkpoint], sources: list[str], **kw) -> dict:
    """Every cell's evaluation plan, checked before anything runs (unknown sources, bad
    settings and unloadable models fail here)."""
    labels = source_labels(sources)
    return {(c.label, lab): plan(c.model, [src], **kw)
            for c in cks for src, lab in zip(sources, labels)}


def is_whole(p) -> bool:
    return set(range(len(p.chunks))) <= evaluations.chunks_written(p.store, p.eval_id)


def publish(matrix, log=print) -> None:
    """The matrix as a Prefect table artifact, when a flow run is there to hold it."""
    try:
        from prefect.artifacts import create_table_artifact  # noqa: PLC0415
        from prefect.context import FlowRunContext  # noqa: PLC0415

        if FlowRunContext.get() is None:
            return
        # NaN (a cell without scored rows) is not JSON: an empty cell in the UI
        cells = [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}
                 for r in csv_records(matrix)]
        create_table_artifact(cells, key="rollforge-transfer-matrix",
                              description=to_markdown(matrix))
    except Exception as exc:  # noqa: BLE001 (a UI that cannot be reached costs a warning)
        log(f"transfer: the Prefect artifact was not published ({exc})")


@flow(name="rollforge-eval-transfer", log_prints=True)
def transfer_flow(base: str, runs: list[str], sources: list[str], out: str, n: int = 4,
                  split: str = "heldout", seed: int | None = None, store: str = "runs",
                  config_file: str | None = None, overrides: list[str] | None = None,
                  chunk_size: int = 16) -> dict:
    """The transfer matrix of the base and each run's final checkpoint over the sources.

    Args:
        base: the base model (any `rollforge eval --model` form).
        runs: run folders; each contributes its newest finished checkpoint.
        sources: the matrix's columns (kinds, task files, JSON source objects).
        out: folder for transfer.md, transfer.csv and transfer.png.
        n, split, seed, store, config_file, overrides, chunk_size: as `rollforge eval --model`.
    """
    kw = dict(n=n, split=split, seed=seed, store=store, config_file=config_file,
              overrides=list(overrides or []), chunk_size=chunk_size)
    cks = checkpoints_of(base, runs)
    cells = plans(cks, sources, **kw)
    labels = source_labels(sources)
    rows, reused = {}, 0
    for (ck, lab), p in cells.items():
        src = sources[labels.index(lab)]
        if is_whole(p):
            reused += 1
        else:
            model = next(c.model for c in cks if c.label == ck)
            evaluate_model_flow(model=model, sources=[src], **kw)
        rows[(ck, lab)] = evaluations.read_evaluation(store, p.eval_id).to_pylist()
        print(f"transfer: {ck} on {lab}: evaluation {p.eval_id}")
    seed_ = next(iter(cells.values())).cfg.seed
    matrix = build_matrix(rows, [c.label for c in cks], labels, seed=seed_)
    paths = write_outputs(matrix, out)
    publish(matrix)
    return {"cells": len(cells), "reused": reused, "run": len(cells) - reused,
            "table": to_markdown(matrix), **{f"{k}_path": str(v) for k, v in paths.items()}}
