"""`rollforge eval --model` killed part-way and run again with the same command: the real CLI,
a real tiny checkpoint, the real Prefect stages, Dask cluster and sandbox."""
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from envs.sources import build_pool
from flows.config import load_config, task_sources
from flows.eval_model import FAULT_ENV
from flows.stages import read_journal
from storage import evaluations
from storage.query import query
from training import checkpoints
from training.trainer import sft_warm_start

ROOT = Path(__file__).resolve().parents[2]
SOURCE = {"kind": "io", "options": {"families": ["add", "repeat"], "difficulties": [1],
                                    "tasks_per_family": 3, "n_tests": 3}}
N, CHUNK = 2, 2  # 6 tasks: 3 chunks of 2 tasks x (1 greedy + 2 sampled)


def _tiny_checkpoint(run_dir: Path) -> Path:
    cfg = load_config(ROOT / "configs/tiny.yaml")
    pairs = [t for t in build_pool(task_sources(cfg)) if t.reference][:16]
    sft_warm_start(str(run_dir), [t.prompt for t in pairs], [t.reference for t in pairs],
                   cfg.policy, cfg.sft, cfg.rl, cfg.seed)
    return checkpoints.checkpoint_dir(str(run_dir), 0)


def _eval(ckpt: Path, store: Path, log: Path, env: dict) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "flows.cli", "eval", "--model", str(ckpt),
           "--config", str(ROOT / "configs/tiny.yaml"), "--sources", json.dumps(SOURCE),
           "--split", "all", "--n", str(N), "--chunk-size", str(CHUNK), "--k", "1,2",
           "--store", str(store)]
    with open(log, "w") as out:
        # its own session: what the killed run leaves (Dask workers, the temporary API) goes too
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=1500)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=60)
    return subprocess.CompletedProcess(cmd, proc.returncode, log.read_text(), "")


@pytest.mark.slow
def test_a_killed_evaluation_resumes_without_generating_or_grading_a_sample_twice(tmp_path):
    ckpt = _tiny_checkpoint(tmp_path / "run")
    store = tmp_path / "store"
    env = {**os.environ, FAULT_ENV: "1"}  # SIGKILL itself right after its first chunk's file
    first = _eval(ckpt, store, tmp_path / "first.log", env)
    assert first.returncode == -signal.SIGKILL, first.stdout[-4000:]
    (eval_id,) = os.listdir(store / evaluations.EVAL_DIR)
    assert evaluations.chunks_written(str(store), eval_id) == {0}
    chunk0 = store / evaluations.EVAL_DIR / eval_id / "rows" / "chunk-00000.parquet"
    before = chunk0.read_bytes()

    env.pop(FAULT_ENV)
    second = _eval(ckpt, store, tmp_path / "second.log", env)
    assert second.returncode == 0, second.stdout[-4000:]
    # the two chunks left: 4 tasks x 3 samples, each generated and stepped once, now
    assert ("chunks: 1 reused, 2 run now (of 3); sequences generated now 12, from the stage "
            "cache 0; steps graded now 12") in second.stdout, second.stdout[-3000:]
    assert chunk0.read_bytes() == before

    # across both processes, every sample stage and rollout shard finished once
    journal = read_journal(store / evaluations.EVAL_DIR / eval_id / "work")
    ends = Counter((r["stage"], r.get("round"), r.get("shard")) for r in journal
                   if r["event"] == "end" and r["stage"] in ("sample_completions", "run_rollouts"))
    assert len(ends) == 12 and set(ends.values()) == {1}, ends  # 3 chunks x 2 modes x 2 stages

    rows = query(str(store), "SELECT task_id, mode, sample_index, chunk, version, model, seed, "
                             "passed, infra_error, prompt, kind FROM evaluations").to_pylist()
    assert len(rows) == 6 * (1 + N)
    assert len({(r["task_id"], r["mode"], r["sample_index"]) for r in rows}) == len(rows)
    assert Counter(r["mode"] for r in rows) == {"greedy": 6, "sampled": 12}
    assert {r["chunk"] for r in rows} == {0, 1, 2} and {r["version"] for r in rows} == {0}
    assert not any(r["infra_error"] for r in rows)
    # what `rollforge data export --evaluations` needs of a row: the prompt the model answered
    assert all(r["prompt"].startswith("def ") and r["kind"] == "io" for r in rows)
    assert "| family=add | 3 |" in second.stdout and "pass@2 [bootstrap 95%]" in second.stdout
