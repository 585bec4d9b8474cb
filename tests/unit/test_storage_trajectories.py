"""The trajectory store: schema, atomic idempotent shards, crash safety, compaction, evolution."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from storage.schema import FILE_SCHEMA
from storage.synthetic import example_row, example_rows
from storage.trajectories import (SCHEMA_VERSION, TRAJECTORY_SCHEMA, compact, live_files,
                                  read_trajectories, shards_written, write_shard, write_shard_table)


@pytest.fixture
def run_dir(tmp_path):
    return str(tmp_path / "runs" / "run-a")


def _names(folder: str) -> list[str]:
    """The folder's Parquet files by the shards they hold (generation suffix dropped)."""
    return sorted(re.sub(r"-g\d+\.parquet$", ".parquet", n) for n in os.listdir(folder)
                  if n.endswith(".parquet"))


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["iteration", "shard", "group_id", "sample_index"]).reset_index(drop=True)


def test_rows_round_trip_with_every_column_typed_and_partition_from_the_folder(run_dir):
    rows = example_rows(14)
    path = write_shard(run_dir, 0, 3, rows)
    assert re.search(r"trajectories/iteration=0/shard-00003-g\d+\.parquet$", path)
    df = read_trajectories(run_dir)
    assert list(df.columns) == TRAJECTORY_SCHEMA.names
    assert len(df) == 14
    assert (df.iteration == 0).all() and (df.shard == 3).all()
    assert (df.schema_version == SCHEMA_VERSION).all()
    first = df.iloc[1]
    assert first.task_id == "task-1" and first.family == "strings" and first.reward == 0.25
    assert list(first.prompt_token_ids) == [1, 2, 3, 1]
    assert list(first.test_outcomes) == ["pass", "fail", "fail", "fail"]
    # The file itself holds no `iteration` column (it is the hive key), but says which one it is.
    file_schema = pq.read_schema(path)
    assert "iteration" not in file_schema.names
    assert file_schema.metadata[b"rollforge.iteration"] == b"0"
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"


def test_nan_reward_means_not_scored_and_reads_back_as_nan_never_zero(run_dir):
    write_shard(run_dir, 0, 0, example_rows(7))  # row 6 is not scorable
    df = read_trajectories(run_dir)
    assert math.isnan(df.reward[6]) and math.isnan(df.pass_fraction[6])
    assert df.reward[:6].notna().all()
    # Stored as null, so SQL aggregates skip it instead of being poisoned by NaN.
    path = live_files(run_dir)[0]
    assert duckdb.sql(f"SELECT count(reward), avg(reward) > 0 FROM '{path}'").fetchall()[0] == (6, True)


def test_missing_optional_keys_are_null(run_dir):
    row = example_row()
    for key in ("prompt_token_ids", "image_digest", "hack_flags", "gen_time_s", "error_type"):
        row.pop(key)
    write_shard(run_dir, 0, 0, [row])
    df = read_trajectories(run_dir)
    assert df.prompt_token_ids[0] is None and df.hack_flags[0] is None
    assert math.isnan(df.gen_time_s[0]) and pd.isna(df.image_digest[0])


@pytest.mark.parametrize("key, value, message", [
    ("tests_passed", 2.5, "'tests_passed'"),            # a float would be truncated silently
    ("tests_passed", "2", "'tests_passed'"),
    ("reward", "high", "'reward'"),
    ("hack_flags", "exit_override", "'hack_flags'"),    # a string is not a list of strings
    ("infra_error", 1, "'infra_error'"),
    ("difficulty", 2**40, "'difficulty'"),
    ("prompt", 12, "'prompt'"),
])
def test_a_value_of_the_wrong_type_is_refused_naming_the_column(run_dir, key, value, message):
    rows = example_rows(3)
    rows[2][key] = value
    with pytest.raises(ValueError, match=message) as err:
        write_shard(run_dir, 0, 0, rows)
    assert "row 2" in str(err.value)
    assert shards_written(run_dir, 0) == set()


def test_an_unknown_key_is_refused_naming_it(run_dir):
    with pytest.raises(ValueError, match="unknown column.*'rewrd'"):
        write_shard(run_dir, 0, 0, [example_row(rewrd=1.0)])


CALL = {"turn": 1, "name": "read", "status": "ran", "detail": "", "tests_passed": None,
        "tests_total": None}


@pytest.mark.parametrize("call, message", [
    (dict(CALL, turn="1"), "'tool_calls'.*row 2"),              # a string is not a turn number
    (dict(CALL, tests_passed=1.5), "'tool_calls'.*row 2"),      # no silent truncation
    (dict(CALL, stauts="ran"), r"'tool_calls': row 2 has key\(s\) \['stauts'\]"),
])
def test_a_tool_call_that_does_not_fit_its_struct_is_refused_naming_the_column(run_dir, call,
                                                                              message):
    rows = example_rows(3)
    rows[0]["tool_calls"] = [CALL]
    rows[2]["tool_calls"] = [CALL, call]
    with pytest.raises(ValueError, match=message):
        write_shard(run_dir, 0, 0, rows)


