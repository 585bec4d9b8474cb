"""Episode mode end to end: one iteration of configs/episodes.yaml, shrunk, through the real CLI
(a real Prefect flow on a temporary local API, a Dask LocalCluster, the process sandbox, the
Parquet store and a DeepSpeed update); then a GRPO update on episode rows a scripted policy
played through the same sandbox and grader, so the masked update runs on real rewards that
differ within a group."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from flows.env import standalone_env
from storage.registry import finished_iterations, read_metrics
from storage.trajectories import read_trajectories

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TINY = ["iterations=1", "eval_every=1", "sft.steps=3", "sft.batch_size=4", "policy.n_layer=1",
        "policy.n_embd=32", "policy.n_head=2", "tasks.tasks_per_iteration=2",
        "tasks.tasks_per_family=3", "tasks.difficulties=[1]", "tasks.heldout_samples=1",
        "tasks.sft_variants=1", "tasks.families=[max_or,boxes]", "sampling.group_size=2",
        "episodes.action_tokens=24", "episodes.max_turns=2", "rl.micro_batch_size=4",
        # each episode's turns by itself: its stages called from play's threads, in the flow's
        # run (the single-turn runs of the other tests go through the synchronous barrier)
        "sampling.turns=per_episode",
        # the turn credit's columns through the real store and the update
        "rl.turn_credit=progress"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    sets = [x for s in [f"out_dir={out}", *TINY] for x in ("--set", s)]
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "run", "--config",
                           str(ROOT / "configs/episodes.yaml"), *sets],
                          cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env=standalone_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return out / "episodes"


def test_one_row_per_episode_with_turns_and_a_policy_env_token_mask(run):
    df = read_trajectories(str(run))
    rounds = int(read_metrics(str(run)).iloc[0]["curriculum/rounds"])  # refills, as one-shot
    assert len(df) == 2 * 2 * rounds  # 2 tasks x a group of 2 episodes, per round
    assert df.groupby("group_id").size().eq(2).all()
    assert not df.duplicated("episode_id").any()
    for _, r in df.iterrows():
        ids, mask, lps = r["completion_token_ids"], r["completion_mask"], r["sampling_logprobs"]
        assert len(ids) == len(mask) == len(lps)
        assert 1 <= r["turns"] <= 2 and len(r["turn_seconds"]) == len(r["turn_actions"])
        assert r["end_reason"] in ("submit", "max_turns", "time_budget", "context_full")
        assert all(lp == 0.0 for lp, m in zip(lps, mask) if m == 0)
        assert sum(mask) > 0
        if r["turns"] == 2:  # the first observation sits between the two actions, masked out
            assert 0 in list(mask) and r["completion"].count("<obs>") == 1
        assert not r["infra_error"] and r["tests_total"] > 0
        runs = sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))
        assert len(r["turn_progress"]) == r["turns"] == len(r["turn_advantages"]) == runs
        assert r["turn_advantages"][0] == pytest.approx(r["advantage"])


def test_the_iteration_is_checkpointed_with_episode_metrics(run):
    meta = json.loads((run / "checkpoints" / "v0001" / "meta.json").read_text())
    assert meta["version"] == 1
    assert finished_iterations(str(run)) == [0]
    m = read_metrics(str(run)).iloc[0]
    assert 1 <= m["episode/turns_mean"] <= 2 and m["episode/count"] == 4 * m["curriculum/rounds"]
    assert "heldout/pass_greedy" in m.index
    journal = [json.loads(line) for line in (run / "stages.jsonl").read_text().splitlines()]
    # per-episode turns: the local sampler takes one call at a time, each holding every
    # episode ready then (at least one per turn, at most one per action); each episode's step
    # before its last turn is a rollout stage of its own (more than one per turn; at most one
    # per action, and one more for an episode ended for a full context)
    rows = read_trajectories(str(run))
    played, actions = int(rows["turns"].max()), int(rows["turns"].sum())
    full = int((rows["end_reason"] == "context_full").sum())
    for stage, fewest, most in (("sample_completions", played, actions),
                                ("run_rollouts", played + 1, actions + full)):
        ends = [j for j in journal if j["stage"] == stage and j["event"] == "end"
                and j.get("round") == 0]
        assert fewest <= len(ends) <= most, (stage, len(ends), played, actions)


def test_grpo_update_trains_on_scripted_episode_rows(run, tmp_path):
    import shutil

    from envs.io.procedural import first_attempts, generate_suite
    from envs.registry import make_env
    from flows.config import load_config
    from flows.episode_exec import step_local
    from flows.episodes import play
    from flows.scoring import episode_rows
    from flows.scripted import scripted_policy
    from flows.iteration import update_policy
    from training import checkpoints
    from training.tokenizer import ByteTokenizer

    cfg = load_config(ROOT / "configs/episodes.yaml", [f"out_dir={tmp_path}", *TINY,
                                                       "episodes.max_turns=3",
                                                       "tasks.dynamic_sampling=false"])
    # version 0: the run's warm start
    shutil.copytree(run / "checkpoints" / "v0000", Path(cfg.run_dir) / "checkpoints" / "v0000")
    tasks = generate_suite(["max_or"], [1], 1)
    naive = first_attempts(["max_or"], [1], 1)
    tok = ByteTokenizer()
    policies = [scripted_policy(naive, tok, True), scripted_policy(naive, tok, False)]
    env = make_env("agent", {**cfg.episodes.model_dump(mode="json"), "max_turns": 3})
    eps = play(tasks, [env] * len(tasks), 2, cfg.policy.max_len, tok, 40,
               lambda turn, ctx, es, n, k: ([policies[e.index](turn, [c], [e], n, k)[0][0]
                                             for c, e in zip(ctx, es)], 0.0),
               lambda turn, items: step_local(items, cfg.sandbox, cfg.rewards))
    rows = episode_rows(cfg, 0, 0, eps, 2, cfg.hash())
    assert [r.advantage > 0 for r in rows] == [True, False]
    out = update_policy.fn(cfg, 0, 0, rows)
    assert out["train/sequences"] == 2
    assert checkpoints.exists(cfg.run_dir, 1)
