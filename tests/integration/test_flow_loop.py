"""Two iterations of the tiny config through the real CLI: a real Prefect flow (temporary local
API), a real Dask LocalCluster, the process sandbox and a real DeepSpeed engine."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from flows.env import standalone_env
from prefect_server import own_api
from storage.registry import finished_iterations, read_metrics
from storage.trajectories import read_trajectories

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
ROLLFORGE = [sys.executable, "-m", "flows.cli"]



def _run(out_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*ROLLFORGE, "run", "--config", str(ROOT / "configs/tiny.yaml"),
         "--set", f"out_dir={out_dir}", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=own_api(standalone_env()))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    proc = _run(out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return out, proc


def test_two_iterations_write_one_row_per_rollout(first_run):
    out, _ = first_run
    run_dir = out / "tiny"
    df = read_trajectories(str(run_dir))
    # tiny.yaml: 4 tasks x group of 4 = 16 rollouts per iteration, 2 iterations, plus one
    # refill round (tasks.refill_rounds) of 4 rollouts per group dynamic sampling dropped
    groups = read_metrics(str(run_dir)).set_index("iteration")["curriculum/groups_generated"]
    assert sorted(df["iteration"].unique()) == [0, 1]
    assert df.groupby("iteration").size().tolist() == [4 * groups[0], 4 * groups[1]]
    assert all(4 <= g <= 8 for g in groups)
    assert df.groupby(["iteration", "group_id"]).size().eq(4).all()
    assert not df.duplicated(["iteration", "group_id", "sample_index"]).any()
    scored = df[~df["infra_error"]]
    assert len(scored) == len(df), "the process sandbox had infrastructure errors"
    assert scored["reward"].between(-1.0, 1.0).all()
    assert scored["pass_fraction"].between(0.0, 1.0).all()
    assert (df["policy_version"] == df["iteration"]).all()
    assert df["sandbox_backend"].eq("process").all()
    for _, r in df.iterrows():
        assert len(r["sampling_logprobs"]) == len(r["completion_token_ids"])
        assert all(lp <= 0.0 for lp in r["sampling_logprobs"])


def test_parquet_files_are_zstd_and_carry_the_schema(first_run):
    out, _ = first_run
    files = sorted((out / "tiny" / "trajectories").rglob("*.parquet"))
    assert files
    meta = pq.ParquetFile(files[0]).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    names = set(pq.read_schema(files[0]).names)
    assert {"reward", "advantage", "completion_token_ids", "hack_flags", "config_hash"} <= names


def test_checkpoints_and_resolved_config_are_saved(first_run):
    out, proc = first_run
    run_dir = out / "tiny"
    for v in (0, 1, 2):  # v0 = SFT start, then one per iteration
        meta = json.loads((run_dir / "checkpoints" / f"v{v:04d}" / "meta.json").read_text())
        assert meta["version"] == v
        assert (run_dir / "checkpoints" / f"v{v:04d}" / "model" / "config.json").is_file()
        assert (run_dir / "checkpoints" / f"v{v:04d}" / "engine").is_dir()
    assert "iterations: 2" in (run_dir / "config.yaml").read_text()
    assert finished_iterations(str(run_dir)) == [0, 1]
    m = read_metrics(str(run_dir))
    assert list(m["iteration"]) == [0, 1]
    assert not math.isnan(m["heldout/pass_sampled"].iloc[-1])
    for stage in ("sample", "run_rollouts", "score", "write_trajectories", "update_policy",
                  "evaluate"):  # per-stage seconds (tiny.yaml evaluates every iteration)
        assert (m[f"time/{stage}_s"] > 0).all(), stage
    assert "held-out pass rate" in proc.stdout and "SFT start" in proc.stdout
    # the sample stages run in play's threads: no deadline Prefect could not enforce (it
    # warned once a call, 57 times in `make run`)
    assert "running in a worker thread" not in proc.stdout + proc.stderr


def test_second_invocation_resumes_instead_of_starting_over(first_run):
    out, _ = first_run
    run_dir = out / "tiny"
    before = {p: p.stat().st_mtime_ns for p in (run_dir / "trajectories").rglob("*.parquet")}
    proc = _run(out, "--set", "iterations=3")
    assert proc.returncode == 0, proc.stderr[-5000:]
    log = proc.stdout + proc.stderr
    assert "iterations 2..2 (resumed)" in log
    after = {p: p.stat().st_mtime_ns for p in (run_dir / "trajectories").rglob("*.parquet")}
    # the finished iterations' files are untouched; only iteration 2 was added
    assert all(after.get(p) == t for p, t in before.items())
    df = read_trajectories(str(run_dir))
    groups = read_metrics(str(run_dir)).set_index("iteration")["curriculum/groups_generated"]
    assert df.groupby("iteration").size().tolist() == [4 * groups[i] for i in (0, 1, 2)]
    assert finished_iterations(str(run_dir)) == [0, 1, 2]


_PASS_RATES = """
import json, sys
from flows.config import validate_config
from flows.rounds import pass_rates_on
from flows.stages import heldout_tasks
from storage import registry

if __name__ == "__main__":
    run_dir = sys.argv[1]
    cfg = validate_config({**registry.read_run_config(run_dir), "out_dir": sys.argv[2],
                           "run_id": "tiny"})
    print("RATES", json.dumps(pass_rates_on(cfg, 2, heldout_tasks(cfg), "heldout")))
"""


def test_pass_rates_on_outside_the_flow_matches_the_runs_own_evaluation(first_run, tmp_path):
    """What the benchmarks evaluate a checkpoint with (flows.rounds.pass_rates_on, from a
    plain script) gives the run's own held-out figures for the same version."""
    out, _ = first_run
    script = tmp_path / "rates.py"
    script.write_text(_PASS_RATES)
    proc = subprocess.run([sys.executable, str(script), str(out / "tiny"), str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**standalone_env(), "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    rates = json.loads(proc.stdout.split("RATES ", 1)[1].splitlines()[0])
    m = read_metrics(str(out / "tiny")).set_index("iteration").iloc[-1]  # evaluates v2
    assert rates["heldout/tasks"] == m["heldout/tasks"] > 0
    assert rates["heldout/pass_greedy"] == m["heldout/pass_greedy"]
    assert rates["heldout/pass_sampled"] == m["heldout/pass_sampled"]