def test_tool_calls_round_trip_and_unnest_in_duckdb(run_dir):
    rows = example_rows(2)
    rows[0]["tool_calls"] = [CALL, dict(CALL, turn=2, name="run", status="failed",
                                         detail="failed (exit 1)", tests_passed=3, tests_total=5)]
    write_shard(run_dir, 0, 0, rows)
    df = read_trajectories(run_dir)
    assert list(df.tool_calls[0]) == rows[0]["tool_calls"] and df.tool_calls[1] is None
    trajectories = pa.Table.from_pandas(df[["tool_calls"]])  # noqa: F841 (read by DuckDB)
    got = duckdb.sql("SELECT c.name, c.tests_passed FROM (SELECT UNNEST(tool_calls) AS c "
                     "FROM trajectories) ORDER BY c.turn").fetchall()
    assert got == [("read", None), ("run", 3)]


def test_a_missing_required_key_is_refused_naming_it(run_dir):
    row = example_row()
    del row["task_id"]
    with pytest.raises(ValueError, match="'task_id' is required"):
        write_shard(run_dir, 0, 0, [row])


def test_rows_of_another_iteration_are_refused(run_dir):
    with pytest.raises(ValueError, match="'iteration': rows say 1 but the shard is written as iteration=2"):
        write_shard(run_dir, 2, 0, example_rows(2, iteration=1))


def test_numpy_values_are_accepted(run_dir):
    import numpy as np

    row = example_row(tests_passed=np.int64(3), reward=np.float32(0.5),
                      sampling_logprobs=np.array([-0.5, -1.0], dtype=np.float32),
                      completion_token_ids=np.array([4, 5]))
    write_shard(run_dir, 0, 0, [row])
    df = read_trajectories(run_dir)
    assert df.tests_passed[0] == 3 and df.reward[0] == 0.5
    assert list(df.sampling_logprobs[0]) == [-0.5, -1.0]


def test_writing_a_shard_again_replaces_it_without_duplicating_rows(run_dir):
    write_shard(run_dir, 0, 0, example_rows(4))
    write_shard(run_dir, 0, 1, example_rows(4, start=4))
    write_shard(run_dir, 0, 1, example_rows(4, start=100))  # a retried stage
    df = read_trajectories(run_dir)
    assert len(df) == 8
    assert sorted(df[df.shard == 1].completion) == sorted(r["completion"] for r in example_rows(4, start=100))
    assert shards_written(run_dir, 0) == {0, 1}


def test_iterations_are_separate_partitions(run_dir):
    for it in (0, 1, 2):
        write_shard(run_dir, it, 0, example_rows(3, iteration=it))
    assert len(read_trajectories(run_dir)) == 9
    assert set(read_trajectories(run_dir, iteration=1).iteration) == {1}
    assert read_trajectories(run_dir, iteration=7).empty


def test_an_empty_shard_is_recorded_as_written(run_dir):
    write_shard(run_dir, 0, 5, [])
    assert shards_written(run_dir, 0) == {5}
    assert read_trajectories(run_dir).empty


def test_a_run_folder_with_an_equals_sign_is_refused(tmp_path):
    with pytest.raises(ValueError, match="contains '='"):
        write_shard(str(tmp_path / "run=1"), 0, 0, example_rows(1))


_CRASH = textwrap.dedent("""
    import os, sys
    import pyarrow.parquet as pq
    import storage.trajectories as T
    from storage.synthetic import example_rows

    real = pq.write_table
    def dies_half_way(table, where, **kw):
        real(table.slice(0, 1), where, **kw)   # bytes are on disk under the temporary name ...
        os._exit(17)                           # ... and the process dies before the rename
    T.pq.write_table = dies_half_way
    T.write_shard(sys.argv[1], 0, int(sys.argv[2]), example_rows(50, start=1000))
""")


