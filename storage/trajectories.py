"""The trajectory store of one run: atomic, idempotent Parquet shards partitioned by iteration.

Layout under a run folder (`<store>/<run_id>/`):

    trajectories/iteration=<n>/shard-<k>.parquet          one shard as the flow wrote it
    trajectories/iteration=<n>/shards-<a>-<b>.parquet     shards a..b merged by `compact`

`iteration` is a hive partition: it is in the folder name and not inside the files, so pandas,
pyarrow.dataset and DuckDB all read it as a column without a clash. `run_id` and `shard` are
columns inside the files. The file names say which shards a file holds, which is what makes
writes idempotent after compaction too: a file whose shard range lies inside another file's
range is superseded (left over by a crash between two steps) and is ignored, then deleted by
the next write or compaction of that iteration.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from storage.fs import Location, atomic_write, locate
from storage.schema import (FILE_SCHEMA, PARTITION_SCHEMA, SCHEMA_VERSION, TRAJECTORY_SCHEMA,
                            rows_to_table, table_to_file_table)

__all__ = ["SCHEMA_VERSION", "TRAJECTORY_SCHEMA", "write_shard", "write_shard_table",
           "read_trajectories", "shards_written", "compact", "live_files", "iterations_written",
           "open_dataset", "CompactionResult"]

ROW_GROUP_SIZE = 128 * 1024
COMPRESSION = "zstd"
_SHARD = re.compile(r"^shard-(\d+)\.parquet$")
_RANGE = re.compile(r"^shards-(\d+)-(\d+)\.parquet$")
_ITERATION = re.compile(r"^iteration=(\d+)$")


@dataclass(frozen=True)
class ShardFile:
    """A Parquet file of one iteration and the inclusive range of shards it holds."""

    loc: Location
    first: int
    last: int

    def holds(self, shard: int) -> bool:
        return self.first <= shard <= self.last


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


def _file_name(first: int, last: int) -> str:
    return f"shard-{first:05d}.parquet" if first == last else f"shards-{first:05d}-{last:05d}.parquet"


def _scan(folder: Location) -> tuple[list[ShardFile], list[ShardFile]]:
    """(live, superseded) files of an iteration folder, live sorted by first shard."""
    files = []
    for name in folder.names():
        if m := _SHARD.match(name):
            files.append(ShardFile(folder.join(name), int(m[1]), int(m[1])))
        elif m := _RANGE.match(name):
            files.append(ShardFile(folder.join(name), int(m[1]), int(m[2])))
    # Ranges are nested or disjoint (compaction merges whole files, a rewrite splits one), so a
    # file is superseded exactly when an earlier-starting, wider file reaches past its end.
    files.sort(key=lambda f: (f.first, -f.last))
    live, dead, reach = [], [], -1
    for f in files:
        (dead if f.last <= reach else live).append(f)
        reach = max(reach, f.last)
    return live, dead


def _remove_superseded(folder: Location) -> list[ShardFile]:
    live, dead = _scan(folder)
    for f in dead:
        f.loc.remove()
    return live


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


def write_shard(run_dir: str, iteration: int, shard: int, rows: list[dict]) -> str:
    """Rows (dicts) -> one shard; see write_shard_table. Missing optional keys are null; an
    unknown key or a value of the wrong type raises ValueError naming the column."""
    _check_index("iteration", iteration)
    _check_index("shard", shard)
    file_table = rows_to_table(rows, iteration, shard)
    return _write_conformed(_run(run_dir), iteration, shard, file_table)


def _write_conformed(run: Location, iteration: int, shard: int, table: pa.Table) -> str:
    folder = _iteration_dir(run, iteration)
    merged = [f for f in _remove_superseded(folder) if f.holds(shard) and f.first != f.last]
    for f in merged:
        _split_around(f, shard, iteration)
    final = folder.join(_file_name(shard, shard))
    _write_parquet(final, table, iteration, shard, shard)
    for f in merged:
        # One delete switches readers from the merged file to its pieces plus the new shard.
        f.loc.remove()
    return final.uri


def _split_around(f: ShardFile, shard: int, iteration: int) -> None:
    """Copy the rows of compacted file `f` except `shard` into (at most) two files around it.
    Until `f` is deleted the pieces are superseded by it, so readers still see f's rows."""
    rows = _read_files([f])
    shard_col = rows.column("shard")
    for first, last in ((f.first, shard - 1), (shard + 1, f.last)):
        if first > last:
            continue
        mask = pc.and_(pc.greater_equal(shard_col, first), pc.less_equal(shard_col, last))
        _write_parquet(f.loc.parent().join(_file_name(first, last)), rows.filter(mask),
                       iteration, first, last)


