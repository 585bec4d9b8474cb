"""The run registry: config and hash, metrics, checkpoints, finished iterations."""
from __future__ import annotations

import math
import os

import pytest
import yaml

from storage.registry import (last_finished_iteration, list_checkpoints, list_runs,
                              mark_iteration_done, read_metrics, read_run_config, read_run_info,
                              record_checkpoint, record_metrics, write_run_config)


@pytest.fixture
def run_dir(tmp_path):
    return str(tmp_path / "runs" / "run-a")


def test_the_resolved_config_is_written_as_yaml_with_its_hash(run_dir):
    config = {"seed": 3, "rewards": {"pass_weight": 1.0}, "sizes": (1, 2)}
    write_run_config(run_dir, config, "0123456789ab")
    with open(os.path.join(run_dir, "config.yaml")) as f:
        assert yaml.safe_load(f) == {"seed": 3, "rewards": {"pass_weight": 1.0}, "sizes": [1, 2]}
    info = read_run_info(run_dir)
    assert info["run_id"] == "run-a" and info["config_hash"] == "0123456789ab"
    assert read_run_config(run_dir)["rewards"] == {"pass_weight": 1.0}


def test_rewriting_the_config_keeps_the_creation_time_and_updates_the_hash(run_dir):
    write_run_config(run_dir, {"a": 1}, "h1")
    created = read_run_info(run_dir)["created_at"]
    write_run_config(run_dir, {"a": 2}, "h2")
    info = read_run_info(run_dir)
    assert info["created_at"] == created and info["config_hash"] == "h2"


def test_a_config_that_is_not_plain_data_is_refused_with_the_reason(run_dir):
    with pytest.raises(ValueError, match="config: not JSON-serialisable"):
        write_run_config(run_dir, {"path": object()}, "h")
    assert not os.path.exists(os.path.join(run_dir, "config.yaml"))


def test_recording_an_iteration_again_replaces_its_metrics(run_dir):
    record_metrics(run_dir, 0, {"rollout/pass_rate": 0.25, "train/loss": 1.5})
    record_metrics(run_dir, 1, {"rollout/pass_rate": 0.5})
    record_metrics(run_dir, 0, {"rollout/pass_rate": 0.3, "train/loss": 1.25})
    m = read_metrics(run_dir)
    assert list(m.iteration) == [0, 1]
    assert list(m["rollout/pass_rate"]) == [0.3, 0.5]
    assert m["train/loss"][0] == 1.25 and math.isnan(m["train/loss"][1])


def test_a_run_with_many_metrics_reads_as_a_frame_columns_can_be_added_to_without_a_warning(
        run_dir):
    """`rollforge query` adds `run_id` to each run's metrics: a frame left in many blocks made
    that print pandas' PerformanceWarning on every query of a real run."""
    import warnings

    for it in range(2):
        record_metrics(run_dir, it, {f"m/{i}": (i if i % 2 else i / 2) for i in range(150)})
    m = read_metrics(run_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.assign(run_id="run-a")
    assert m["m/3"].tolist() == [3, 3] and m["m/4"].tolist() == [2.0, 2.0]


def test_nan_and_numpy_metrics_are_recorded(run_dir):
    import numpy as np

    record_metrics(run_dir, 0, {"reward/mean": float("nan"), "n": np.int64(4), "x": np.float32(0.5)})
    m = read_metrics(run_dir)
    assert math.isnan(m["reward/mean"][0]) and m["n"][0] == 4 and m["x"][0] == 0.5


def test_metrics_that_are_not_scalars_are_refused_naming_the_key(run_dir):
    with pytest.raises(ValueError, match="metric 'hist'"):
        record_metrics(run_dir, 0, {"hist": [1, 2]})
    with pytest.raises(ValueError, match="iteration=-1"):
        record_metrics(run_dir, -1, {})


def test_no_metrics_reads_as_an_empty_frame(run_dir):
    m = read_metrics(run_dir)
    assert m.empty and "iteration" in m.columns


def test_checkpoints_are_listed_by_iteration_and_re_recording_replaces(run_dir):
    record_checkpoint(run_dir, 2, "/ckpt/2", {"heldout/pass_rate": 0.5})
    record_checkpoint(run_dir, 0, "/ckpt/0", {"heldout/pass_rate": 0.1})
    record_checkpoint(run_dir, 2, "/ckpt/2b", {"heldout/pass_rate": 0.6})
    ckpts = list_checkpoints(run_dir)
    assert [(c["iteration"], c["path"]) for c in ckpts] == [(0, "/ckpt/0"), (2, "/ckpt/2b")]
    assert ckpts[1]["metrics"] == {"heldout/pass_rate": 0.6}


def test_last_finished_iteration_is_none_until_one_is_marked(run_dir):
    assert last_finished_iteration(run_dir) is None
    for it in (0, 1, 2):
        mark_iteration_done(run_dir, it)
    mark_iteration_done(run_dir, 1)  # idempotent
    assert last_finished_iteration(run_dir) == 2


def test_registry_writes_leave_no_temporary_files(run_dir):
    write_run_config(run_dir, {"a": 1}, "h")
    record_metrics(run_dir, 0, {"x": 1})
    record_checkpoint(run_dir, 0, "/c", {})
    mark_iteration_done(run_dir, 0)
    names = [n for _, _, files in os.walk(run_dir) for n in files]
    assert names and not [n for n in names if ".tmp-" in n]


def test_list_runs_finds_run_folders_of_a_store(tmp_path):
    store = tmp_path / "runs"
    write_run_config(str(store / "b"), {}, "h")
    record_metrics(str(store / "a"), 0, {"x": 1})
    (store / "not-a-run").mkdir()
    assert [os.path.basename(r) for r in list_runs(str(store))] == ["a", "b"]