def test_a_crash_mid_write_leaves_no_file_a_reader_picks_up_and_keeps_the_old_shard(run_dir):
    write_shard(run_dir, 0, 0, example_rows(5))
    for shard in (0, 1):  # a rewrite of an existing shard, and a new shard
        proc = subprocess.run([sys.executable, "-c", _CRASH, run_dir, str(shard)],
                              cwd=os.getcwd(), capture_output=True, text=True)
        assert proc.returncode == 17, proc.stderr
    folder = os.path.join(run_dir, "trajectories", "iteration=0")
    leftovers = [n for n in os.listdir(folder) if ".tmp-" in n]
    assert len(leftovers) == 2  # the crash really happened after bytes were written
    assert shards_written(run_dir, 0) == {0}
    assert sorted(read_trajectories(run_dir).completion) == sorted(r["completion"] for r in example_rows(5))
    assert compact(run_dir, 0).stale_temporaries_removed == 0  # they might belong to a live writer
    # What analysts run directly: pyarrow/pandas on the folder and a DuckDB glob.
    assert pd.read_parquet(os.path.join(run_dir, "trajectories")).shape[0] == 5
    assert ds.dataset(os.path.join(run_dir, "trajectories"), partitioning="hive").count_rows() == 5
    glob = os.path.join(run_dir, "trajectories", "*", "*.parquet")
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{glob}')").fetchall()[0][0] == 5
    assert compact(run_dir, 0, stale_after_s=0).stale_temporaries_removed == 2
    assert [n for n in os.listdir(folder) if ".tmp-" in n] == []


def test_compaction_merges_shards_without_changing_query_results(run_dir):
    for k in range(6):
        write_shard(run_dir, 0, k, example_rows(5, start=10 * k))
    write_shard(run_dir, 1, 0, example_rows(5, iteration=1))
    before = _sorted(read_trajectories(run_dir))
    result = compact(run_dir, 0, target_rows=12)
    assert (result.files_before, result.files_after, result.rows) == (6, 2, 30)
    assert _names(os.path.join(run_dir, "trajectories", "iteration=0")) == [
        "shards-00000-00002.parquet", "shards-00003-00005.parquet"]
    pd.testing.assert_frame_equal(_sorted(read_trajectories(run_dir)), before)
    assert shards_written(run_dir, 0) == set(range(6))


def test_compaction_leaves_non_consecutive_shards_apart(run_dir):
    for k in (0, 1, 3):
        write_shard(run_dir, 0, k, example_rows(2, start=k))
    assert compact(run_dir, 0).files_after == 2
    assert shards_written(run_dir, 0) == {0, 1, 3}


def test_rewriting_a_compacted_shard_replaces_only_that_shard(run_dir):
    for k in range(4):
        write_shard(run_dir, 0, k, example_rows(3, start=10 * k))
    compact(run_dir, 0)
    write_shard(run_dir, 0, 2, example_rows(1, start=500))
    df = read_trajectories(run_dir)
    assert len(df) == 10
    assert list(df[df.shard == 2].completion) == [example_row(i=500)["completion"]]
    assert shards_written(run_dir, 0) == {0, 1, 2, 3}
    names = _names(os.path.join(run_dir, "trajectories", "iteration=0"))
    assert names == ["shard-00002.parquet", "shard-00003.parquet", "shards-00000-00001.parquet"]


def test_files_left_behind_by_a_crashed_compaction_are_ignored_then_removed(run_dir):
    for k in range(3):
        write_shard(run_dir, 0, k, example_rows(2, start=10 * k))
    folder = os.path.join(run_dir, "trajectories", "iteration=0")
    small = {n: open(os.path.join(folder, n), "rb").read() for n in os.listdir(folder)
             if n.endswith(".parquet")}
    compact(run_dir, 0)
    for name, data in small.items():  # as if the crash came after the switch, before the deletes
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    assert len(read_trajectories(run_dir)) == 6
    assert shards_written(run_dir, 0) == {0, 1, 2}
    write_shard(run_dir, 0, 7, example_rows(1))
    assert _names(folder) == ["shard-00007.parquet", "shards-00000-00002.parquet"]


def _write_file(run_dir: str, iteration: int, name: str, table: pa.Table) -> None:
    """A file as another writer (an older or newer rollforge) left it, listed in the manifest
    if the folder has one."""
    from storage import manifest
    from storage.fs import locate

    folder = os.path.join(run_dir, "trajectories", f"iteration={iteration}")
    os.makedirs(folder, exist_ok=True)
    pq.write_table(table, os.path.join(folder, name))
    loc = locate(folder)
    state = manifest.read(loc)
    if state.generation:
        shard = int(re.match(r"shard-(\d+)", name)[1])
        manifest.commit(loc, state.generation + 1,
                        [*state.files, manifest.ShardFile(loc.join(name), shard, shard)])


def test_partitions_written_before_a_column_was_added_still_read(run_dir):
    # A "version 0" file: no reward_components, no score_time_s.
    old_fields = [f for f in FILE_SCHEMA if f.name not in ("reward_components", "score_time_s")]
    rows = [{**r, "shard": 0, "schema_version": 0} for r in example_rows(3)]
    old = pa.Table.from_pylist([{k: r.get(k) for k in (f.name for f in old_fields)} for r in rows],
                               schema=pa.schema(old_fields))
    _write_file(run_dir, 0, "shard-00000.parquet", old)
    write_shard(run_dir, 0, 1, [example_row(reward_components={"lint": 0.5}, score_time_s=0.25)])
    df = read_trajectories(run_dir).sort_values("shard")
    assert list(df.schema_version) == [0, 0, 0, SCHEMA_VERSION]
    assert df.score_time_s.isna().sum() == 3 and df.score_time_s.iloc[3] == 0.25
    assert df.reward_components.iloc[3] == [("lint", 0.5)]
    compact(run_dir, 0)
    after = read_trajectories(run_dir).sort_values("shard")
    assert list(after.schema_version) == [0, 0, 0, SCHEMA_VERSION]  # rows keep their version


