"""A flow process killed (SIGKILL, with its Dask workers and temporary API) in the middle of an
iteration: the next invocation resumes at the first unfinished stage, in a new process, without
running again any stage that had finished, and every rollout is stored exactly once."""
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kill_at_stage import kill_when_stage_starts

from flows.env import standalone_env
from prefect_server import own_api
from flows.stages import read_journal
from storage.registry import finished_iterations
from storage.trajectories import read_trajectories

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
ROOT = Path(__file__).resolve().parents[2]
STAGES_BEFORE_UPDATE = ("generate_tasks", "sample_completions", "run_rollouts", "score",
                        "write_trajectories")



def _cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "flows.cli", "run", "--config", str(ROOT / "configs/tiny.yaml"),
            "--set", f"out_dir={out}", "--set", "iterations=2"]


def _where(rec: dict) -> tuple:
    return (rec["stage"], rec.get("iteration"), rec.get("version"), rec.get("round"),
            rec.get("shard"))


def test_killed_run_resumes_without_repeating_finished_stages(tmp_path):
    out = tmp_path / "runs"
    run_dir = out / "tiny"
    env = own_api({**standalone_env(), "PREFECT_HOME": str(tmp_path / "prefect-home")})
    first = kill_when_stage_starts(_cmd(out), env, tmp_path / "first.log", run_dir,
                                   "update_policy", 0, 240)
    assert first.returncode == -signal.SIGKILL
    assert 1 not in finished_iterations(str(run_dir)), "the kill came after the whole run"
    before = read_journal(run_dir)
    # Stages that ended before the update began: the kill lands a few ms after the update's
    # start is seen, and an update that ended in that window may not have persisted its result
    # yet (its journal line comes first), so running it again is right; it is not asserted on.
    cut = next(i for i, r in enumerate(before) if r["stage"] == "update_policy"
               and r["event"] == "start" and r["iteration"] == 0)
    finished = {_where(r) for r in before[:cut] if r["event"] == "end"}
    for stage in STAGES_BEFORE_UPDATE:
        assert any(w[0] == stage and w[1] == 0 for w in finished), stage
    files_before = {p: p.stat().st_mtime_ns for p in (run_dir / "trajectories").rglob("*.parquet")}
    assert files_before

    second = subprocess.run(_cmd(out), cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-4000:]
    rerun = [r for r in read_journal(run_dir)[len(before):] if r["event"] == "start"]
    assert rerun, "the second invocation ran nothing"
    assert {r["pid"] for r in rerun} == {rerun[0]["pid"]} != {first.pid}
    repeated = sorted({_where(r) for r in rerun} & finished, key=str)
    assert repeated == [], f"finished stages ran again: {repeated}"
    # SFT, the v0 evaluation and iteration 0's rollout stages came from the stored results
    ran_again = {(r["stage"], r.get("iteration"), r.get("version")) for r in rerun}
    assert ("sft_warm_start", None, 0) not in ran_again
    assert ("evaluate", None, 0) not in ran_again
    assert not [w for w in ran_again if w[0] in STAGES_BEFORE_UPDATE and w[1] == 0]
    assert finished_iterations(str(run_dir)) == [0, 1]
    for p, t in files_before.items():  # iteration 0's trajectory files were not rewritten
        assert p.stat().st_mtime_ns == t, p
    df = read_trajectories(str(run_dir))
    assert not df.duplicated(["iteration", "group_id", "sample_index"]).any()
    assert df.groupby(["iteration", "group_id"]).size().eq(4).all()  # tiny: G = 4
    assert sorted(df["iteration"].unique()) == [0, 1]
