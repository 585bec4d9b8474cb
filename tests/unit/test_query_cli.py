"""`rollforge query`: DuckDB views over a store, output formats, errors; the analysts' guide runs."""
from __future__ import annotations

import csv
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from flows.cli import main
from storage.registry import (mark_iteration_done, record_checkpoint, record_metrics,
                              write_run_config)
from storage.schema import TRAJECTORY_SCHEMA
from storage.synthetic import example_rows
from storage.trajectories import compact, write_shard

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "analysts.md"


@pytest.fixture
def store(tmp_path, monkeypatch):
    """runs/run-a: iterations 0 and 1 (two shards of 7 rows each, example_row i = 0..13),
    iteration 0 compacted; runs/run-b: iteration 0 (one shard, i = 0..6). cwd = tmp_path."""
    root = tmp_path / "runs"
    for run, iterations in (("run-a", (0, 1)), ("run-b", (0,))):
        run_dir = str(root / run)
        write_run_config(run_dir, {"run": run, "seed": 1}, "cafe0123")
        for it in iterations:
            n_shards = 2 if run == "run-a" else 1
            for k in range(n_shards):
                write_shard(run_dir, it, k, example_rows(7, run_id=run, iteration=it, start=7 * k))
            record_metrics(run_dir, it, {"rollout/pass_rate": 0.25 * (it + 1)})
            mark_iteration_done(run_dir, it)
        record_checkpoint(run_dir, iterations[-1], f"/ckpt/{run}", {"loss": 1.0})
    compact(str(root / "run-a"), 0)
    monkeypatch.chdir(tmp_path)
    return root