def test_compaction_refuses_to_drop_columns_written_by_a_newer_schema(run_dir):
    write_shard(run_dir, 0, 0, example_rows(2))
    newer = pq.read_table(live_files(run_dir)[0]).append_column("judge_score", pa.array([0.1, 0.2]))
    _write_file(run_dir, 0, "shard-00001.parquet", newer)
    assert len(read_trajectories(run_dir)) == 4
    with pytest.raises(ValueError, match="unknown to schema version"):
        compact(run_dir, 0)


def test_an_arrow_table_is_written_with_the_same_checks(run_dir):
    table = pa.Table.from_pylist(example_rows(4))
    write_shard_table(run_dir, 0, 0, table)
    assert len(read_trajectories(run_dir)) == 4
    with pytest.raises(ValueError, match="'tests_total'"):
        write_shard_table(run_dir, 0, 1, table.set_column(
            table.schema.get_field_index("tests_total"), "tests_total", pa.array(["4"] * 4)))


def test_drop_shards_from_removes_an_earlier_attempts_extra_shards_even_inside_a_compacted_file(run_dir):
    from storage.trajectories import drop_shards_from

    for k in range(6):  # an earlier attempt wrote 6 shards of 3 rows, then shards 0-3 compacted
        write_shard(run_dir, 2, k, example_rows(3, iteration=2, start=10 * k))
    compact(run_dir, 2, target_rows=12)
    for k in range(3):  # the retry writes only 3 shards
        write_shard(run_dir, 2, k, example_rows(3, iteration=2, start=100 + 10 * k))
    assert drop_shards_from(run_dir, 2, 3) >= 1
    assert shards_written(run_dir, 2) == {0, 1, 2}
    df = read_trajectories(run_dir, 2)
    assert len(df) == 9 and set(df["shard"]) == {0, 1, 2}
    assert drop_shards_from(run_dir, 2, 3) == 0  # idempotent


def test_drop_shards_from_keeps_the_lower_shards_of_a_file_that_straddles_the_cut(run_dir):
    from storage.trajectories import drop_shards_from

    for k in range(6):
        write_shard(run_dir, 1, k, example_rows(2, iteration=1, start=10 * k))
    compact(run_dir, 1)  # one file holding shards 0-5
    assert len(live_files(run_dir, 1)) == 1
    drop_shards_from(run_dir, 1, 4)
    df = read_trajectories(run_dir, 1)
    assert shards_written(run_dir, 1) == {0, 1, 2, 3}
    assert sorted(df["shard"].tolist()) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_solved_is_read_back_from_the_row_facts_where_a_writer_left_it_null(run_dir):
    # No `solved` key, as in rows written before schema version 4: row 4 passes every test,
    # row 3 too but is hack-flagged (never solved), row 6 was not scored (null).
    from storage.query import query

    rows = example_rows(7)
    rows[3].update(tests_passed=4, hack_flags=["exit_override"])
    write_shard(run_dir, 0, 0, rows)
    want = [False, False, False, False, True, False, None]
    assert read_trajectories(run_dir).sort_values("completion")["solved"].tolist() == want
    got = query(os.path.dirname(run_dir), "SELECT solved FROM trajectories ORDER BY completion")
    assert got.column("solved").to_pylist() == want


_APPENDER = textwrap.dedent("""
    import sys
    from storage.synthetic import example_row
    from storage.trajectories import append_shard
    run_dir, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for i in range(n):
        append_shard(run_dir, 0, [example_row(i=i, group_id=f"{who}:{i}")])
""")


def test_two_processes_appending_to_one_iteration_lose_and_share_no_shard(run_dir):
    """Two gateways on one run, each writing an episode a shard: every shard is written once
    and every row is there (without the lock both took one number, and one's file dropped the
    other's from the manifest)."""
    n = 12
    procs = [subprocess.Popen([sys.executable, "-c", _APPENDER, run_dir, who, str(n)],
                              cwd=os.getcwd()) for who in ("a", "b")]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    assert shards_written(run_dir, 0) == set(range(2 * n))
    df = read_trajectories(run_dir, iteration=0)
    assert sorted(df["group_id"]) == sorted(f"{w}:{i}" for w in "ab" for i in range(n))
