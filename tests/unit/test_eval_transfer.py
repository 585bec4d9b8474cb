"""The transfer matrix over evaluation rows read back from real Parquet chunk files."""
import csv
import io
import json
import math
from pathlib import Path

import pytest

from flows.eval_stats import bootstrap_mean
from flows.eval_transfer import build_matrix, to_markdown, write_outputs
from storage import evaluations


def _row(eval_id, model, source, task, passed, mode="greedy", idx=0):
    return {"eval_id": eval_id, "model": model, "version": 1, "config_hash": "h",
            "code_version": "c", "seed": 0, "source": source, "family": source,
            "difficulty": 1, "split": "heldout", "task_id": task, "mode": mode,
            "sample_index": idx, "kind": "io", "prompt": "p", "completion": "x",
            "answer_executed": None, "reward": None if passed is None else
            float(passed), "passed": passed, "tests_passed": None, "tests_total": None,
            "status": "ok", "hack_flags": [], "infra_error": passed is None, "turns": 1,
            "gen_s": 0.0, "tool_calls": None, "chunk": 0, "written_at": "2026-12-04T00:00:00+00:00"}


def _store(tmp_path, outcomes):
    """outcomes: {(checkpoint, source): {task: passed}} -> rows read back from Parquet."""
    store = str(tmp_path / "store")
    rows = {}
    for i, ((ck, src), by_task) in enumerate(outcomes.items()):
        eid = f"e{i:03d}"
        written = [_row(eid, ck, src, t, p) for t, p in by_task.items()]
        # a sampled row that fails everywhere: the matrix is greedy pass@1 and must ignore it
        written.append(_row(eid, ck, src, "t0", False, mode="sampled"))
        evaluations.write_chunk(store, eid, 0, written)
        rows[(ck, src)] = evaluations.read_evaluation(store, eid).to_pylist()
    return rows


def test_cells_are_greedy_pass1_with_wilson_and_a_paired_change_from_the_base(tmp_path):
    rows = _store(tmp_path, {
        ("base", "a"): {"t0": True, "t1": True, "t2": False, "t3": False},
        ("run", "a"): {"t0": True, "t1": True, "t2": True, "t3": True},
        ("base", "b"): {"u0": True, "u1": False, "u2": True, "u3": None},  # u3: infra error
        ("run", "b"): {"u0": True, "u1": False, "u2": True, "u3": True},
    })
    m = build_matrix(rows, ["base", "run"], ["a", "b"])
    base_a, run_a = m.cells[("base", "a")], m.cells[("run", "a")]
    # Wilson at 2/4, z = 1.96: centre (0.5 + 3.8415/8) / (1 + 3.8415/4) = 0.5, half-width
    # 1.96 * sqrt(0.0625 + 3.8415/64) / 1.9604 = 0.3500 -> [0.150, 0.850]
    assert base_a.pass1 == 0.5 and base_a.tasks == 4
    assert base_a.ci == pytest.approx((0.150, 0.850), abs=1e-3)
    assert base_a.delta is None  # the base has no change from itself
    # per-task differences 0, 0, 1, 1: mean 0.5; resampled means lie in [0, 1] and the 95%
    # interval of 4 tasks must hold neither 0 nor 1 entirely inside it at once
    assert run_a.pass1 == 1.0 and run_a.delta == 0.5 and run_a.paired == 4
    lo, hi = run_a.delta_ci
    assert 0.0 <= lo < 0.5 < hi <= 1.0
    # source b: the base's infra error is left out (3 tasks), never counted as a failure; the
    # run's u3 has no base to pair with, so the change is over 3 tasks with equal outcomes: 0
    assert m.cells[("base", "b")].tasks == 3 and m.cells[("base", "b")].pass1 == pytest.approx(2 / 3)
    run_b = m.cells[("run", "b")]
    assert run_b.tasks == 4 and run_b.pass1 == 0.75
    assert run_b.paired == 3 and run_b.delta == 0.0 and run_b.delta_ci == (0.0, 0.0)


