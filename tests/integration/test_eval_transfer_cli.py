"""`rollforge eval transfer` end to end: the real CLI over a tiny run folder, each cell evaluated
through `rollforge eval --model`'s flow (Prefect API, Dask cluster, sandbox), then run again
reusing every evaluation from the store; bad input refused with exit 2 before anything runs."""
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from envs.sources import build_pool
from flows.config import load_config, task_sources
from storage import evaluations, registry
from training.trainer import sft_warm_start

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [json.dumps({"name": fam, "kind": "io", "options": {
    "families": [fam], "difficulties": [1], "tasks_per_family": 3, "n_tests": 3}})
    for fam in ("add", "repeat")]


def _tiny_run(run_dir: Path, family: str) -> None:
    """A run folder as `rollforge run` leaves it: its resolved config (trained on `family`)
    and a finished checkpoint v0 (a few SFT steps on that family's references)."""
    cfg = load_config(ROOT / "configs/tiny.yaml", [f"tasks.families=[{family}]"])
    pairs = [t for t in build_pool(task_sources(cfg)) if t.reference][:8]
    sft_warm_start(str(run_dir), [t.prompt for t in pairs], [t.reference for t in pairs],
                   cfg.policy, cfg.sft, cfg.rl, cfg.seed)
    registry.write_run_config(str(run_dir), cfg.model_dump(mode="json"), cfg.hash())


def _transfer(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", "eval", "transfer", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_transfer_matrix_is_evaluated_once_then_reused_and_written(tmp_path):
    run = tmp_path / "run-add"
    _tiny_run(run, "add")
    base = str(run / "checkpoints" / "v0000")  # the checkpoint form of --model, as the base
    store, out = tmp_path / "store", tmp_path / "out"
    common = ["--base", base, "--sources", *SOURCES, "--split", "all", "--n", "1",
              "--config", str(ROOT / "configs/tiny.yaml"), "--store", str(store)]

    bad = _transfer(str(tmp_path), *common, "--out", str(out))  # a folder with no checkpoint
    assert bad.returncode == 2 and "no finished checkpoint" in bad.stderr, bad.stderr
    unknown = _transfer(str(run), "--base", base, "--sources", "no-such-kind", "--out", str(out),
                        "--store", str(store))
    assert unknown.returncode == 2 and "no-such-kind" in unknown.stderr, unknown.stderr
    assert not store.exists()  # refused before any evaluation started

    first = _transfer(str(run), *common, "--out", str(out))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "cells: 0 reused from the store, 4 evaluated now (of 4)" in first.stdout
    assert "| checkpoint | add | repeat |" in first.stdout  # the table is printed too
    assert len(list((store / evaluations.EVAL_DIR).iterdir())) == 4  # 2 checkpoints x 2 sources

    records = list(csv.DictReader((out / "transfer.csv").open()))
    assert [(r["checkpoint"].split(" ")[0], r["source"]) for r in records] == [
        ("base", "add"), ("base", "repeat"), ("run-add", "add"), ("run-add", "repeat")]
    assert "trained on io[add]" in records[2]["checkpoint"]
    assert {r["tasks"] for r in records} == {"3"}
    # the run's checkpoint is the base's own v0: the same greedy decodes, no change on any task
    assert {r["delta"] for r in records[2:]} == {"0.0"}
    assert (out / "transfer.png").read_bytes()[:4] == b"\x89PNG"
    assert "| checkpoint | add | repeat |" in (out / "transfer.md").read_text()

    again = _transfer(str(run), *common, "--out", str(out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "cells: 4 reused from the store, 0 evaluated now (of 4)" in again.stdout
    assert list(csv.DictReader((out / "transfer.csv").open())) == records
