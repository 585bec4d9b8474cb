"""The Prefect flow: SFT warm start, then N iterations of
generate_tasks -> sample_completions -> run_rollouts (Dask shards) -> score ->
write_trajectories -> update_policy -> checkpoint.

Every stage is a Prefect task whose cache key is explicit — (stage, run, iteration, policy
version, config hash, code version) — with its result persisted under the run folder, so
re-running a finished iteration recomputes nothing and a crashed run resumes at the first stage
that did not finish. Iterations already marked done are skipped outright.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.context import TaskRunContext

from flows import stages
from flows.config import RunConfig, validate_config
from flows.rollouts import Executed, close_clients, dask_client, execute_many
from storage import registry, trajectories
from tasks.record import Task
from training import checkpoints
from training.generate import Sample, sample
from training.trainer import RLSample, grpo_update, policy_for_sampling, sft_warm_start

CODE_VERSION = stages.code_version()


def _stage_key(stage: str):
    def key(ctx: TaskRunContext, p: dict[str, Any]) -> str:
        cfg: RunConfig = p["cfg"]
        parts = [stage, cfg.run_id, f"it{p.get('iteration', 'na')}", f"v{p.get('version', 'na')}",
                 f"s{p.get('shard', 'na')}", cfg.hash(), CODE_VERSION]
        return "-".join(str(x) for x in parts)
    return key


def _stage(stage: str, retries: int = 2, timeout_s: float | None = None):
    return task(name=stage, cache_key_fn=_stage_key(stage), persist_result=True, retries=retries,
                retry_delay_seconds=[2, 10], timeout_seconds=timeout_s)


@_stage("sft_warm_start", retries=1)
def sft_stage(cfg: RunConfig, version: int = 0) -> dict:
    if checkpoints.exists(cfg.run_dir, 0):
        return {"sft/reused": True}
    train = [t for t in stages.task_pool(cfg.tasks) if t.split == "train" and t.reference]
    return sft_warm_start(cfg.run_dir, [t.prompt for t in train], [t.reference for t in train],
                          cfg.policy, cfg.sft, cfg.rl, cfg.seed)


@_stage("generate_tasks")
def generate_tasks(cfg: RunConfig, iteration: int) -> list[Task]:
    return stages.pick_training_tasks(cfg.tasks, iteration, cfg.seed)


@_stage("sample_completions")
def sample_completions(cfg: RunConfig, iteration: int, version: int,
                       batch: list[Task]) -> tuple[list[Sample], float]:
    model = policy_for_sampling(cfg.run_dir, version)
    s = cfg.sampling
    prompts = [t.prompt for t in batch for _ in range(s.group_size)]
    t0 = time.perf_counter()
    out = sample(model, prompts, s.max_new_tokens, s.temperature, s.top_p, batch_size=s.batch_size,
                 generator=stages.sampling_generator(cfg.seed, iteration, "rollout"))
    return out, time.perf_counter() - t0


@_stage("run_rollouts", retries=3, timeout_s=1800)
def run_rollouts(cfg: RunConfig, iteration: int, version: int, shard: int,
                 items: list[tuple[Task, str]]) -> list[Executed]:
    """One shard: its executions fan out on the Dask cluster (a plain `Client.map`)."""
    c = cfg.cluster
    client = dask_client(c.address, c.n_workers, c.threads_per_worker)
    return execute_many(client, items, cfg.sandbox, cfg.rewards)


@_stage("score")
def score_rollouts(cfg: RunConfig, iteration: int, version: int, batch: list[Task],
                   samples: list[Sample], executed: list[Executed], gen_time_s: float) -> list[dict]:
    return stages.build_rows(cfg, iteration, version, batch, samples, executed, gen_time_s,
                             cfg.hash())


@_stage("write_trajectories")
def write_trajectories(cfg: RunConfig, iteration: int, version: int, rows: list[dict]) -> list[str]:
    size = cfg.cluster.shard_size
    return [trajectories.write_shard(cfg.run_dir, iteration, k, rows[i:i + size])
            for k, i in enumerate(range(0, len(rows), size))]


@_stage("update_policy", retries=1)
def update_policy(cfg: RunConfig, iteration: int, version: int, rows: list[dict]) -> dict:
    samples = [RLSample(r["prompt_token_ids"], r["completion_token_ids"], r["sampling_logprobs"],
                        0.0 if math.isnan(r["advantage"]) else r["advantage"]) for r in rows]
    return grpo_update(cfg.run_dir, version, samples, cfg.policy, cfg.rl,
                       cfg.sampling.temperature, cfg.seed)


@_stage("evaluate")
def evaluate(cfg: RunConfig, version: int) -> dict:
    """Held-out pass rate of one policy version: greedy (1 per task) and sampled (k per task)."""
    tasks = stages.heldout_tasks(cfg.tasks)
    model = policy_for_sampling(cfg.run_dir, version)
    k, s = cfg.tasks.heldout_samples, cfg.sampling
    c = cfg.cluster
    client = dask_client(c.address, c.n_workers, c.threads_per_worker)
    greedy = sample(model, [t.prompt for t in tasks], s.max_new_tokens, greedy=True,
                    batch_size=s.batch_size)
    sampled = sample(model, [t.prompt for t in tasks for _ in range(k)], s.max_new_tokens,
                     s.temperature, s.top_p, batch_size=s.batch_size,
                     generator=stages.sampling_generator(cfg.seed, version, "eval"))
    ex = execute_many(client, [(t, g.text) for t, g in zip(tasks, greedy)]
                      + [(tasks[i // k], x.text) for i, x in enumerate(sampled)],
                      cfg.sandbox, cfg.rewards)
    g_rates = stages.pass_rates(tasks, ex[:len(tasks)], 1)
    s_rates = stages.pass_rates(tasks, ex[len(tasks):], k)
    out = {"heldout/tasks": len(tasks), "heldout/pass_greedy": g_rates.get("all", math.nan),
           "heldout/pass_sampled": s_rates.get("all", math.nan)}
    for fam in sorted(set(t.family for t in tasks)):
        out[f"heldout/{fam}/pass_greedy"] = g_rates.get(fam, math.nan)
        out[f"heldout/{fam}/pass_sampled"] = s_rates.get(fam, math.nan)
    return out


@_stage("checkpoint", retries=2)
def checkpoint(cfg: RunConfig, iteration: int, version: int, metrics: dict) -> str:
    path = checkpoints.checkpoint_dir(cfg.run_dir, version + 1)
    registry.record_metrics(cfg.run_dir, iteration, metrics)
    registry.record_checkpoint(cfg.run_dir, iteration, str(path), {
        k: v for k, v in metrics.items() if k.startswith(("heldout/pass", "rollout/mean"))})
    registry.mark_iteration_done(cfg.run_dir, iteration)
    checkpoints.prune(cfg.run_dir, cfg.keep_checkpoints, keep={0})
    return str(path)


def _eval_due(cfg: RunConfig, iteration: int) -> bool:
    return (iteration + 1) % cfg.eval_every == 0 or iteration + 1 == cfg.iterations


@flow(name="rollforge-train", log_prints=True)
def train_flow(config: dict) -> dict:
    """Run (or resume) an RL run described by `config` (a RunConfig as a dict)."""
    cfg = validate_config(config)
    log = get_run_logger()
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
    resolved = cfg.model_dump(mode="json")
    registry.write_run_config(cfg.run_dir, resolved)
    storage = Path(cfg.run_dir) / ".prefect-results"
    opts = dict(result_storage=storage)
    done = set(registry.finished_iterations(cfg.run_dir))
    start = max(done) + 1 if done else 0
    log.info(f"run {cfg.run_id}: {cfg.run_dir} (config {cfg.hash()}, code {CODE_VERSION}); "
             f"iterations {start}..{cfg.iterations - 1}" + (" (resumed)" if start else ""))
    try:
        t0 = time.perf_counter()
        sft = sft_stage.with_options(**opts)(cfg, 0)
        baseline = evaluate.with_options(**opts)(cfg, 0)
        log.info(f"SFT start (v0): held-out pass greedy {baseline['heldout/pass_greedy']:.3f}, "
                 f"sampled {baseline['heldout/pass_sampled']:.3f} ({time.perf_counter() - t0:.1f}s)")
        for it in range(start, cfg.iterations):
            run_iteration(cfg, it, opts, log)
        final = evaluate.with_options(**opts)(cfg, cfg.iterations)
    finally:
        close_clients()
    return {"run_dir": cfg.run_dir, "sft": sft, "baseline": baseline, "final": final,
            "iterations": cfg.iterations}


def run_iteration(cfg: RunConfig, it: int, opts: dict, log) -> dict:
    v = it  # iteration i samples with policy version i and publishes version i + 1
    timings: dict[str, float] = {}

    def timed(name, fn, *args):
        t = time.perf_counter()
        out = fn.with_options(**opts)(*args)
        timings[f"time/{name}_s"] = time.perf_counter() - t
        return out

    t_iter = time.perf_counter()
    batch = timed("generate_tasks", generate_tasks, cfg, it)
    samples, gen_s = timed("sample", sample_completions, cfg, it, v, batch)
    G = cfg.sampling.group_size
    items = [(batch[i // G], s.text) for i, s in enumerate(samples)]
    size = cfg.cluster.shard_size
    t = time.perf_counter()
    shard_runner = run_rollouts.with_options(**opts)
    futures = [shard_runner.submit(cfg, it, v, k, items[i:i + size])
               for k, i in enumerate(range(0, len(items), size))]
    executed = [e for f in futures for e in f.result()]
    timings["time/run_rollouts_s"] = time.perf_counter() - t
    rows = timed("score", score_rollouts, cfg, it, v, batch, samples, executed, gen_s)
    timed("write_trajectories", write_trajectories, cfg, it, v, rows)
    train = timed("update_policy", update_policy, cfg, it, v, rows)
    metrics = {**stages.rollout_metrics(rows), **train, **timings}
    metrics["rollout/per_s"] = len(rows) / max(1e-9, timings["time/run_rollouts_s"])
    if _eval_due(cfg, it):
        metrics.update(timed("evaluate", evaluate, cfg, v + 1))
    metrics["policy_version"] = v + 1
    metrics["time/iteration_s"] = time.perf_counter() - t_iter
    checkpoint.with_options(**opts)(cfg, it, v, metrics)
    msg = (f"iteration {it}: reward {metrics['rollout/mean_reward']:.3f}, "
           f"train pass {metrics['rollout/pass_rate']:.3f}")
    if "heldout/pass_sampled" in metrics:
        msg += (f", held-out pass greedy {metrics['heldout/pass_greedy']:.3f} "
                f"sampled {metrics['heldout/pass_sampled']:.3f}")
    log.info(msg + f" ({metrics['time/iteration_s']:.1f}s, {metrics['rollout/per_s']:.0f} rollouts/s)")
    return metrics
