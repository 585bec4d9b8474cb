"""The loop trains on what an unmodified agent played through the gateway (rl.gateway_rows),
through the real parts: `rollforge run` (a Prefect flow, a Dask LocalCluster, the process
sandbox, the Parquet store, a DeepSpeed update) makes versions 0 and 1; a gateway serving
version 0 with `--episodes` (uvicorn on loopback) is played by examples/agent_client.py, which
knows only `openai`; the same command, resumed for a second iteration, takes those episodes
(one version behind: off-policy rows, corrected by the update's importance weights) beside its
own rows, records which it took, and trains on both."""
import json
import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from flows.config import load_config
from flows.env import standalone_env
from flows.sampler import policy_tokenizer
from flows.stages import train_row_mask
from gateway.app import Gateway
from gateway.play import Episodes, store_dir
from gateway.records import EpisodeLog
from gateway.server import Served
from storage import registry
from storage.trajectories import read_rows, read_trajectories

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
KEY = "loop-key-2468"
SETS = ["rl.gateway_rows=true", "tasks.families=[add]", "tasks.difficulties=[1]",
        "tasks.tasks_per_family=4"]


def _run(out: Path, iterations: int) -> None:
    sets = [x for s in [f"out_dir={out}", f"iterations={iterations}", *SETS] for x in ("--set", s)]
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "run", "--config",
                           str(ROOT / "configs/tiny.yaml"), *sets], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env=standalone_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


def _play_through_the_gateway(cfg, version: int, episodes: int) -> None:
    """`episodes` of one task by the agent, and one more by a client that sends the task's
    reference (the grader pays it 1; the untrained policy's replies earn 0): under dynamic
    sampling only a group whose rewards differ trains."""
    records = EpisodeLog(Path(cfg.run_dir) / "gateway" / "episodes")
    play = Episodes(cfg, records, policy_tokenizer(cfg.run_dir, version))
    srv = Served(Gateway(cfg, version, KEY, records, None, play))
    task_id = sorted(play.tasks)[0]
    try:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "agent_client.py"), "--base-url", srv.url,
             "--model", cfg.run_id, "--max-tokens", "12", "--episodes", str(episodes),
             "--task-id", task_id],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "ROLLFORGE_GATEWAY_KEY": KEY})
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert len([json.loads(line) for line in proc.stdout.splitlines()]) == episodes
        client = openai.OpenAI(base_url=srv.url, api_key=KEY, max_retries=0)
        ep = client.post("/rollforge/episodes", cast_to=object, body={"task_id": task_id})
        client.completions.create(model=cfg.run_id, prompt=ep["observation"], max_tokens=8,
                                  extra_headers={"X-Episode-Id": ep["episode_id"]})
        done = client.post(f"/rollforge/episodes/{ep['episode_id']}/step", cast_to=object,
                           body={"action": play.tasks[task_id].reference})
        assert done["done"] and done["reward"] == 1.0
    finally:
        srv.stop()


def test_the_loop_trains_on_the_episodes_an_agent_played_through_the_gateway(tmp_path):
    out = tmp_path / "runs"
    _run(out, 1)
    cfg = load_config(ROOT / "configs/tiny.yaml", [f"out_dir={out}", "iterations=2", *SETS])
    first = registry.read_metrics(cfg.run_dir).set_index("iteration")
    assert first.loc[0, "gateway/episodes_taken"] == 0  # nobody had played yet

    _play_through_the_gateway(cfg, 0, 3)
    played = read_trajectories(store_dir(cfg), 0)
    assert played["episode_id"].nunique() == 4
    assert played["reward"].nunique() > 1  # one informative group

    _run(out, 2)  # resumes: iteration 1 samples with v1 and takes v0's episodes (lag 1)
    m = registry.read_metrics(cfg.run_dir).set_index("iteration")
    assert m.loc[1, "gateway/episodes_taken"] == 4
    assert m.loc[1, "gateway/rows_trained"] == len(played)
    own = read_rows(cfg.run_dir, 1)
    own_kept = int(train_row_mask(own).sum())  # dynamic sampling's
    assert m.loc[1, "train/sequences"] == own_kept + len(played)
    # v0's rows, trained from v1, are the update's stale samples (importance-weighted)
    assert m.loc[1, "train/stale_samples"] == len(played)
    assert m.loc[1, "train/staleness"] == 1
    take = registry.gateway_takes(cfg.run_dir)
    assert sorted(take) == [0, 1]
    assert take[1]["episodes"] == sorted(played["episode_id"].unique())
    assert take[1]["versions"] == [0, 1]
    # the gateway's rows stay in their own store; the loop's iteration holds its own only
    assert {r.run_id for r in own} == {cfg.run_id}