def query(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["query", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def csv_rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_filtered_query_counts_only_scored_rows_above_the_threshold(store, capsys):
    # example_row: reward = (i % 5) / 4, NaN when i % 7 == 6. Iteration 1 of run-a holds
    # i = 0..13; reward > 0.5 for i % 5 in (3, 4): i = 3, 4, 8, 9, 13, and 13 is unscored.
    code, out, _ = query(capsys, "--format", "csv",
                         "SELECT count(*) AS n FROM trajectories WHERE iteration = 1 AND reward > 0.5")
    assert code == 0 and csv_rows(out) == [{"n": "4"}]


def test_the_default_store_is_runs_in_the_working_folder(store, capsys):
    code, out, _ = query(capsys, "--format", "csv",
                         "SELECT run_id, iteration, count(*) AS n FROM trajectories GROUP BY ALL ORDER BY ALL")
    assert code == 0
    assert [(r["run_id"], r["iteration"], r["n"]) for r in csv_rows(out)] == [
        ("run-a", "0", "14"), ("run-a", "1", "14"), ("run-b", "0", "7")]


def test_trajectories_has_every_schema_column_including_schema_version(store, capsys):
    code, out, _ = query(capsys, "--format", "csv", "SELECT column_name FROM (DESCRIBE trajectories)")
    assert code == 0 and [r["column_name"] for r in csv_rows(out)] == TRAJECTORY_SCHEMA.names


def test_table_output_shows_the_rows_and_their_count(store, capsys):
    code, out, _ = query(capsys, "SELECT run_id, max(iteration) AS last FROM trajectories GROUP BY run_id ORDER BY run_id")
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].split() == ["run_id", "last"] and lines[1].split() == ["run-a", "1"]
    assert lines[-1] == "(2 rows)"


def test_runs_metrics_and_checkpoints_views(store, capsys):
    _, out, _ = query(capsys, "--format", "csv",
                      "SELECT run_id, last_finished_iteration, iterations_written, checkpoints, "
                      "config->>'run' AS cfg FROM runs ORDER BY run_id")
    assert [tuple(r.values()) for r in csv_rows(out)] == [
        ("run-a", "1", "2", "1", "run-a"), ("run-b", "0", "1", "1", "run-b")]
    _, out, _ = query(capsys, "--format", "csv",
                      'SELECT run_id, iteration, "rollout/pass_rate" AS p FROM metrics ORDER BY ALL')
    assert [tuple(r.values()) for r in csv_rows(out)] == [
        ("run-a", "0", "0.25"), ("run-a", "1", "0.5"), ("run-b", "0", "0.25")]
    _, out, _ = query(capsys, "--format", "csv", "SELECT run_id, iteration, path FROM checkpoints ORDER BY ALL")
    assert [tuple(r.values()) for r in csv_rows(out)] == [("run-a", "1", "/ckpt/run-a"), ("run-b", "0", "/ckpt/run-b")]


def test_csv_and_parquet_outputs_are_written_to_files(store, capsys, tmp_path):
    sql = "SELECT task_id, hack_flags, reward FROM trajectories WHERE run_id = 'run-b' ORDER BY task_id"
    assert query(capsys, "--output", "out.csv", sql)[0] == 0
    rows = csv_rows(Path("out.csv").read_text())
    assert len(rows) == 7 and rows[6]["reward"] == ""  # i = 6 unscored: empty, not 0
    assert query(capsys, "--format", "parquet", "--output", "out.parquet", sql)[0] == 0
    table = pq.read_table("out.parquet")
    assert table.num_rows == 7 and table.column_names == ["task_id", "hack_flags", "reward"]
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_parquet_without_an_output_file_is_a_usage_error(store, capsys):
    code, _, err = query(capsys, "--format", "parquet", "SELECT 1")
    assert code == 2 and "--output" in err


def test_a_sql_error_is_reported_with_exit_code_2(store, capsys):
    code, out, err = query(capsys, "SELEC count(*) FROM trajectories")
    assert code == 2 and out == "" and "SQL error" in err and "syntax error" in err
    code, _, err = query(capsys, "SELECT * FROM trajectory")
    assert code == 2 and "views: trajectories, runs, metrics, checkpoints" in err


def test_a_missing_store_is_a_clear_usage_error(tmp_path, capsys):
    code, _, err = query(capsys, "--store", str(tmp_path / "nowhere"), "SELECT 1")
    assert code == 2 and "no store at" in err


def test_an_empty_store_gives_empty_views_and_says_so(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, out, err = query(capsys, "--store", str(tmp_path / "empty"), "--format", "csv",
                           "SELECT count(*) AS n, avg(reward) AS r FROM trajectories")
    assert code == 0 and csv_rows(out) == [{"n": "0", "r": ""}]
    assert "has no runs yet" in err


def test_the_rollforge_command_runs_a_query(store):
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "query", "--store", str(store), "--format", "csv",
                           "SELECT count(*) AS n FROM trajectories"],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2],
                          env={**os.environ, "DO_NOT_TRACK": "1"})
    assert proc.returncode == 0, proc.stderr
    assert csv_rows(proc.stdout) == [{"n": "35"}]


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", GUIDE.read_text(), flags=re.S)


def test_every_sql_example_of_the_guide_runs(store, capsys):
    blocks = _blocks("sql")
    assert len(blocks) >= 8
    for sql in blocks:
        code, out, err = query(capsys, "--format", "csv", sql)
        assert code == 0, f"{sql}\n{err}"
        assert csv_rows(out), f"no rows from:\n{sql}"


def test_every_command_example_of_the_guide_runs_on_a_local_store(store, capsys):
    commands = [shlex.split(line) for block in _blocks("sh") for line in block.splitlines()
                if line.startswith("rollforge query") and "s3://" not in line]
    assert len(commands) >= 3
    for argv in commands:
        code, _, err = query(capsys, *argv[2:])
        assert code == 0, f"{argv}\n{err}"


def test_every_python_example_of_the_guide_runs(store, capsys):
    blocks = _blocks("python")
    assert len(blocks) >= 5
    for code in blocks:
        exec(compile(code, str(GUIDE), "exec"), {})
        assert capsys.readouterr().out.strip(), code


def test_the_guide_documents_every_column():
    text = GUIDE.read_text()
    missing = [name for name in TRAJECTORY_SCHEMA.names if f"| `{name}` |" not in text]
    assert missing == []
