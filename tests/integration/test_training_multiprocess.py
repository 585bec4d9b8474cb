"""The same `grpo_update` under the `deepspeed` launcher with 2 CPU processes (gloo) gives the
parameters one process gets from the same global batch: ZeRO-0 with token-budget micro-batches,
and ZeRO-2 (optimizer state and gradients sharded over the two processes)."""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from training import checkpoints
from training.config import PolicyConfig, RLConfig, SFTConfig
from training.policy import load_policy
from training.trainer import RLSample, grpo_update, sft_warm_start
from training.update import write_samples

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
DEEPSPEED = Path(sys.executable).with_name("deepspeed")
POLICY = PolicyConfig(n_layer=1, n_embd=32, n_head=2, max_len=64)
JOBS = {"zero0_tokens": dict(micro_batch_tokens=60, lr_schedule="constant", lr=1e-3),
        "zero2": dict(zero_stage=2, micro_batch_size=4, lr_schedule="constant", lr=1e-3)}


def _samples():
    r = random.Random(1)
    out = []
    for _ in range(12):
        p = [257] + [r.randrange(256) for _ in range(r.randrange(3, 10))]
        c = [r.randrange(256) for _ in range(r.randrange(2, 15))]
        out.append(RLSample(p, c, [-r.uniform(1, 4) for _ in c], r.choice([-1, 1]) * r.random()))
    return out


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(spec: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    """`deepspeed --num_gpus 2` on CPU: two gloo ranks. Killed as a process group on timeout."""
    cmd = [str(DEEPSPEED), "--num_gpus", "2", "--master_port", str(_port()),
           "--module", "training.update", "--spec", str(spec)]
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"deepspeed launch did not finish in {timeout}s:\n{out[-2000:]}\n{err[-2000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def test_two_processes_match_one_process_on_the_same_global_batch(tmp_path):
    base = tmp_path / "base"
    sft_warm_start(str(base), ["def f(x):"] * 3, ["  return x"] * 3, POLICY,
                   SFTConfig(steps=3, batch_size=4), RLConfig(), 0)
    samples = _samples()
    write_samples(str(tmp_path / "samples.jsonl"), samples)
    jobs = []
    for name, rl in JOBS.items():
        one, two = tmp_path / f"{name}_1", tmp_path / f"{name}_2"
        shutil.copytree(base, one)
        shutil.copytree(base, two)
        grpo_update(str(one), 0, samples, POLICY, RLConfig(**rl), 1.0, 0)
        jobs.append({"run_dir": str(two), "version": 0, "samples": str(tmp_path / "samples.jsonl"),
                     "policy": POLICY.model_dump(), "rl": rl, "seed": 0})
    (tmp_path / "spec.json").write_text(json.dumps({"jobs": jobs}))
    proc = _launch(tmp_path / "spec.json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    reported = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["train/processes"] for r in reported] == [2, 2]
    w0 = load_policy(str(checkpoints.checkpoint_dir(str(base), 0) / "model")).state_dict()
    for name in JOBS:
        a = load_policy(str(checkpoints.checkpoint_dir(str(tmp_path / f"{name}_1"), 1) / "model")).state_dict()
        b = load_policy(str(checkpoints.checkpoint_dir(str(tmp_path / f"{name}_2"), 1) / "model")).state_dict()
        moved = max((a[k] - w0[k]).abs().max().item() for k in a)
        diff = max((a[k] - b[k]).abs().max().item() for k in a)
        assert moved > 1e-3, name
        assert diff < 1e-6, f"{name}: 1 vs 2 processes differ by {diff} (step size {moved})"
