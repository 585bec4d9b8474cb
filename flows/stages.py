"""Plain stage logic the flow's Prefect tasks call: no Prefect here, so tests can call it directly."""
from __future__ import annotations

import hashlib
import math
import random
from pathlib import Path

import numpy as np
import torch

from flows.config import RunConfig, TaskConfig
from flows.rollouts import Executed
from rewards.aggregate import group_advantages
from storage.schema import SCHEMA_VERSION  # noqa: F401  (rows are stamped by the store)
from tasks.procedural import generate_suite
from tasks.record import Task
from training.generate import Sample

_CODE_FILES = ("flows", "tasks", "sandbox", "rewards", "storage", "training")


def code_version() -> str:
    """Hash of the package's source: a stage's cached result is reused only by the same code."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for d in _CODE_FILES:
        for p in sorted((root / d).rglob("*.py")):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:12]


def task_pool(cfg: TaskConfig) -> list[Task]:
    return generate_suite(cfg.families, cfg.difficulties, cfg.tasks_per_family, cfg.n_tests,
                          cfg.seed, cfg.heldout_fraction)


def pick_training_tasks(cfg: TaskConfig, iteration: int, seed: int) -> list[Task]:
    """A seeded sample of the training split for one iteration, stratified by family."""
    train = [t for t in task_pool(cfg) if t.split == "train"]
    if not train:
        raise ValueError("the task pool has no training tasks; raise tasks.tasks_per_family")
    rng = random.Random(f"{seed}:{iteration}")
    by_family: dict[str, list[Task]] = {}
    for t in train:
        by_family.setdefault(t.family, []).append(t)
    fams = sorted(by_family)
    picked = []
    for i in range(cfg.tasks_per_iteration):
        picked.append(rng.choice(by_family[fams[i % len(fams)]]))
    return picked


def heldout_tasks(cfg: TaskConfig) -> list[Task]:
    return [t for t in task_pool(cfg) if t.split == "heldout"]


def sampling_generator(seed: int, iteration: int, salt: str) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(int(hashlib.sha256(f"{seed}:{iteration}:{salt}".encode()).hexdigest()[:12], 16))
    return g


def build_rows(cfg: RunConfig, iteration: int, version: int, tasks: list[Task],
               samples: list[Sample], executed: list[Executed], gen_time_s: float,
               config_hash: str) -> list[dict]:
    """One trajectory row per rollout, with GRPO advantages computed over each task's group."""
    G = cfg.sampling.group_size
    rewards = np.array([e.breakdown.reward for e in executed], dtype=np.float64)
    groups = np.array([i // G for i in range(len(executed))])
    adv = group_advantages(rewards, groups, scale=cfg.rl.scale_advantages)
    rows = []
    per_sample_gen = gen_time_s / max(1, len(samples))
    for i, (s, e) in enumerate(zip(samples, executed)):
        t = tasks[i // G]
        b = e.breakdown
        rows.append({
            "run_id": cfg.run_id, "iteration": iteration, "policy_version": version,
            "task_id": t.task_id, "suite": t.suite, "family": t.family, "difficulty": t.difficulty,
            "split": t.split, "sample_index": i % G, "group_id": f"{iteration}:{i // G}",
            "prompt": t.prompt, "completion": s.text, "prompt_token_ids": s.prompt_ids,
            "completion_token_ids": s.completion_ids, "sampling_logprobs": s.logprobs,
            "reward": b.reward, "reward_components": b.components(), "advantage": float(adv[i]),
            "pass_fraction": b.pass_fraction, "tests_passed": b.tests_passed,
            "tests_total": b.tests_total, "test_outcomes": list(b.test_outcomes),
            "status": b.status, "error_type": b.error_type, "hack_flags": list(b.hack_flags),
            "infra_error": b.infra_error, "sandbox_backend": e.backend,
            "image_digest": e.image_digest, "gen_time_s": per_sample_gen,
            "exec_time_s": b.exec_time_s, "score_time_s": e.score_time_s,
            "config_hash": config_hash,
        })
    return rows


def rollout_metrics(rows: list[dict]) -> dict:
    rewards = np.array([r["reward"] for r in rows], dtype=np.float64)
    solved = [r["tests_total"] > 0 and r["tests_passed"] == r["tests_total"] and not r["hack_flags"]
              for r in rows if not r["infra_error"]]
    by_group: dict[str, list[float]] = {}
    for r in rows:
        if not math.isnan(r["reward"]):
            by_group.setdefault(r["group_id"], []).append(r["reward"])
    informative = [np.std(v) > 0 for v in by_group.values()]
    return {
        "rollout/count": len(rows),
        "rollout/mean_reward": float(np.nanmean(rewards)) if len(rows) and not np.isnan(rewards).all() else math.nan,
        "rollout/pass_rate": float(np.mean(solved)) if solved else math.nan,
        "rollout/infra_errors": int(sum(r["infra_error"] for r in rows)),
        "rollout/hack_flags": int(sum(bool(r["hack_flags"]) for r in rows)),
        "rollout/informative_groups": float(np.mean(informative)) if informative else math.nan,
    }


def pass_rates(tasks: list[Task], executed: list[Executed], k: int) -> dict:
    """Fraction of (task, sample) pairs solved, overall and per family; `k` samples per task."""
    out: dict[str, list[bool]] = {}
    for i, e in enumerate(executed):
        t = tasks[i // k]
        out.setdefault("all", []).append(e.breakdown.solved)
        out.setdefault(t.family, []).append(e.breakdown.solved)
    return {name: float(np.mean(v)) for name, v in out.items()}
