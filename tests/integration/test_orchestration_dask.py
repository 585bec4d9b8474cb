"""Dask at scale, on loopback: a separately started `dask scheduler` and two `dask worker`
processes (no nanny, so a killed worker stays dead), named by `cluster.address`. One worker is
killed (SIGKILL) while it executes rollouts of the rollout stage; the iteration still
completes, on the other worker, with every rollout stored exactly once."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dask_cluster import dask_cluster
from flows.env import standalone_env
from flows.stages import read_journal

from storage.registry import finished_iterations, read_metrics
from storage.trajectories import read_trajectories

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
ROOT = Path(__file__).resolve().parents[2]

@pytest.fixture()
def cluster(tmp_path):
    with dask_cluster(tmp_path / "dask.log", ROOT, workers=2, nanny=False) as c:
        yield c


def test_killed_worker_mid_rollouts_still_stores_every_rollout_once(cluster, tmp_path):
    address, client, procs = cluster
    pids = client.run(os.getpid)  # worker address -> pid
    assert sorted(pids.values()) == sorted(p.pid for p in procs[1:])
    out = tmp_path / "runs"
    run_dir = out / "tiny"
    cmd = [sys.executable, "-m", "flows.cli", "run", "--config", str(ROOT / "configs/tiny.yaml"),
           "--set", f"out_dir={out}", "--set", "iterations=1", "--set", f"cluster.address={address}",
           "--set", "tasks.tasks_per_iteration=8"]
    env = {**standalone_env(), "PREFECT_HOME": str(tmp_path / "prefect-home")}
    log = open(tmp_path / "flow.log", "w")
    flow = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    killed = None
    try:
        deadline = time.monotonic() + 240
        while killed is None:
            assert flow.poll() is None, (tmp_path / "flow.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "never saw the rollout stage running"
            if any(r["stage"] == "run_rollouts" and r["event"] == "start"
                   and r.get("round") == 0 and r.get("iteration") == 0  # training, not eval
                   for r in read_journal(run_dir)):
                busy = {w: keys for w, keys in client.processing().items()
                        if any(str(k).startswith("step_episode") for k in keys)}
                if busy:
                    killed = sorted(busy)[0]
                    os.kill(pids[killed], signal.SIGKILL)
                    break
            time.sleep(0.005)
        rc = flow.wait(timeout=300)
    finally:
        if flow.poll() is None:
            os.killpg(flow.pid, signal.SIGKILL)
        log.close()
    text = (tmp_path / "flow.log").read_text()
    assert rc == 0, text[-5000:]
    assert "dashboard http://127.0.0.1:" in text  # the Dask dashboard link is printed
    # the killed worker stayed dead: its rollouts were executed by the other one
    assert killed not in client.scheduler_info()["workers"]
    assert len(client.scheduler_info()["workers"]) == 1
    ends = [r for r in read_journal(run_dir)  # the training rounds' shards (not evaluation's)
            if r["stage"] == "run_rollouts" and r["event"] == "end" and isinstance(r["round"], int)]
    assert ends and all(r["iteration"] == 0 for r in ends)

    assert finished_iterations(str(run_dir)) == [0]
    df = read_trajectories(str(run_dir))
    m = read_metrics(str(run_dir)).iloc[0]
    assert len(df) == 4 * m["curriculum/groups_generated"] >= 32  # 8 tasks x G=4, + refills
    assert not df.duplicated(["group_id", "sample_index"]).any()
    assert df.groupby("group_id").size().eq(4).all()
    assert not df["infra_error"].any()
    assert m["cluster/threads"] == 1  # measured at the end of the iteration