def test_the_change_is_paired_by_task_so_shared_successes_add_no_noise(tmp_path):
    # 20 tasks: both solve t0..t9, the run solves t10 too. The per-task differences are one 1
    # and nineteen 0s, so a resampled mean is k/20 with k ~ Binomial(20, 1/20): the 95%
    # interval is [0, 0.15] at most, while either checkpoint's own Wilson interval (10 or 11
    # of 20) is about 0.4 wide: unpaired intervals could not tell the two apart at all
    base = {f"t{i}": i < 10 for i in range(20)}
    run = {f"t{i}": i < 11 for i in range(20)}
    rows = _store(tmp_path, {("base", "a"): base, ("run", "a"): run})
    m = build_matrix(rows, ["base", "run"], ["a"], seed=3)
    c = m.cells[("run", "a")]
    assert c.delta == pytest.approx(0.05) and c.paired == 20
    lo, hi = c.delta_ci
    assert lo == 0.0 and 0.05 <= hi <= 0.15
    widths = [m.cells[(ck, "a")].ci[1] - m.cells[(ck, "a")].ci[0] for ck in ("base", "run")]
    assert min(widths) > 0.35
    assert all(math.isnan(x) for x in bootstrap_mean([], seed=0))


def test_tables_and_heatmap_are_written_with_every_cell(tmp_path):
    rows = _store(tmp_path, {
        ("base", "a"): {"t0": False, "t1": False},
        ("trained on a", "a"): {"t0": True, "t1": False},
        ("base", "b"): {"u0": True},
        ("trained on a", "b"): {"u0": False},
    })
    m = build_matrix(rows, ["base", "trained on a"], ["a", "b"])
    paths = write_outputs(m, tmp_path / "out")
    md = paths["markdown"].read_text()
    assert md.splitlines()[0] == "| checkpoint | a | b |"
    assert "| trained on a | 0.500 [" in md and "Δ +0.500 [" in md and "Δ -1.000 [" in md
    records = list(csv.DictReader(io.StringIO(paths["csv"].read_text())))
    assert [(r["checkpoint"], r["source"]) for r in records] == [
        ("base", "a"), ("base", "b"), ("trained on a", "a"), ("trained on a", "b")]
    cell = records[3]
    assert float(cell["pass1"]) == 0.0 and float(cell["delta"]) == -1.0
    assert records[0]["delta"] == ""  # the base: no change
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "transfer.csv", "transfer.md", "transfer.png"]  # no temporary left behind
    assert to_markdown(m) == md
    assert math.isnan(build_matrix({}, ["base"], ["a"]).cells[("base", "a")].pass1)


def test_matrix_is_published_as_a_table_artifact_only_inside_a_flow_run(tmp_path):
    from prefect import flow
    from prefect.artifacts import Artifact
    from prefect.testing.utilities import prefect_test_harness

    from flows.eval_transfer_flow import publish

    rows = _store(tmp_path, {("base", "a"): {"t0": False, "t1": True},
                             ("run", "a"): {"t0": True, "t1": True}})
    m = build_matrix(rows, ["base", "run"], ["a"])
    notes = []

    @flow
    def publishing():
        publish(m, log=notes.append)

    # An earlier test in this process may have run the CLI under capsys, and Prefect's console
    # handler still writes to that closed stream (its error handling then recursed): set
    # Prefect's logging up again on this test's streams.
    from prefect.logging.configuration import setup_logging

    setup_logging(incremental=False)
    with prefect_test_harness(server_startup_timeout=180):
        publish(m, log=notes.append)  # outside a flow run: nothing to attach it to
        assert Artifact.get("rollforge-transfer-matrix") is None
        publishing()
        art = Artifact.get("rollforge-transfer-matrix")
    assert notes == []
    assert art is not None and art.type == "table"
    cells = json.loads(art.data) if isinstance(art.data, str) else art.data
    assert [(c["checkpoint"], c["source"], c["pass1"], c["delta"]) for c in cells] == [
        ("base", "a", 0.5, None), ("run", "a", 1.0, 0.5)]
    assert art.description == to_markdown(m)


def test_a_runs_label_names_what_it_trained_on_not_its_held_out_only_sources(monkeypatch):
    """configs/smollm2.yaml evaluates HumanEval but has no training split of it."""
    from flows import eval_transfer_flow  # noqa: PLC0415
    from flows.config import load_config  # noqa: PLC0415

    cfg = load_config(Path(__file__).resolve().parents[2] / "configs/smollm2.yaml")
    monkeypatch.setattr(eval_transfer_flow.registry, "read_run_config",
                        lambda run_dir: cfg.model_dump(mode="json"))
    label = eval_transfer_flow.trained_on("runs/smollm2")
    assert label.startswith("io[add,mul,") and label.endswith("]+testfile"), label
