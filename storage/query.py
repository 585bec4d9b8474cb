"""DuckDB over a store: `trajectories`, `evaluations`, `runs`, `metrics` and `checkpoints` views.

`trajectories` reads exactly the live Parquet files of every run (never a temporary or a
superseded file), with `iteration` from the hive folder name, columns that older files lack
filled with NULL (`solved`, from the row's facts), and the columns in TRAJECTORY_SCHEMA order. The registry views are built
from the small JSON files of each run. `evaluations` reads the chunk files of every
`rollforge eval --model` in the store (storage/evaluations.py), in EVALUATION_SCHEMA's columns.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import duckdb
import pandas as pd
import pyarrow as pa

from rewards.outcome import SOLVED_SQL
from storage import evaluations, registry, trajectories
from storage.fs import Location, locate
from storage.schema import TRAJECTORY_SCHEMA

VIEWS = ("trajectories", "runs", "metrics", "checkpoints", "evaluations")


@dataclass
class StoreSummary:
    runs: int = 0
    files: int = 0
    notes: list[str] = field(default_factory=list)


def _duck_type(t: pa.DataType) -> str:
    if pa.types.is_list(t):
        return _duck_type(t.value_type) + "[]"
    if pa.types.is_map(t):
        return f"MAP({_duck_type(t.key_type)}, {_duck_type(t.item_type)})"
    if pa.types.is_struct(t):
        return "STRUCT(" + ", ".join(f"{_quote(f.name)} {_duck_type(f.type)}" for f in t) + ")"
    return {pa.int16(): "SMALLINT", pa.int32(): "INTEGER", pa.int64(): "BIGINT",
            pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.string(): "VARCHAR",
            pa.bool_(): "BOOLEAN"}[t]


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _file_ref(root: Location, path: str) -> str:
    return path if root.is_local else root.fs.unstrip_protocol(path)


def _columns(fields: list[pa.Field], present: set[str]) -> list[str]:
    """Each field by name, or a typed null where no file has it (written before it existed)."""
    return [_quote(f.name) if f.name in present
            else f"CAST(NULL AS {_duck_type(f.type)}) AS {_quote(f.name)}" for f in fields]


def _present(con: duckdb.DuckDBPyConnection, source: str) -> set[str]:
    return {row[0] for row in con.sql(f"DESCRIBE SELECT * FROM {source}").fetchall()}


def _trajectories_sql(con: duckdb.DuckDBPyConnection, files: list[str]) -> str:
    fields = list(TRAJECTORY_SCHEMA)
    if not files:
        return f"SELECT {', '.join(_columns(fields, set()))} WHERE false"
    source = (f"read_parquet([{', '.join(_sql_str(f) for f in files)}], hive_partitioning=true, "
              "hive_types={'iteration': 'BIGINT'}, union_by_name=true)")
    present = _present(con, source)
    cols = _columns(fields, present)
    # rows written before schema version 4 get `solved` from their facts (rewards/outcome.py)
    at = TRAJECTORY_SCHEMA.names.index("solved")
    cols[at] = (f'coalesce("solved", {SOLVED_SQL}) AS "solved"' if "solved" in present
                else f'({SOLVED_SQL}) AS "solved"')
    # Columns written by a newer schema than this reader knows are kept, after the known ones.
    extra = sorted(present - set(TRAJECTORY_SCHEMA.names))
    return f"SELECT {', '.join(cols + [_quote(c) for c in extra])} FROM {source}"


def _evaluations_sql(con: duckdb.DuckDBPyConnection, files: list[str]) -> str:
    fields = list(evaluations.EVALUATION_SCHEMA)
    if not files:
        return f"SELECT {', '.join(_columns(fields, set()))} WHERE false"
    source = f"read_parquet([{', '.join(_sql_str(f) for f in files)}], union_by_name=true)"
    # chunks written before `prompt` and the other later columns read them as null
    return f"SELECT {', '.join(_columns(fields, _present(con, source)))} FROM {source}"


def _registry_frames(runs: list[str]) -> dict[str, pd.DataFrame]:
    run_rows, metric_frames, ckpt_rows = [], [], []
    for run_dir in runs:
        run_id = locate(run_dir).name
        info = registry.read_run_info(run_dir)
        try:
            config = json.dumps(registry.read_run_config(run_dir))
        except FileNotFoundError:
            config = None
        done = registry.finished_iterations(run_dir)
        ckpts = registry.list_checkpoints(run_dir)
        run_rows.append({"run_id": run_id, "path": run_dir, "config_hash": info.get("config_hash"),
                         "created_at": info.get("created_at"),
                         "last_finished_iteration": done[-1] if done else None,
                         "iterations_finished": len(done),
                         "iterations_written": len(trajectories.iterations_written(run_dir)),
                         "checkpoints": len(ckpts), "config": config})
        m = registry.read_metrics(run_dir)
        if len(m):
            metric_frames.append(m.assign(run_id=run_id))
        for c in ckpts:
            ckpt_rows.append({"run_id": run_id, "iteration": c["iteration"], "path": c["path"],
                              "recorded_at": c["recorded_at"],
                              "metrics": json.dumps(registry._nan_to_none(c["metrics"]))})
    runs_df = pd.DataFrame(run_rows, columns=[
        "run_id", "path", "config_hash", "created_at", "last_finished_iteration",
        "iterations_finished", "iterations_written", "checkpoints", "config"])
    runs_df["last_finished_iteration"] = runs_df["last_finished_iteration"].astype("Int64")
    metrics_df = (pd.concat(metric_frames, ignore_index=True) if metric_frames
                  else pd.DataFrame({"iteration": pd.Series(dtype="int64"),
                                     "recorded_at": pd.Series(dtype="str")}).assign(run_id=pd.Series(dtype="str")))
    metrics_df = metrics_df[["run_id"] + [c for c in metrics_df.columns if c != "run_id"]]
    ckpt_df = pd.DataFrame(ckpt_rows, columns=["run_id", "iteration", "path", "recorded_at", "metrics"])
    return {"runs": runs_df, "metrics": metrics_df, "checkpoints": ckpt_df}


def connect(store: str) -> tuple[duckdb.DuckDBPyConnection, StoreSummary]:
    """An in-memory DuckDB connection with the store's views. Raises FileNotFoundError when
    the store does not exist; an existing store without runs gives empty views."""
    root = locate(store)
    if not root.is_dir():
        raise FileNotFoundError(
            f"no store at {root.uri!r}: expected a folder of runs (<store>/<run_id>/trajectories/"
            "iteration=<n>/*.parquet); pass --store PATH or write a run first")
    # DESCRIBE opens the files: a compaction that retires one meanwhile makes it start over
    return trajectories.retrying(lambda: _connect(root, store), f"querying {root.uri}")


def query(store: str, sql: str) -> pa.Table:
    """Run one SQL statement over the store's views on one consistent set of files: if a
    concurrent compaction or rewrite retires a file the views named, it starts over."""
    def once() -> pa.Table:
        con, _ = connect(store)
        rel = con.sql(sql)
        if rel is None:
            raise ValueError("the SQL returned no result; use a query (SELECT ..., DESCRIBE ...)")
        return rel.fetch_arrow_table()

    return trajectories.retrying(once, f"querying {store}")


def _connect(root: Location, store: str) -> tuple[duckdb.DuckDBPyConnection, StoreSummary]:
    con = duckdb.connect()
    if not root.is_local:
        con.register_filesystem(root.fs)
    summary = StoreSummary()
    runs = registry.list_runs(store)
    summary.runs = len(runs)
    files = [_file_ref(root, f) for run_dir in runs for f in trajectories.live_files(run_dir)]
    summary.files = len(files)
    if not runs:
        summary.notes.append(f"the store {root.uri!r} has no runs yet; every view but "
                             "evaluations is empty")
    elif not files:
        summary.notes.append(f"the store {root.uri!r} has no trajectory files yet; "
                             "the trajectories view is empty")
    con.execute(f"CREATE VIEW trajectories AS {_trajectories_sql(con, files)}")
    con.execute("CREATE VIEW evaluations AS "
                + _evaluations_sql(con, [_file_ref(root, f) for f in evaluations.live_files(store)]))
    for name, frame in _registry_frames(runs).items():
        con.register(f"_{name}_frame", frame)
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM _{name}_frame")
    return con, summary
