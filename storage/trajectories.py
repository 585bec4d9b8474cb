"""The trajectory store of one run: atomic, idempotent Parquet shards partitioned by iteration.

Layout under a run folder (`<store>/<run_id>/`):

    trajectories/iteration=<n>/_manifest.json                the iteration's live files
    trajectories/iteration=<n>/shard-<k>-g<gen>.parquet      one shard as the flow wrote it
    trajectories/iteration=<n>/shards-<a>-<b>-g<gen>.parquet shards a..b merged by `compact`

`iteration` is a hive partition: it is in the folder name and not inside the files, so pandas,
pyarrow.dataset and DuckDB all read it as a column without a clash. `run_id` and `shard` are
columns inside the files. Which files are live is what the manifest says (storage/manifest.py):
each change of an iteration switches it in one rename, so this module's readers see one attempt
or the next, never rows of both, and a crash at any step loses and duplicates nothing. Readers
that glob the folder directly see the same files once a change has finished (its retired files
are deleted right after the switch). One writer per iteration at a time (the flow's stage, or a
compaction), any number of readers.
"""
from __future__ import annotations

import fcntl
import re
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from rewards.outcome import fill_solved
from storage import manifest
from storage.fs import Location, atomic_write, locate
from storage.manifest import ShardFile
from storage.schema import (FILE_SCHEMA, PARTITION_SCHEMA, SCHEMA_VERSION, TRAJECTORY_SCHEMA,
                            TrajectoryRow, rows_to_table, table_to_file_table)

Row = TrajectoryRow | dict  # a builder's record, or an analyst's dict of column -> value

__all__ = ["SCHEMA_VERSION", "TRAJECTORY_SCHEMA", "write_shard", "write_shard_table",
           "write_iteration", "drop_shards_from", "read_trajectories", "read_rows",
           "shards_written", "compact", "live_files", "iterations_written", "open_dataset",
           "CompactionResult"]

ROW_GROUP_SIZE = 128 * 1024
COMPRESSION = "zstd"
READ_ATTEMPTS = 20  # a read that loses a file to a concurrent change starts over, this often
_ITERATION = re.compile(r"^iteration=(\d+)$")


@dataclass(frozen=True)
class CompactionResult:
    iteration: int
    files_before: int
    files_after: int
    rows: int
    stale_temporaries_removed: int = 0


def _check_index(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}={value!r}: expected a non-negative int")
    return value


def _run(run_dir: str) -> Location:
    run = locate(run_dir)
    if "=" in run.name:
        raise ValueError(f"run folder {run.name!r} contains '='; hive readers would take it for a "
                         "partition key. Use a run id without '='.")
    return run


def _iteration_dir(run: Location, iteration: int) -> Location:
    return run.join("trajectories", f"iteration={iteration}")


def _arrow_fs(loc: Location) -> Any:
    return pafs.LocalFileSystem() if loc.is_local else loc.fs


def _write_parquet(loc: Location, table: pa.Table, iteration: int, first: int, last: int) -> None:
    meta = dict(FILE_SCHEMA.metadata or {})
    meta.update({b"rollforge.iteration": str(iteration).encode(),
                 b"rollforge.shards": f"{first}-{last}".encode()})
    table = table.replace_schema_metadata(meta)
    atomic_write(loc, lambda target: pq.write_table(
        table, target, compression=COMPRESSION, row_group_size=ROW_GROUP_SIZE))


def _read_files(files: list[ShardFile]) -> pa.Table:
    """Files of one folder in FILE_SCHEMA; columns an older file lacks come back null."""
    if not files:
        return FILE_SCHEMA.empty_table()
    loc = files[0].loc
    newer = [f.loc.uri for f in files
             if set(pq.read_schema(f.loc.path, filesystem=_arrow_fs(loc)).names) - set(FILE_SCHEMA.names)]
    if newer:
        raise ValueError(f"{newer[0]} has columns unknown to schema version {SCHEMA_VERSION} (written by "
                         "a newer rollforge); refusing to rewrite it and drop them")
    dataset = ds.dataset([f.loc.path for f in files], schema=FILE_SCHEMA, format="parquet",
                         filesystem=_arrow_fs(loc))
    return dataset.to_table()


def write_shard_table(run_dir: str, iteration: int, shard: int, table: pa.Table) -> str:
    """Write `table` as shard `shard` of `iteration`, replacing any earlier write of that shard
    (also inside a compacted file). Atomic: a reader sees the old rows or the new ones, never
    both and never a partial file. Returns the final path (a URI for non-local stores)."""
    _check_index("iteration", iteration)
    _check_index("shard", shard)
    file_table = table_to_file_table(table, iteration, shard)
    return _write_conformed(_run(run_dir), iteration, shard, file_table)


def write_shard(run_dir: str, iteration: int, shard: int, rows: list[Row]) -> str:
    """Rows -> one shard; see write_shard_table. A dict's missing optional keys are null; an
    unknown key or a value of the wrong type raises ValueError naming the column."""
    _check_index("iteration", iteration)
    _check_index("shard", shard)
    file_table = rows_to_table(rows, iteration, shard)
    return _write_conformed(_run(run_dir), iteration, shard, file_table)


