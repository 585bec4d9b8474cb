"""`rl.overlap` through the real CLI: iteration i samples with version i-1 while update i-1 runs
in the resident trainer process, and the update of those stale samples is the decoupled PPO
one (tests/unit/test_training_updates.py checks its arithmetic). Here: the schedule (which
version sampled which iteration), that the stale updates really trained, and that a flow
SIGKILLed while an overlapped update is out, resumed in a new process whose own update rank is
then killed, ends with the very rows and weights of an uninterrupted run."""
import subprocess
import sys
from pathlib import Path

import pytest
from kill_at_stage import kill_when_stage_starts
from none_tasks import SETS, none_tasks

from flows.env import standalone_env
from flows.stages import read_journal
from storage.registry import finished_iterations, read_metrics
from storage.trajectories import read_trajectories
from training import checkpoints
from training.group import FAULT_ENV
from training.policy import load_policy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
KEY = ["iteration", "group_id", "sample_index"]


def _cmd(out: Path, tasks: Path) -> list[str]:
    sets = [*SETS, "iterations=3", "rl.overlap=true", f"out_dir={out}"]
    return [sys.executable, "-m", "flows.cli", "run", "--config", str(ROOT / "configs/tiny.yaml"),
            "--tasks", str(tasks), *[x for s in sets for x in ("--set", s)]]


def _env(tmp: Path, **extra) -> dict:
    # one thread everywhere: the two runs must round alike to compare weights bit for bit
    return {**standalone_env(), "OMP_NUM_THREADS": "1", "PREFECT_HOME": str(tmp / "home"),
            **extra}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("overlap")
    tasks = none_tasks(tmp / "none.jsonl")
    whole = subprocess.run(_cmd(tmp / "whole", tasks), cwd=ROOT, env=_env(tmp),
                           capture_output=True, text=True, timeout=600)
    assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-4000:]

    out, run = tmp / "cut", tmp / "cut" / "tiny"
    kill_when_stage_starts(_cmd(out, tasks), _env(tmp), tmp / "first.log", run,
                           "update_policy", 1, 400)
    assert 2 not in finished_iterations(str(run)), "the kill came after the whole run"
    marker = tmp / "rank-killed"
    second = subprocess.run(_cmd(out, tasks), cwd=ROOT, timeout=600, capture_output=True,
                            text=True, env=_env(tmp, **{FAULT_ENV: f"0:2:{marker}"}))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-4000:]
    return tmp / "whole" / "tiny", run, marker


def _weights(run: Path, version: int) -> dict:
    return load_policy(str(checkpoints.checkpoint_dir(str(run), version) / "model")).state_dict()


def test_each_iteration_samples_with_the_version_before_and_trains_it_off_policy(runs):
    whole = runs[0]
    rows = read_trajectories(str(whole))
    assert {it: sorted(g["policy_version"].unique()) for it, g in rows.groupby("iteration")} == {
        0: [0], 1: [0], 2: [1]}
    m = read_metrics(str(whole)).set_index("iteration")
    assert list(m["policy_sampled"]) == [0, 0, 1] and list(m["policy_version"]) == [1, 2, 3]
    assert (m["train/sequences"] > 0).all(), "nothing was trained: the check would be empty"
    # iteration 0 is on-policy (v0 sampled, v0 updated); 1 and 2 are one version stale
    assert m["train/staleness"].isna().iloc[0] and list(m["train/staleness"].iloc[1:]) == [1, 1]
    assert (m["train/is_weight_mean"].iloc[1:] > 0).all()
    assert m["time/update_wait_s"].notna().all()
    moved = max((a - b).abs().max().item()
                for a, b in zip(_weights(whole, 3).values(), _weights(whole, 2).values()))
    assert moved > 1e-5, "the last (stale) update took no step"


def test_a_killed_overlapped_run_resumes_to_the_rows_and_weights_of_an_uninterrupted_one(runs):
    whole, cut, marker = runs
    assert marker.is_file(), "the resumed run's rank was never killed"
    failed = [j for j in read_journal(cut) if j["stage"] == "update_policy"
              and j["event"] == "failed"]
    assert len(failed) == 1 and failed[0]["iteration"] == 2, failed
    assert finished_iterations(str(cut)) == [0, 1, 2]
    a, b = read_trajectories(str(whole)), read_trajectories(str(cut))
    assert not b.duplicated(KEY).any() and len(a) == len(b)
    a, b = a.sort_values(KEY), b.sort_values(KEY)
    for col in ("completion", "reward", "policy_version"):
        assert a[col].tolist() == b[col].tolist(), col
    wa, wb = _weights(whole, 3), _weights(cut, 3)
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) == 0.0
