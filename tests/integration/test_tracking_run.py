"""One iteration of the tiny config through the real CLI with `tracking` naming every tracker,
run in a network namespace of its own (loopback only: the run's Prefect API and Dask cluster
work, nothing else is reachable): the TensorBoard event files, the MLflow SQLite store and
the offline W&B run hold the metrics the run's registry recorded, and its config."""
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from flows.env import standalone_env
from prefect_server import own_api
from flows.tracking import OFFLINE_ENV, scalars, store_uri
from storage.registry import read_metrics

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _offline(cmd: list[str]) -> list[str]:
    """`cmd` in a network namespace of its own whose only interface is loopback, brought up: as
    root a plain one (the sandbox keeps its privileges), otherwise in a user namespace too."""
    if not (shutil.which("unshare") and shutil.which("ip")):
        pytest.skip("needs unshare and ip (util-linux, iproute2) for a network namespace")
    for flags in ("-n", "-rn"):
        probe = subprocess.run(["unshare", flags, "ip", "link", "set", "lo", "up"],
                               capture_output=True, text=True)
        if probe.returncode == 0:
            return ["unshare", flags, "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *cmd]
    pytest.skip(f"no network namespace here: {probe.stderr.strip()}")


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    cmd = [sys.executable, "-m", "flows.cli", "run", "--config", str(ROOT / "configs/tiny.yaml"),
           "--set", f"out_dir={out}", "--set", "iterations=1",
           "--set", "tracking=[tensorboard, mlflow, wandb]"]
    proc = subprocess.run(_offline(cmd), cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env=own_api(standalone_env()))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    run_dir = out / "tiny"
    registry = read_metrics(str(run_dir)).set_index("iteration").loc[0].to_dict()
    return run_dir, scalars({k: v for k, v in registry.items() if k != "recorded_at"}), proc


def test_no_tracker_failed_in_the_offline_run(tracked_run):
    _, _, proc = tracked_run
    assert "tracking '" not in proc.stdout + proc.stderr  # the warning a failed tracker leaves


def test_tensorboard_holds_the_registry_metrics(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, expected, _ = tracked_run
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0,
                                                                           "tensors": 0})
    events.Reload()
    got = {tag: [(e.step, e.value) for e in events.Scalars(tag)]
           for tag in events.Tags()["scalars"]}
    assert set(got) == set(expected)
    for k, v in expected.items():  # TensorBoard stores scalars as float32
        assert got[k] == [(0, pytest.approx(v, rel=1e-6, abs=1e-12))], k
    assert "config" in str(events.Tags()["tensors"])


def test_mlflow_store_holds_the_registry_metrics_and_the_config(tracked_run, monkeypatch):
    for k, v in OFFLINE_ENV.items():  # this reader too: no telemetry
        monkeypatch.setenv(k, v)
    from mlflow.tracking import MlflowClient

    run_dir, expected, _ = tracked_run
    client = MlflowClient(tracking_uri=store_uri(run_dir))
    (run,) = client.search_runs([client.get_experiment_by_name("rollforge").experiment_id])
    assert run.info.run_name == "tiny" and run.info.status == "FINISHED"
    assert run.data.metrics == expected
    history = client.get_metric_history(run.info.run_id, "rollout/mean_reward")
    assert [m.step for m in history] == [0]
    assert run.data.params["sampling.group_size"] == "4" and run.data.params["run_id"] == "tiny"
    assert run.data.params["tracking"] == '["tensorboard", "mlflow", "wandb"]'


def _wandb_records(path: Path):
    """The protobuf records of an offline W&B run's transaction log (`run-<id>.wandb`): a
    LevelDB-style log, a 7-byte header then 32 KiB blocks of records (crc32, length, kind:
    1 whole, 2 first, 3 middle, 4 last part), each a `wandb_internal_pb2.Record`."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:7] == b":W&B" + struct.pack("<HB", 0xBEE1, 0)
    pos, block, parts = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if left < 7 or (crc, n, kind) == (0, 0, 0):  # the rest of the block is padding
            pos += left
            continue
        parts += data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            yield record
            parts = b""


def test_wandb_offline_run_holds_the_registry_metrics_and_the_config(tracked_run):
    run_dir, expected, _ = tracked_run
    (log,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    records = list(_wandb_records(log))
    (history,) = [r.history for r in records if r.WhichOneof("record_type") == "history"]
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    # an item names its metric by `key`, or by `nested_key` (the name's parts)
    logged = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in history.item}
    assert history.step.num == 0 and run.display_name == "tiny"
    assert {k: v for k, v in logged.items() if not k.startswith("_")} == expected
    config = {i.key: json.loads(i.value_json) for i in run.config.update}
    assert config["sampling"]["group_size"] == 4 and config["tracking"] == [
        "tensorboard", "mlflow", "wandb"]