def append_shard(run_dir: str, iteration: int, rows: list[Row]) -> str:
    """`rows` as the next shard of `iteration`, for a writer that adds to an iteration a batch
    at a time (the gateway, an episode a shard). The number is taken and the shard written
    under an exclusive lock that every process appending to this run takes, so two writers
    (two gateways on one run) never take one number, nor drop each other's file from the
    manifest. A run folder on an object store has no such lock: there, one writer a run."""
    with _appending(_run(run_dir)):
        shard = max(shards_written(run_dir, iteration), default=-1) + 1
        return write_shard(run_dir, iteration, shard, rows)


@contextmanager
def _appending(run: Location):
    if not run.is_local:
        yield
        return
    lock = run.join("trajectories")
    lock.fs.makedirs(lock.path, exist_ok=True)
    with open(lock.join(".append.lock").path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield


def _piece(folder: Location, table: pa.Table, iteration: int, first: int, last: int,
           generation: int) -> ShardFile:
    f = ShardFile(folder.join(manifest.file_name(first, last, generation)), first, last)
    _write_parquet(f.loc, table, iteration, first, last)
    return f


def _write_conformed(run: Location, iteration: int, shard: int, table: pa.Table) -> str:
    folder = _iteration_dir(run, iteration)
    state = manifest.read(folder)
    gen = state.generation + 1
    files = [f for f in state.files if not f.holds(shard)]
    for f in state.files:
        if f.holds(shard) and f.first != f.last:  # a compacted file: keep its other shards
            files += _split_around(f, shard, iteration, gen)
    new = _piece(folder, table, iteration, shard, shard, gen)
    manifest.commit(folder, gen, files + [new])
    return new.loc.uri


def _split_around(f: ShardFile, shard: int, iteration: int, gen: int) -> list[ShardFile]:
    """Copy the rows of compacted file `f` except `shard` into (at most) two new files."""
    rows = _read_files([f])
    shard_col = rows.column("shard")
    out = []
    for first, last in ((f.first, shard - 1), (shard + 1, f.last)):
        if first <= last:
            mask = pc.and_(pc.greater_equal(shard_col, first), pc.less_equal(shard_col, last))
            out.append(_piece(f.loc.parent(), rows.filter(mask), iteration, first, last, gen))
    return out


def write_iteration(run_dir: str, iteration: int, rows_per_shard: list[list[Row]]) -> list[str]:
    """Make `rows_per_shard` (shard k = element k) the whole content of `iteration`, replacing
    any earlier attempt in one switch: readers see the old attempt or this one, never rows of
    both, and a crash at any step leaves one of the two. Every row is checked before anything is
    written. Returns the files' paths (URIs for non-local stores)."""
    _check_index("iteration", iteration)
    tables = [rows_to_table(rows, iteration, k) for k, rows in enumerate(rows_per_shard)]
    folder = _iteration_dir(_run(run_dir), iteration)
    gen = manifest.read(folder).generation + 1
    files = [_piece(folder, t, iteration, k, k, gen) for k, t in enumerate(tables)]
    manifest.commit(folder, gen, files)
    return [f.loc.uri for f in files]


def drop_shards_from(run_dir: str, iteration: int, first: int) -> int:
    """Remove every shard >= `first` of an iteration (left by an earlier attempt that wrote more
    shards than the one that replaced it); returns how many shards' files were removed or cut.
    A compacted file reaching across `first` keeps its lower shards. Prefer `write_iteration`,
    which replaces an attempt in one switch."""
    _check_index("iteration", iteration)
    _check_index("first", first)
    folder = _iteration_dir(_run(run_dir), iteration)
    if not folder.exists():
        return 0
    state = manifest.read(folder)
    gen = state.generation + 1
    files = [f for f in state.files if f.last < first]
    cut = [f for f in state.files if f.last >= first]
    for f in cut:
        if f.first < first:
            rows = _read_files([f])
            files.append(_piece(folder, rows.filter(pc.less(rows.column("shard"), first)),
                                iteration, f.first, first - 1, gen))
    if cut or state.generation == 0:
        manifest.commit(folder, gen, files)
    else:
        manifest.sweep(folder, state)
    return len(cut)


def live_files(run_dir: str, iteration: int | None = None) -> list[str]:
    """The Parquet files the iteration's manifest names, in shard order: one consistent set per
    iteration (a later change may retire them; `read_trajectories` starts over when it does)."""
    run = _run(run_dir)
    iterations = [iteration] if iteration is not None else iterations_written(run_dir)
    return [f.loc.path for it in iterations for f in manifest.read(_iteration_dir(run, it)).files]


def iterations_written(run_dir: str) -> list[int]:
    """Iterations that have a trajectory folder, ascending."""
    folder = _run(run_dir).join("trajectories")
    return sorted(int(m[1]) for n in folder.names() if (m := _ITERATION.match(n)))


def shards_written(run_dir: str, iteration: int) -> set[int]:
    """Shards of `iteration` whose write completed (compacted ones included)."""
    state = manifest.read(_iteration_dir(_run(run_dir), _check_index("iteration", iteration)))
    return {k for f in state.files for k in range(f.first, f.last + 1)}


def open_dataset(run_dir: str, iteration: int | None = None) -> ds.Dataset:
    """A pyarrow Dataset of the run's trajectories in TRAJECTORY_SCHEMA (iteration included):
    the live files at this moment. Scan it promptly: a compaction or rewrite after this call
    can retire its files; `read_trajectories` reads consistently whatever runs meanwhile."""
    run = _run(run_dir)
    files = live_files(run_dir, iteration)
    return ds.dataset(files, schema=TRAJECTORY_SCHEMA, format="parquet", filesystem=_arrow_fs(run),
                      partitioning=ds.partitioning(PARTITION_SCHEMA, flavor="hive"))


def _vanished(exc: BaseException) -> bool:
    """A file that was listed is gone (pyarrow and DuckDB word it in their own ways)."""
    if isinstance(exc, FileNotFoundError):
        return True
    text = str(exc).lower()
    return (isinstance(exc, OSError) or type(exc).__name__ == "IOException") and (
        "no such file" in text or "no files found" in text)


def retrying(read, what: str):
    """`read()` again while a concurrent change retires a file it had listed (each try reads
    one manifest per iteration, a consistent set), at most READ_ATTEMPTS times."""
    for attempt in range(READ_ATTEMPTS):
        try:
            return read()
        except Exception as exc:  # noqa: BLE001 - only a vanished file is retried
            if not _vanished(exc):
                raise
            if attempt == READ_ATTEMPTS - 1:
                raise FileNotFoundError(f"{what}: files kept vanishing under {READ_ATTEMPTS} "
                                        f"reads (a change of the store in a tight loop?): {exc}"
                                        ) from None


def read_trajectories(run_dir: str, iteration: int | None = None) -> pd.DataFrame:
    """All rows of the run (or of one iteration) as a DataFrame in TRAJECTORY_SCHEMA column
    order, ordered by iteration then shard. Null rewards come back as NaN. Consistent while
    shards are rewritten or compacted: one set of files per iteration, never a missing one.
    `solved` is filled for rows written before schema version 4 (rewards/outcome.py)."""
    return fill_solved(_live_table(run_dir, iteration).to_pandas())


def read_rows(run_dir: str, iteration: int | None = None) -> list[TrajectoryRow]:
    """The rows of the run (or of one iteration) as the loop's records, in
    `read_trajectories`' order: what a stage reads back to train on (the gateway's graded
    rows). As stored: `solved` stays null on rows written before schema version 4."""
    return [TrajectoryRow.from_record(r) for r in _live_table(run_dir, iteration).to_pylist()]


def _live_table(run_dir: str, iteration: int | None) -> pa.Table:
    """The live files' rows as one table, read again while files vanish under the read."""
    return retrying(lambda: open_dataset(run_dir, iteration).to_table(), f"reading {run_dir}")


def _remove_stale_temporaries(folder: Location, older_than_s: float) -> int:
    """Temporary files of writers that crashed (a live writer's file is younger)."""
    now, removed = datetime.now(timezone.utc), 0
    for name in folder.names():
        if name.startswith(".") and ".tmp-" in name:
            loc = folder.join(name)
            modified = loc.fs.modified(loc.path)
            if modified.tzinfo is None:
                modified = modified.replace(tzinfo=timezone.utc)
            if (now - modified).total_seconds() > older_than_s:
                loc.remove()
                removed += 1
    return removed


def compact(run_dir: str, iteration: int, target_rows: int = 1_000_000,
            stale_after_s: float = 3600.0) -> CompactionResult:
    """Merge runs of consecutive shard files of `iteration` into files of about `target_rows`
    rows (`shards-<a>-<b>.parquet`). Query results do not change; shards_written does not
    change; a later write_shard of a merged shard still replaces it. Also deletes temporary
    files older than `stale_after_s` (left by writers that crashed)."""
    _check_index("iteration", iteration)
    if target_rows < 1:
        raise ValueError(f"target_rows={target_rows}: expected >= 1")
    run = _run(run_dir)
    folder = _iteration_dir(run, iteration)
    state = manifest.read(folder)
    live, gen = list(state.files), state.generation + 1
    stale = _remove_stale_temporaries(folder, stale_after_s)
    counts = {f.loc.path: pq.read_metadata(f.loc.path, filesystem=_arrow_fs(run)).num_rows
              for f in live}
    groups: list[list[ShardFile]] = []
    for f in live:
        g = groups[-1] if groups else None
        if g and g[-1].last + 1 == f.first and sum(counts[x.loc.path] for x in g) < target_rows:
            g.append(f)
        else:
            groups.append([f])
    files = [g[0] if len(g) == 1 else _piece(folder, _read_files(g), iteration, g[0].first,
                                             g[-1].last, gen) for g in groups]
    if files != live or state.generation == 0:  # one switch from the members to the merged files
        manifest.commit(folder, gen, files)
    else:
        manifest.sweep(folder, state)
    return CompactionResult(iteration, len(live), len(groups), sum(counts.values()), stale)
