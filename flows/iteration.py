"""The Prefect flow: SFT warm start, then N iterations of
generate_tasks -> sample_completions -> run_rollouts (Dask shards) -> score ->
[refill rounds: the same again for the groups dynamic sampling dropped] ->
write_trajectories -> update_policy -> checkpoint.

Every stage is a Prefect task whose cache key is explicit — (stage, run id, iteration, round,
shard, policy version, config hash, code version, digest of the stage's other inputs) — with
its result persisted under the run folder (`.prefect-results/`), so re-running a finished
iteration recomputes nothing and a run killed mid-iteration resumes, in a new process, at the
first stage that did not finish. Iterations already marked done are skipped outright. Every
stage retries with exponential backoff and has a deadline; `<run>/stages.jsonl` records each
stage a process actually ran (cache hits are not in it).
"""
from __future__ import annotations

import functools
import inspect
import math
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.context import TaskRunContext
from prefect.futures import wait as wait_futures
from prefect.tasks import exponential_backoff

from flows import stages
from flows.artifacts import publish_evaluation, publish_iteration
from flows.config import RunConfig, load_config, parse_override, validate_config
from flows.rollouts import (Executed, close_clients, cluster_description, dask_client,
                            execute_many, queue_snapshot, shard_deadline_s, total_threads)
from storage import registry, trajectories
from tasks.record import Task
from training import checkpoints
from training.generate import Sample, sample
from training.trainer import RLSample, grpo_update, policy_for_sampling, sft_warm_start

CODE_VERSION = stages.code_version()
RETRY_DELAYS = exponential_backoff(backoff_factor=2)  # 2 s, 4 s, 8 s, ... (plus 20% jitter)
_WHERE = ("iteration", "version", "round_", "shard")  # key parts that get their own field
_NOT_INPUTS = ("cfg", "deadline_s", *_WHERE)


def _stage_key(stage: str):
    def key(ctx: TaskRunContext, p: dict[str, Any]) -> str:
        cfg: RunConfig = p["cfg"]
        inputs = stages.inputs_digest({k: v for k, v in p.items() if k not in _NOT_INPUTS})
        parts = [stage, cfg.run_id, f"it{p.get('iteration', 'na')}", f"v{p.get('version', 'na')}",
                 f"r{p.get('round_', 'na')}", f"s{p.get('shard', 'na')}", cfg.hash(),
                 CODE_VERSION, inputs]
        return "-".join(str(x) for x in parts)
    return key


