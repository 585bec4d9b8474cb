"""Fault injection for the trajectory store: a writer stopped at each of its steps, and readers
running while iterations are rewritten and compacted. Nothing lost, nothing duplicated, no
reader error. Bounded loops, no timing."""
from __future__ import annotations

import os
import threading

import duckdb
import pandas as pd
import pytest

from storage import fs as store_fs
from storage import query, trajectories
from storage.synthetic import example_rows

A = [example_rows(3, start=10 * k) for k in range(3)]  # the first attempt: 3 shards
B = [example_rows(2, start=100 + 10 * k) for k in range(2)]  # its retry: 2 shards, other rows


def _completions(attempt) -> list[str]:
    return sorted(r["completion"] for shard in attempt for r in shard)


class Killed(BaseException):
    """The writer's process dies here (BaseException: no `except Exception` catches it)."""


def _kill_at(monkeypatch, step: int) -> list[int]:
    """Make the `step`-th file-system change (a rename into place or a delete) kill the writer;
    returns the counter, so a run with step 0 counts the steps."""
    count = [0]
    real_replace, real_remove = store_fs.durable_replace, store_fs.Location.remove

    def tick():
        count[0] += 1
        if count[0] == step:
            raise Killed()

    def replace(src, dst):
        tick()
        real_replace(src, dst)

    def remove(self):
        tick()
        real_remove(self)

    monkeypatch.setattr(store_fs, "durable_replace", replace)
    monkeypatch.setattr(store_fs.Location, "remove", remove)
    return count


def _direct_reads(run_dir: str) -> list[list[str]]:
    """What analysts run on the folder: pandas, and DuckDB over docs/analysts.md's glob."""
    folder = os.path.join(run_dir, "trajectories")
    glob = os.path.join(folder, "*", "*.parquet")
    return [sorted(pd.read_parquet(folder).completion),
            sorted(r[0] for r in duckdb.sql(f"SELECT completion FROM read_parquet('{glob}')").fetchall())]


def _steps(tmp_path, monkeypatch, change) -> int:
    run = str(tmp_path / "count" / "run")
    trajectories.write_iteration(run, 0, A)
    with monkeypatch.context() as m:
        count = _kill_at(m, 0)
        change(run)
    return count[0]


def _retry_b(run):
    trajectories.write_iteration(run, 0, B)


def _compact(run):
    trajectories.compact(run, 0)


@pytest.mark.parametrize("change, after", [(_retry_b, B), (_compact, A)], ids=["retry", "compact"])
def test_a_writer_killed_at_any_step_leaves_one_attempt_whole(tmp_path, monkeypatch, change, after):
    steps = _steps(tmp_path, monkeypatch, change)
    assert steps >= 4  # files, the manifest's switch, the retired files' deletes
    for step in range(1, steps + 1):
        run = str(tmp_path / f"step{step}" / "run")
        trajectories.write_iteration(run, 0, A)
        with monkeypatch.context() as m:
            _kill_at(m, step)
            with pytest.raises(Killed):
                change(run)
        seen = sorted(trajectories.read_trajectories(run).completion)
        assert seen in (_completions(A), _completions(after)), step
        assert trajectories.shards_written(run, 0) in ({0, 1, 2}, {k for k in range(len(after))})
        change(run)  # the stage's retry, or the next compaction
        want = _completions(after)
        assert sorted(trajectories.read_trajectories(run).completion) == want
        assert _direct_reads(run) == [want, want], step  # no leftover of either attempt


def test_the_flows_two_call_shapes_still_replace_an_attempt(tmp_path):
    run = str(tmp_path / "run")
    trajectories.write_iteration(run, 0, A)
    for k, rows in enumerate(B):
        trajectories.write_shard(run, 0, k, rows)
    assert trajectories.drop_shards_from(run, 0, len(B)) == 1
    assert sorted(trajectories.read_trajectories(run).completion) == _completions(B)
    assert _direct_reads(run) == [_completions(B)] * 2


def test_readers_during_rewrites_and_compaction_see_one_attempt_and_never_fail(tmp_path):
    store = str(tmp_path / "runs")
    run = os.path.join(store, "run-a")
    trajectories.write_iteration(run, 0, A)
    allowed = (_completions(A), _completions(B))
    errors: list[BaseException] = []
    done = threading.Event()

    def writer():
        try:
            for i in range(12):
                trajectories.write_iteration(run, 0, B if i % 2 else A)
                trajectories.compact(run, 0)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            done.set()

    t = threading.Thread(target=writer)
    t.start()
    reads = 0
    try:
        while not done.is_set() or reads < 3:
            assert sorted(trajectories.read_trajectories(run).completion) in allowed
            got = query.query(store, "SELECT completion FROM trajectories").column(0).to_pylist()
            assert sorted(got) in allowed
            reads += 1
    finally:
        t.join()
    assert not errors, errors
