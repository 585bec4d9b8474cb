"""A run sent SIGTERM to its process group (what `timeout` and `make run` stopped by one send;
Ctrl-C sends SIGINT the same way) stops: it exits with 128 + the signal, the flow is recorded as
Crashed (Prefect's state for a run ended by a signal it was not asked for through its API),
nothing of the run is left running (no temporary Prefect server, Dask worker, trainer rank), and
the same command then resumes it and completes with every row stored once."""
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from stop_at_stage import stop_when_stage_starts

from flows.env import standalone_env
from prefect_server import own_api
from storage.registry import finished_iterations
from storage.trajectories import read_trajectories

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
EXIT_S = 120  # a bound for a hang, not the target (that figure is bench/bench_stop.py's)


def _cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "flows.cli", "run", "--config", str(ROOT / "configs/tiny.yaml"),
            "--set", f"out_dir={out}", "--set", "iterations=2"]


@pytest.mark.parametrize("stage, iteration, sig", [
    ("sample_completions", 1, signal.SIGTERM),  # while sampling
    ("update_policy", 0, signal.SIGINT),  # while the update trains, as a Ctrl-C
])
def test_signalled_run_stops_clean_and_resumes(tmp_path, stage, iteration, sig):
    out = tmp_path / "runs"
    run_dir = out / "tiny"
    env = own_api({**standalone_env(), "PREFECT_HOME": str(tmp_path / "prefect-home")})
    log = tmp_path / "first.log"
    stop = stop_when_stage_starts(_cmd(out), env, log, run_dir, stage, iteration, 300, EXIT_S,
                                  sig=sig)
    text = log.read_text()
    assert stop.returncode == 128 + sig, text[-4000:]
    assert stop.left == [], stop.left
    assert "Finished in state Crashed(" in text, text[-4000:]
    assert f"stopped by {signal.Signals(sig).name}" in text
    assert "Error logging to API" not in text  # the API outlived the flow's last words
    assert 1 not in finished_iterations(str(run_dir)), "the stop came after the whole run"

    second = subprocess.run(_cmd(out), cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=400)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-4000:]
    assert finished_iterations(str(run_dir)) == [0, 1]
    df = read_trajectories(str(run_dir))
    assert not df.duplicated(["iteration", "group_id", "sample_index"]).any()
    assert df.groupby(["iteration", "group_id"]).size().eq(4).all()  # tiny: G = 4
    assert sorted(df["iteration"].unique()) == [0, 1]
