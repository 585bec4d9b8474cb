"""The store on other filesystems than a plain local path, by configuration alone.

Tested here: fsspec's in-memory filesystem (memory://, a non-local filesystem with its own
rename) and file:// URIs. Object stores (s3://, gs://) go through the same fsspec calls but need
their fsspec package (s3fs, gcsfs) and a server, neither of which this suite has.
"""
from __future__ import annotations

import math
import os
import re
import uuid

import fsspec
import pytest

from storage.query import connect
from storage.registry import (last_finished_iteration, list_checkpoints, mark_iteration_done,
                              read_metrics, record_checkpoint, record_metrics, write_run_config)
from storage.synthetic import example_rows
from storage.trajectories import compact, read_trajectories, shards_written, write_shard


@pytest.fixture
def memory_store():
    root = f"memory://store-{uuid.uuid4().hex[:8]}"
    yield root
    fs = fsspec.filesystem("memory")
    fs.rm(root.removeprefix("memory://"), recursive=True)


def _exercise(store: str) -> None:
    run = f"{store}/run-a"
    write_run_config(run, {"seed": 1}, "cafe0123")
    for k in range(3):
        path = write_shard(run, 0, k, example_rows(4, start=10 * k))
    # Returned as a URI the same filesystem takes back (local files: a plain path).
    assert path.startswith("/" if store.startswith("file://") else "memory://")
    assert re.search(r"run-a/trajectories/iteration=0/shard-00002-g\d+\.parquet$", path)
    fs, fs_path = fsspec.core.url_to_fs(path)
    assert fs.exists(fs_path)
    write_shard(run, 0, 1, example_rows(2, start=99))  # replaces
    assert shards_written(run, 0) == {0, 1, 2}
    assert len(read_trajectories(run)) == 10
    compact(run, 0)
    assert len(read_trajectories(run)) == 10 and shards_written(run, 0) == {0, 1, 2}
    record_metrics(run, 0, {"rollout/pass_rate": 0.5})
    record_checkpoint(run, 0, f"{run}/ckpt/0", {"loss": float("nan")})
    mark_iteration_done(run, 0)
    assert read_metrics(run)["rollout/pass_rate"][0] == 0.5
    assert math.isnan(list_checkpoints(run)[0]["metrics"]["loss"])
    assert last_finished_iteration(run) == 0
    con, summary = connect(store)
    assert summary.runs == 1 and summary.files == 1
    assert con.sql("SELECT count(*), count(DISTINCT shard) FROM trajectories").fetchall() == [(10, 3)]
    assert con.sql("SELECT run_id, last_finished_iteration FROM runs").fetchall() == [("run-a", 0)]


def test_the_store_works_on_fsspec_memory_filesystem(memory_store):
    _exercise(memory_store)
    fs = fsspec.filesystem("memory")
    leftovers = [p for p in fs.find(memory_store.removeprefix("memory://")) if ".tmp-" in p]
    assert leftovers == []


def test_the_store_works_with_a_file_uri(tmp_path):
    _exercise(f"file://{tmp_path}/runs")
    assert (tmp_path / "runs" / "run-a" / "trajectories" / "iteration=0").is_dir()


def test_an_atomic_write_syncs_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    # Without the folder's fsync, a crash after the rename can lose the new name (and the file).
    import stat

    from storage import fs as store_fs

    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.path.basename(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(store_fs.os, "fsync", fsync)
    monkeypatch.setattr(store_fs.os, "replace", replace)
    store_fs.atomic_write_bytes(store_fs.locate(str(tmp_path / "a" / "b.json")), b"{}")
    # the new folder is synced into its parent, then the file, the rename, the file's folder
    assert events == [("fsync", "dir")] + [("fsync", "file"), ("replace", "b.json"), ("fsync", "dir")]
    assert (tmp_path / "a" / "b.json").read_bytes() == b"{}"