def drop_shards_from(run_dir: str, iteration: int, first: int) -> int:
    """Remove every shard >= `first` of an iteration (left by an earlier attempt that wrote more
    shards than the one that replaced it); returns how many shards' files were removed or cut.
    A compacted file reaching across `first` keeps its lower shards: they are split off first."""
    _check_index("iteration", iteration)
    _check_index("first", first)
    folder = _iteration_dir(_run(run_dir), iteration)
    if not folder.exists():
        return 0
    removed = 0
    for f in _remove_superseded(folder):
        if f.last < first:
            continue
        if f.first < first:  # keep its lower shards in a file of their own, then drop it
            rows = _read_files([f])
            keep = rows.filter(pc.less(rows.column("shard"), first))
            _write_parquet(folder.join(_file_name(f.first, first - 1)), keep, iteration,
                           f.first, first - 1)
        f.loc.remove()
        removed += 1
    return removed


def live_files(run_dir: str, iteration: int | None = None) -> list[str]:
    """The Parquet files a reader should read (superseded leftovers excluded), in order."""
    run = _run(run_dir)
    iterations = [iteration] if iteration is not None else iterations_written(run_dir)
    out = []
    for it in iterations:
        live, _ = _scan(_iteration_dir(run, it))
        out.extend(f.loc.path for f in live)
    return out


def iterations_written(run_dir: str) -> list[int]:
    """Iterations that have a trajectory folder, ascending."""
    folder = _run(run_dir).join("trajectories")
    return sorted(int(m[1]) for n in folder.names() if (m := _ITERATION.match(n)))


def shards_written(run_dir: str, iteration: int) -> set[int]:
    """Shards of `iteration` whose write completed (compacted ones included)."""
    live, _ = _scan(_iteration_dir(_run(run_dir), _check_index("iteration", iteration)))
    return {k for f in live for k in range(f.first, f.last + 1)}


def open_dataset(run_dir: str, iteration: int | None = None) -> ds.Dataset:
    """A pyarrow Dataset of the run's trajectories in TRAJECTORY_SCHEMA (iteration included)."""
    run = _run(run_dir)
    files = live_files(run_dir, iteration)
    return ds.dataset(files, schema=TRAJECTORY_SCHEMA, format="parquet", filesystem=_arrow_fs(run),
                      partitioning=ds.partitioning(PARTITION_SCHEMA, flavor="hive"))


def read_trajectories(run_dir: str, iteration: int | None = None) -> pd.DataFrame:
    """All rows of the run (or of one iteration) as a DataFrame in TRAJECTORY_SCHEMA column
    order, ordered by iteration then shard. Null rewards come back as NaN."""
    return open_dataset(run_dir, iteration).to_table().to_pandas()


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
    live = _remove_superseded(folder)
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
    for g in groups:
        if len(g) < 2:
            continue
        table = _read_files(g)
        first, last = g[0].first, g[-1].last
        # The merged file supersedes its members the moment it is renamed into place.
        _write_parquet(folder.join(_file_name(first, last)), table, iteration, first, last)
        for f in g:
            f.loc.remove()
    return CompactionResult(iteration, len(live), len(groups), sum(counts.values()), stale)