def _stage(stage: str, retries: int = 2, timeout_s: float | None = 3600):
    """A pipeline stage: explicit cache key, persisted result, retries with backoff, a
    deadline (enforced by Prefect for stages the flow calls directly; rollout shards, which
    run in threads, enforce their own inside `execute_many`), and a journal line per run."""
    def deco(fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def journaled(*args, **kwargs):
            a = sig.bind(*args, **kwargs).arguments
            where = {k.rstrip("_"): a[k] for k in _WHERE if k in a}
            run_dir = a["cfg"].run_dir
            stages.journal(run_dir, stage, "start", **where)
            t0 = time.perf_counter()
            try:
                out = fn(*args, **kwargs)
            except BaseException as exc:
                error = f"{type(exc).__name__}: {exc}"[:300]
                if type(exc).__name__ == "CancelledError" and timeout_s:
                    error = f"deadline of {timeout_s:g} s passed ({error})"  # Prefect's timeout
                stages.journal(run_dir, stage, "failed", error=error, **where)
                raise
            stages.journal(run_dir, stage, "end", seconds=round(time.perf_counter() - t0, 3),
                           **where)
            return out

        return task(name=stage, cache_key_fn=_stage_key(stage), persist_result=True,
                    retries=retries, retry_delay_seconds=RETRY_DELAYS, retry_jitter_factor=0.2,
                    timeout_seconds=timeout_s)(journaled)
    return deco


@_stage("sft_warm_start", retries=1, timeout_s=4 * 3600)
def sft_stage(cfg: RunConfig, version: int = 0) -> dict:
    if checkpoints.exists(cfg.run_dir, 0):
        return {"sft/reused": True}
    if cfg.episodes.enabled and cfg.episodes.sft_demos:  # action-format demonstrations
        from flows.episodes import sft_stage_episodes  # noqa: PLC0415 (it imports this module)

        c = cfg.cluster
        return sft_stage_episodes(cfg, dask_client(c.address, c.n_workers, c.threads_per_worker))
    train = [t for t in stages.sft_tasks(cfg.tasks) if t.reference]
    return sft_warm_start(cfg.run_dir, [t.prompt for t in train], [t.reference for t in train],
                          cfg.policy, cfg.sft, cfg.rl, cfg.seed)


@_stage("generate_tasks", timeout_s=600)
def generate_tasks(cfg: RunConfig, iteration: int, round_: int, n: int, ledger,
                   exclude: list[str]) -> list[Task]:
    """The round's tasks, drawn by the curriculum sampler from the ledger of earlier iterations."""
    return stages.pick_tasks(cfg, iteration, round_, n, ledger, exclude)


@_stage("sample_completions", timeout_s=3600)
def sample_completions(cfg: RunConfig, iteration: int, version: int, round_: int,
                       batch: list[Task]) -> tuple[list[Sample], float]:
    model = policy_for_sampling(cfg.run_dir, version)
    s = cfg.sampling
    prompts = [t.prompt for t in batch for _ in range(s.group_size)]
    salt = "rollout" if round_ == 0 else f"rollout:{round_}"
    t0 = time.perf_counter()
    out = sample(model, prompts, s.max_new_tokens, s.temperature, s.top_p, batch_size=s.batch_size,
                 generator=stages.sampling_generator(cfg.seed, iteration, salt))
    return out, time.perf_counter() - t0


@_stage("run_rollouts", retries=3, timeout_s=None)
def run_rollouts(cfg: RunConfig, iteration: int, version: int, round_: int, shard: int,
                 items: list[tuple[Task, str]], deadline_s: float) -> list[Executed]:
    """One shard: its executions fan out on the Dask cluster (a plain `Client.map`); a shard
    not done by `deadline_s` is cancelled and retried."""
    c = cfg.cluster
    client = dask_client(c.address, c.n_workers, c.threads_per_worker)
    return execute_many(client, items, cfg.sandbox, cfg.rewards, timeout_s=deadline_s)


@_stage("score", timeout_s=1800)
def score_rollouts(cfg: RunConfig, iteration: int, version: int, round_: int, batch: list[Task],
                   samples: list[Sample], executed: list[Executed], gen_time_s: float,
                   group_offset: int) -> list[dict]:
    return stages.build_rows(cfg, iteration, version, batch, samples, executed, gen_time_s,
                             cfg.hash(), group_offset)


@_stage("write_trajectories", timeout_s=1800)
def write_trajectories(cfg: RunConfig, iteration: int, version: int, rows: list[dict]) -> list[str]:
    size = cfg.cluster.shard_size
    paths = [trajectories.write_shard(cfg.run_dir, iteration, k, rows[i:i + size])
             for k, i in enumerate(range(0, len(rows), size))]
    # An earlier attempt of this iteration (other config or code) may have written more shards:
    # they must not outlive it, or the iteration would hold rows of two attempts.
    trajectories.drop_shards_from(cfg.run_dir, iteration, len(paths))
    return paths


@_stage("update_policy", retries=1, timeout_s=4 * 3600)
def update_policy(cfg: RunConfig, iteration: int, version: int, rows: list[dict]) -> dict:
    samples = [RLSample(r["prompt_token_ids"], r["completion_token_ids"], r["sampling_logprobs"],
                        0.0 if math.isnan(r["advantage"]) else r["advantage"],
                        reward=r["reward"], group_id=r["group_id"],
                        completion_mask=r.get("completion_mask")) for r in rows]
    replay = stages.replay_pairs(cfg.tasks) if cfg.rl.replay_coef > 0 else ()
    return grpo_update(cfg.run_dir, version, samples, cfg.policy, cfg.rl,
                       cfg.sampling.temperature, cfg.seed, replay)


@_stage("evaluate", timeout_s=3600)
def evaluate(cfg: RunConfig, version: int) -> dict:
    """Held-out pass rate of one policy version: greedy (1 per task) and sampled (k per task)."""
    return pass_rates_on(cfg, version, stages.heldout_tasks(cfg.tasks), "heldout")


def pass_rates_on(cfg: RunConfig, version: int, tasks: list[Task], prefix: str) -> dict:
    """Pass rates of one policy version on `tasks`, greedy (1 per task) and sampled
    (`tasks.heldout_samples` per task), overall and per family, as `<prefix>/...` metrics."""
    model = policy_for_sampling(cfg.run_dir, version)
    k, s = cfg.tasks.heldout_samples, cfg.sampling
    c = cfg.cluster
    client = dask_client(c.address, c.n_workers, c.threads_per_worker)
    greedy = sample(model, [t.prompt for t in tasks], s.max_new_tokens, greedy=True,
                    batch_size=s.batch_size)
    sampled = sample(model, [t.prompt for t in tasks for _ in range(k)], s.max_new_tokens,
                     s.temperature, s.top_p, batch_size=s.batch_size,
                     generator=stages.sampling_generator(cfg.seed, version, "eval"))
    items = ([(t, g.text) for t, g in zip(tasks, greedy)]
             + [(tasks[i // k], x.text) for i, x in enumerate(sampled)])
    ex = execute_many(client, items, cfg.sandbox, cfg.rewards,
                      timeout_s=shard_deadline_s(len(items), cfg.sandbox, total_threads(client)))
    g_rates = stages.pass_rates(tasks, ex[:len(tasks)], 1)
    s_rates = stages.pass_rates(tasks, ex[len(tasks):], k)
    out = {f"{prefix}/tasks": len(tasks), f"{prefix}/pass_greedy": g_rates.get("all", math.nan),
           f"{prefix}/pass_sampled": s_rates.get("all", math.nan)}
    for fam in sorted(set(t.family for t in tasks)):
        out[f"{prefix}/{fam}/pass_greedy"] = g_rates.get(fam, math.nan)
        out[f"{prefix}/{fam}/pass_sampled"] = s_rates.get(fam, math.nan)
        out[f"{prefix}/{fam}/tasks"] = sum(t.family == fam for t in tasks)
    return out


@_stage("checkpoint", retries=2, timeout_s=600)
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


def resolve_config(config: dict | None = None, config_file: str | None = None,
                   run_id: str | None = None, iterations: int | None = None,
                   overrides: list[str] | None = None) -> RunConfig:
    """The run config from a dict (`rollforge run`) or a YAML file (deployments), plus
    `key=value` overrides; a relative `config_file` is looked up from the cwd, then the repo."""
    from flows.config import _set_dotted  # noqa: PLC0415

    sets = list(overrides or [])
    if run_id is not None:
        sets.append(f"run_id={run_id}")
    if iterations is not None:
        sets.append(f"iterations={iterations}")
    if config is not None:
        if config_file:
            raise ValueError("give the config either as `config` or as `config_file`, not both")
        raw = dict(config)
        for item in sets:
            _set_dotted(raw, *parse_override(item))
        return validate_config(raw)
    path = Path(config_file) if config_file else None
    if path is not None and not path.is_absolute() and not path.exists():
        path = Path(__file__).resolve().parent.parent / path
    return load_config(path, sets)


@flow(name="rollforge-train", log_prints=True)
def train_flow(config: dict | None = None, config_file: str | None = None,
               run_id: str | None = None, iterations: int | None = None,
               overrides: list[str] | None = None) -> dict:
    """Run (or resume) an RL run. `config`: a RunConfig as a dict (what `rollforge run`
    passes); or `config_file`: a YAML config (default configs/default.yaml). `run_id`,
    `iterations` and `overrides` (`key=value`, e.g. `rl.lr=1e-4`) change it."""
    cfg = resolve_config(config, config_file, run_id, iterations, overrides)
    log = get_run_logger()
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
    registry.write_run_config(cfg.run_dir, cfg.model_dump(mode="json"))
    opts = dict(result_storage=Path(cfg.run_dir).resolve() / ".prefect-results")
    done = set(registry.finished_iterations(cfg.run_dir))
    start = max(done) + 1 if done else 0
    log.info(f"run {cfg.run_id}: {cfg.run_dir} (config {cfg.hash()}, code {CODE_VERSION}); "
             f"iterations {start}..{cfg.iterations - 1}" + (" (resumed)" if start else ""))
    try:
        c = cfg.cluster
        client = dask_client(c.address, c.n_workers, c.threads_per_worker)
        print(cluster_description(client))
        t0 = time.perf_counter()
        sft = sft_stage.with_options(**opts)(cfg, 0)
        baseline = _evaluate(cfg, 0, opts, client)
        log.info(f"SFT start (v0): held-out pass greedy {baseline['heldout/pass_greedy']:.3f}, "
                 f"sampled {baseline['heldout/pass_sampled']:.3f} ({time.perf_counter() - t0:.1f}s)")
        for it in range(start, cfg.iterations):
            metrics = run_iteration(cfg, it, opts, log, client)
            publish_iteration(cfg, it, metrics, log, baseline)
        final = _evaluate(cfg, cfg.iterations, opts, client)
    finally:
        close_clients()
    return {"run_dir": cfg.run_dir, "sft": sft, "baseline": baseline, "final": final,
            "iterations": cfg.iterations}


def _rollouts(cfg: RunConfig, it: int, v: int, rnd: int, items: list, opts: dict, client,
              queue: list[dict]) -> list[Executed]:
    """Submit the round's shards (one Prefect task each, run in threads) and, while they run,
    sample the scheduler's queue lengths every quarter second (a stage shorter than that
    records none)."""
    size = cfg.cluster.shard_size
    deadline = shard_deadline_s(len(items), cfg.sandbox, total_threads(client))
    runner = run_rollouts.with_options(**opts)
    futures = [runner.submit(cfg, it, v, rnd, k, items[i:i + size], deadline)
               for k, i in enumerate(range(0, len(items), size))]
    while wait_futures(futures, timeout=0.25).not_done:
        try:
            queue.append(queue_snapshot(client))
        except Exception:  # a scheduler hiccup must not fail the stage; the sample is lost
            pass
    return [e for f in futures for e in f.result()]


def _evaluate(cfg: RunConfig, version: int, opts: dict, client) -> dict:
    """Held-out pass rates: of one-shot completions, or of episodes in episode mode."""
    if cfg.episodes.enabled:
        from flows.episodes import evaluate_episodes  # noqa: PLC0415

        return evaluate_episodes(cfg, version, opts, client)
    return evaluate.with_options(**opts)(cfg, version)


def run_iteration(cfg: RunConfig, it: int, opts: dict, log, client) -> dict:
    if cfg.episodes.enabled:  # multi-turn agent episodes (flows/episodes.py)
        from flows.episodes import run_episode_iteration  # noqa: PLC0415

        return run_episode_iteration(cfg, it, opts, log, client)
    v = it  # iteration i samples with policy version i and publishes version i + 1
    timings: dict[str, float] = {}

    def timed(name, fn, *args):
        t = time.perf_counter()
        out = fn.with_options(**opts)(*args)
        timings[f"time/{name}_s"] = timings.get(f"time/{name}_s", 0.0) + time.perf_counter() - t
        return out

    t_iter = time.perf_counter()
    t = time.perf_counter()
    ledger = stages.ledger_frame(cfg.run_dir, it)
    timings["time/ledger_s"] = time.perf_counter() - t
    G, want = cfg.sampling.group_size, cfg.tasks.tasks_per_iteration
    rows: list[dict] = []
    executed: list[Executed] = []
    used: list[str] = []
    queue: list[dict] = []
    rounds, kept_groups, first_share = 0, 0, math.nan
    max_rounds = 1 + (cfg.tasks.refill_rounds if cfg.tasks.dynamic_sampling else 0)
    for rnd in range(max_rounds):
        need = want if rnd == 0 else want - kept_groups
        if need <= 0:
            break
        batch = timed("generate_tasks", generate_tasks, cfg, it, rnd, need, ledger, used)
        if not batch:
            break
        used += [t.task_id for t in batch]
        samples, gen_s = timed("sample", sample_completions, cfg, it, v, rnd, batch)
        items = [(batch[i // G], s.text) for i, s in enumerate(samples)]
        t = time.perf_counter()
        round_exec = _rollouts(cfg, it, v, rnd, items, opts, client, queue)
        timings["time/run_rollouts_s"] = timings.get("time/run_rollouts_s", 0.0) + time.perf_counter() - t
        executed += round_exec
        rows += timed("score", score_rollouts, cfg, it, v, rnd, batch, samples, round_exec, gen_s,
                      len(rows) // G)
        rounds += 1
        keep = stages.informative_row_mask(rows)
        kept_groups = len({r["group_id"] for r, k in zip(rows, keep) if k})
        if rnd == 0:  # what the sampler alone achieved, before any refill
            first_share = kept_groups / max(1, len(rows) // G)
    timed("write_trajectories", write_trajectories, cfg, it, v, rows)
    train_rows = ([r for r, k in zip(rows, stages.informative_row_mask(rows)) if k]
                  if cfg.tasks.dynamic_sampling else rows)
    train = timed("update_policy", update_policy, cfg, it, v, train_rows)
    groups = len(rows) // G
    metrics = {**stages.rollout_metrics(rows), **train, **timings,
               **stages.execution_metrics(executed, timings["time/run_rollouts_s"],
                                          total_threads(client), queue),
               "curriculum/rounds": rounds, "curriculum/groups_generated": groups,
               "curriculum/groups_informative": kept_groups,
               "curriculum/informative_share": kept_groups / groups if groups else math.nan,
               "curriculum/informative_share_first_round": first_share,
               "curriculum/groups_trained": len({r["group_id"] for r in train_rows}),
               "curriculum/mean_difficulty": (sum(r["difficulty"] for r in rows) / len(rows)
                                              if rows else math.nan)}
    if _eval_due(cfg, it):
        metrics.update(timed("evaluate", evaluate, cfg, v + 1))
        metrics["time/evaluate_s"] = timings["time/evaluate_s"]  # taken after the copy above
    metrics["policy_version"] = v + 1
    metrics["time/iteration_s"] = time.perf_counter() - t_iter
    checkpoint.with_options(**opts)(cfg, it, v, metrics)
    msg = (f"iteration {it}: reward {metrics['rollout/mean_reward']:.3f}, "
           f"train pass {metrics['rollout/pass_rate']:.3f}")
    if "heldout/pass_sampled" in metrics:
        msg += (f", held-out pass greedy {metrics['heldout/pass_greedy']:.3f} "
                f"sampled {metrics['heldout/pass_sampled']:.3f}")
    log.info(msg + f" ({metrics['time/iteration_s']:.1f}s, {metrics['rollout/per_s']:.0f} rollouts/s)")
    log.info(f"iteration {it} groups: {kept_groups}/{groups} informative in {rounds} round(s), "
             f"{metrics['curriculum/groups_trained']} trained on; sandbox utilisation "
             f"{metrics['sandbox/utilisation']:.2f}, scheduler queue max "
             f"{metrics.get('cluster/queued_max', '-')} queued / "
             f"{metrics.get('cluster/processing_max', '-')} processing")
    log.info("iteration %d stage seconds: %s", it, ", ".join(
        f"{k[5:-2]} {v_:.2f}" for k, v_ in timings.items()))
    return metrics


@flow(name="rollforge-evaluate", log_prints=True)
def evaluate_flow(run_dir: str = "runs/default", version: int | None = None) -> dict:
    """Held-out pass rates of one checkpoint of a run (default: its newest), with the run's
    own resolved config; publishes them as an artifact."""
    raw = registry.read_run_config(run_dir)
    p = Path(run_dir)
    cfg = validate_config({**raw, "out_dir": str(p.parent), "run_id": p.name})
    if version is None:
        versions = sorted(int(d.name[1:]) for d in Path(cfg.run_dir, "checkpoints").glob("v[0-9]*")
                          if checkpoints.exists(cfg.run_dir, int(d.name[1:])))
        if not versions:
            raise ValueError(f"run_dir={run_dir!r}: no checkpoint to evaluate")
        version = versions[-1]
    elif not checkpoints.exists(cfg.run_dir, version):
        raise ValueError(f"version={version}: {run_dir} has no checkpoint v{version}")
    opts = dict(result_storage=Path(cfg.run_dir).resolve() / ".prefect-results")
    try:
        c = cfg.cluster
        client = dask_client(c.address, c.n_workers, c.threads_per_worker)
        print(cluster_description(client))
        out = _evaluate(cfg, version, opts, client)
    finally:
        close_clients()
    publish_evaluation(cfg, version, out, get_run_logger())
    return {"run_dir": cfg.run_dir, "version": version, **out}
