"""Synthetic rollout rows for tests, examples and the store benchmark (not for training)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FAMILIES = ("arith", "strings", "lists", "dicts", "recursion", "sorting")
STATUSES = ("ok", "ok", "ok", "ok", "fail", "error", "timeout")
OUTCOMES = ("pass", "fail", "error", "timeout")


def example_row(run_id: str = "run-a", iteration: int = 0, i: int = 0, **overrides: Any) -> dict:
    """One well-formed row in the shape the flow passes to write_shard. Deterministic in i:
    family = FAMILIES[i % 6], reward = (i % 5) / 4 except NaN (not scorable) when i % 7 == 6,
    hack flag 'exit_override' when i % 11 == 10."""
    unscored = i % 7 == 6
    hacked = i % 11 == 10
    row = {
        "run_id": run_id, "iteration": iteration, "policy_version": iteration,
        "task_id": f"task-{i % 13}", "suite": "procedural", "family": FAMILIES[i % len(FAMILIES)],
        "difficulty": i % 4, "split": "heldout" if i % 10 == 0 else "train",
        "sample_index": i % 4, "group_id": f"g-{iteration}-{i // 4}",
        "prompt": f"def f{i % 13}(x):\n    \"\"\"Return something.\"\"\"\n",
        "completion": f"    return x + {i}\n", "prompt_token_ids": [1, 2, 3, i % 50],
        "completion_token_ids": [7, i % 50], "sampling_logprobs": [-0.5, -0.25],
        "reward": math.nan if unscored else (i % 5) / 4, "advantage": 0.0,
        "pass_fraction": math.nan if unscored else (i % 5) / 4,
        "tests_passed": i % 5, "tests_total": 4,
        "test_outcomes": ["pass"] * (i % 5) + ["fail"] * (4 - i % 5),
        "status": "infra_error" if unscored else "ok", "error_type": "InfraError" if unscored else None,
        "hack_flags": ["exit_override"] if hacked else [], "infra_error": unscored,
        "sandbox_backend": "process", "image_digest": None,
        "gen_time_s": 0.5, "exec_time_s": 0.1, "score_time_s": 0.01, "config_hash": "cafe0123",
    }
    row.update(overrides)
    return row


def example_rows(n: int, run_id: str = "run-a", iteration: int = 0, start: int = 0) -> list[dict]:
    return [example_row(run_id, iteration, i) for i in range(start, start + n)]


def _token_lists(rng: np.random.Generator, n: int, mean: int, vocab: int) -> tuple[pa.Array, np.ndarray]:
    lengths = rng.integers(max(1, mean // 2), mean * 3 // 2 + 1, size=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    # Log-uniform ids: like real token streams, dominated by few frequent ids (what compresses).
    values = (np.power(float(vocab), rng.random(int(offsets[-1]))) - 1).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)), offsets


def synthetic_table(n: int, run_id: str = "bench", iteration: int = 0, seed: int = 0,
                    prompt_tokens: int = 120, completion_tokens: int = 160) -> pa.Table:
    """n rollout rows as an Arrow table (vectorised, ~1 s per 100k rows): prompts drawn from
    500 tasks, completions from combinations of code lines, token ids and float32 log-probs
    per token. Column names and types match the trajectory schema (iteration is a column)."""
    rng = np.random.default_rng(seed)
    task = pa.array(rng.integers(0, 500, size=n))
    lines = pa.array([f"    x = x {op} {k}\n" for op in "+-*" for k in range(40)] +
                     ["    return x\n", "    if x < 0:\n        x = -x\n", "    for i in range(x):\n"])
    picks = [pa.array(rng.integers(0, len(lines), size=n)) for _ in range(4)]
    completion = pc.binary_join_element_wise(*[lines.take(p) for p in picks], "")
    prompts = pa.array([f"def task_{t}(x: int) -> int:\n    \"\"\"Family {FAMILIES[t % 6]}, level {t % 4}: "
                        f"transform x as described in the task statement number {t}.\"\"\"\n"
                        for t in range(500)])
    task_np = task.to_numpy()
    p_ids, _ = _token_lists(rng, n, prompt_tokens, 50_000)
    c_ids, c_off = _token_lists(rng, n, completion_tokens, 50_000)
    logp = -rng.exponential(0.7, size=int(c_off[-1])).astype(np.float32)
    passed = rng.integers(0, 5, size=n)
    reward = passed / 4.0
    reward[rng.random(n) < 0.02] = np.nan
    outcome_values = pa.array(OUTCOMES).take(
        pa.array(np.where(rng.random(n * 4) < 0.6, 0, rng.integers(1, 4, n * 4))))
    hack = rng.random(n) < 0.01
    hack_off = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(hack, out=hack_off[1:])
    status_idx = rng.integers(0, len(STATUSES), size=n)
    status = pa.array(STATUSES).take(pa.array(status_idx))
    cols = {
        "run_id": pa.repeat(pa.scalar(run_id), n), "iteration": pa.array(np.full(n, iteration, np.int64)),
        "policy_version": pa.array(np.full(n, iteration, np.int64)),
        "task_id": pa.array([f"task-{t}" for t in range(500)]).take(task), "suite": pa.repeat(pa.scalar("procedural"), n),
        "family": pa.array(FAMILIES).take(pa.array(task_np % 6)),
        "difficulty": pa.array((task_np % 4).astype(np.int32)),
        "split": pa.array(["train", "heldout"]).take(pa.array((task_np % 10 == 0).astype(np.int8))),
        "sample_index": pa.array((np.arange(n) % 8).astype(np.int32)),
        "group_id": pc.binary_join_element_wise(
            f"{iteration}-", pc.cast(pa.array(np.arange(n) // 8), pa.string()), ""),
        "prompt": prompts.take(task), "completion": completion,
        "prompt_token_ids": p_ids, "completion_token_ids": c_ids,
        "sampling_logprobs": pa.ListArray.from_arrays(pa.array(c_off), pa.array(logp)),
        "reward": pa.array(reward), "advantage": pa.array(rng.normal(size=n)),
        "pass_fraction": pa.array(reward), "tests_passed": pa.array(passed.astype(np.int32)),
        "tests_total": pa.array(np.full(n, 4, np.int32)),
        "test_outcomes": pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * 4),
                                                  pa.array(outcome_values)),
        "status": status,
        "error_type": pc.if_else(pc.equal(status, "error"), "NameError", pa.scalar(None, pa.string())),
        "hack_flags": pa.ListArray.from_arrays(pa.array(hack_off),
                                               pa.repeat(pa.scalar("exit_override"), int(hack.sum()))),
        "infra_error": pa.array(np.isnan(reward)), "sandbox_backend": pa.repeat(pa.scalar("process"), n),
        "image_digest": pa.nulls(n, pa.string()),
        "gen_time_s": pa.array(rng.exponential(0.5, n)), "exec_time_s": pa.array(rng.exponential(0.1, n)),
        "score_time_s": pa.array(rng.exponential(0.01, n)), "config_hash": pa.repeat(pa.scalar("cafe0123"), n),
    }
    return pa.table(cols)
