"""The Prefect flow, the one loop for every kind of environment and turn count: SFT warm start,
then N iterations of generate_tasks -> episodes [sample_completions -> run_rollouts (Dask
shards), once per turn] -> score ->
[refill rounds: the same again for the groups dynamic sampling dropped] ->
write_trajectories -> update_policy -> checkpoint.

The stages are Prefect tasks with explicit cache keys and persisted results (flows/pipeline.py),
so a run killed mid-iteration resumes, in a new process, at the first stage that did not
finish; iterations already marked done are skipped outright. A round of episodes plays through
flows/rounds.py `Play` (which also holds the held-out evaluation); an iteration's log lines are
flows/iteration_log.py.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from prefect import flow, get_run_logger

from flows import stages
from flows.artifacts import publish_iteration
from flows.config import RunConfig, load_config, parse_override, validate_config
from flows.episode_exec import Stepped
from flows.episodes import Episode
from flows.iteration_log import log_iteration
from flows.parameters import config_dict, whole_config
# the stages, also reached as flows.iteration.<stage> (benches, tests)
from flows.pipeline import (eval_due, phase_label, checkpoint, generate_tasks,  # noqa: F401
                            run_rollouts, sample_completions, score_rollouts, sft_stage,
                            update_policy, write_trajectories)
from flows.resume import begin_run
from flows.rollouts import close_clients, cluster_description, dask_client, total_threads
from flows.rounds import Play, evaluate_policy
from flows.scoring import episode_metrics
from flows.sampler import close_engines, engine_metrics, preflight
from flows.staging import CODE_VERSION, call_stage, submit_stage
from flows.stop import second_signal_ends_it
from gateway.train import loop_rows
from storage import registry
from storage.schema import TrajectoryRow
from training import checkpoints
from training import group as trainer_group

FORM_DEFAULT = whole_config()  # train_flow's default config: configs/default.yaml, every field


def resolve_config(config: dict | None = None, config_file: str | None = None,
                   run_id: str | None = None, iterations: int | None = None,
                   overrides: list[str] | None = None) -> RunConfig:
    """The run config from a dict (`rollforge run`) or a YAML file (deployments), plus
    `key=value` overrides; a relative `config_file` is looked up from the cwd, then the repo."""
    from flows.config import set_dotted  # noqa: PLC0415

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
            set_dotted(raw, *parse_override(item))
        return validate_config(raw)
    path = Path(config_file) if config_file else None
    if path is not None and not path.is_absolute() and not path.exists():
        path = Path(__file__).resolve().parent.parent / path
    return load_config(path, sets)


@flow(name="rollforge-train", log_prints=True)
def train_flow(config: RunConfig = FORM_DEFAULT, config_file: str | None = None,
               overrides: list[str] | None = None) -> dict:
    """Run (or resume) an RL run: an SFT warm start, then GRPO iterations.

    Args:
        config: The run config, one section per stage (flows/config.py). A deployment's
            default is its config file (`rollforge serve --config`); this flow's default is
            `configs/default.yaml`. Give it whole (the form does); to change a few fields
            use `overrides`.
        config_file: A YAML run config to run instead of `config` (which is then not used).
            A relative path is looked up from the working directory, then the repository.
        overrides: Changes applied last, as `key=value` with a dotted key, the same as
            `rollforge run --set`, e.g. `rl.lr=1e-4` or `iterations=4`.
    """
    cfg = resolve_config(None if config_file else config_dict(config), config_file,
                         overrides=overrides)
    log = get_run_logger()
    if config_file:
        log.info(f"config from {config_file} (the config parameter is not used)")
    preflight(cfg)
    begin_run(cfg)
    if cfg.rl.overlap:  # no update is out yet: what a killed one left staging can go
        checkpoints.clear_staging(cfg.run_dir)
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
        sft = call_stage(sft_stage, opts, cfg=cfg, version=0)
        baseline = evaluate_policy(cfg, 0, opts, client)
        log.info(f"SFT start (v0): held-out pass greedy {baseline['heldout/pass_greedy']:.3f}, "
                 f"sampled {baseline['heldout/pass_sampled']:.3f} ({time.perf_counter() - t0:.1f}s)")
        run_iterations(cfg, start, opts, log, client, baseline)
        final = evaluate_policy(cfg, cfg.iterations, opts, client)
    finally:
        second_signal_ends_it()  # a stop's cleanup: a second signal cuts it short, no hang
        trainer_group.close_group()  # first: a group on Dask workers is stopped through them
        close_engines()
        close_clients()
    return {"run_dir": cfg.run_dir, "sft": sft, "baseline": baseline, "final": final,
            "iterations": cfg.iterations}


def sample_version(cfg: RunConfig, it: int) -> int:
    """The policy version iteration `it` samples with: its own (`it`), or with `rl.overlap`
    the one before (v0 for the first), since version `it` is still being trained meanwhile.
    A fixed rule, so a resumed run samples exactly as an uninterrupted one."""
    return it - 1 if cfg.rl.overlap and it > 0 else it


def run_iterations(cfg: RunConfig, start: int, opts: dict, log, client, baseline: dict) -> None:
    """Iterations `start`..N-1. Each is `collect` (tasks, episodes, scores, rows), its update
    (version i -> i + 1), then `finish` (held-out evaluation of i + 1 when due, the checkpoint
    record that marks it done, the artifacts). With `rl.overlap`, iteration i's collection
    (sampling with version i - 1) runs while update i - 1 trains in the trainer process; then
    update i starts and iteration i - 1 finishes while it trains. The flow waits for an update
    only when the next one needs its version."""
    pending = None  # (iteration, what it collected, its update's future) while it trains
    mark = time.perf_counter()  # the last iteration's end (rl.overlap's iteration time)
    after = dict(opts=opts, log=log, client=client, baseline=baseline)
    for it in range(start, cfg.iterations):
        if not cfg.rl.overlap:
            run_iteration(cfg, it, opts, log, client, baseline)
            continue
        col = collect(cfg, it, opts, client)
        previous = None
        if pending is not None:
            previous = _join(*pending)
        future = submit_stage(update_policy, opts, cfg=cfg, iteration=it, version=it,
                              rows=col.train_rows)
        if previous is not None:
            mark = finish(cfg, *previous, t_iter=mark, **after)
        pending = (it, col, future)
    if pending is not None:
        finish(cfg, *_join(*pending), t_iter=mark, **after)


def run_iteration(cfg: RunConfig, it: int, opts: dict, log, client, baseline: dict) -> float:
    """One iteration without overlap: collect, update, finish; returns when it ended."""
    t_iter = time.perf_counter()
    col = collect(cfg, it, opts, client)
    t = time.perf_counter()
    train = call_stage(update_policy, opts, cfg=cfg, iteration=it, version=it,
                       rows=col.train_rows)
    col = col.timed(update_policy=time.perf_counter() - t)
    return finish(cfg, it, col, train, opts=opts, log=log, client=client, baseline=baseline,
                  t_iter=t_iter)


def _join(it: int, col: Collected, future) -> tuple[int, Collected, dict]:
    """Wait for an overlapped update; how long the flow waited is `time/update_wait_s`."""
    t = time.perf_counter()
    train = future.result()
    col = col.timed(update_wait=time.perf_counter() - t,
                    update_policy=train.get("train/stage_seconds", math.nan))
    return it, col, train


@dataclass(frozen=True)
class Collected:
    """What `collect` gathered of one iteration: what its update trains on and what `finish`
    reports."""

    rows: list[TrajectoryRow]  # every scored row, as stored (refill rounds included)
    train_rows: list[TrajectoryRow]  # the rows the update trains on (the informative groups' only,
    # with dynamic sampling, and rows with a non-zero turn credit: stages.train_row_mask)
    episodes: list[Episode]
    stepped: list[Stepped]  # environment steps executed now (cache hits left out)
    queue: list[dict]  # the scheduler's queue lengths, sampled during the rollouts
    rounds: int  # sampling rounds run (1 + refill rounds)
    kept_groups: int  # informative groups over all rounds
    first_share: float  # informative share of the first round's groups (NaN: none drawn)
    timings: dict[str, float]  # `time/<stage>_s` -> seconds
    sampled_with: int  # the policy version that sampled the episodes
    gateway: dict = field(default_factory=dict)  # rl.gateway_rows: what was taken, as metrics

    def timed(self, **seconds: float) -> "Collected":
        """A copy with `time/<name>_s` set for each `name=seconds` (`update_policy=1.5`:
        `time/update_policy_s`)."""
        return dataclasses.replace(self, timings={
            **self.timings, **{f"time/{k}_s": v for k, v in seconds.items()}})


def collect(cfg: RunConfig, it: int, opts: dict, client) -> Collected:
    """Iteration `it`'s tasks, episodes (sampled with `sample_version`), scores and stored
    rows, with dynamic sampling's refill rounds; what the update and `finish` need."""
    v = sample_version(cfg, it)
    timings: dict[str, float] = {}

    def timed(name, fn, **inputs):
        t = time.perf_counter()
        out = call_stage(fn, opts, **inputs)
        timings[f"time/{name}_s"] = timings.get(f"time/{name}_s", 0.0) + time.perf_counter() - t
        return out

    t = time.perf_counter()
    ledger = stages.ledger_frame(cfg.run_dir, it)
    timings["time/ledger_s"] = time.perf_counter() - t
    G, want = cfg.sampling.group_size, cfg.tasks.tasks_per_iteration
    rows: list[TrajectoryRow] = []
    episodes: list[Episode] = []
    stepped: list[Stepped] = []
    used: list[str] = []
    queue: list[dict] = []
    rounds, kept_groups, first_share = 0, 0, math.nan
    max_rounds = 1 + (cfg.tasks.refill_rounds if cfg.tasks.dynamic_sampling else 0)
    for rnd in range(max_rounds):
        need = want if rnd == 0 else want - kept_groups
        if need <= 0:
            break
        batch = timed("generate_tasks", generate_tasks, cfg=cfg, iteration=it, round_=rnd,
                      n=need, ledger=ledger, exclude=used)
        if not batch:
            break
        used += [t.task_id for t in batch]
        round_play = Play(cfg, it, v, rnd, False, opts, client)
        eps = round_play.play(batch, G)
        for name, sec in round_play.times.items():
            timings[f"time/{name}_s"] = timings.get(f"time/{name}_s", 0.0) + sec
        queue += round_play.queue
        stepped += round_play.stepped
        episodes += eps
        rows += timed("score", score_rollouts, cfg=cfg, iteration=it, version=v, round_=rnd,
                      episodes=eps, group_offset=len(rows) // G)
        rounds += 1
        keep = stages.informative_row_mask(rows)
        kept_groups = len({r.group_id for r, k in zip(rows, keep) if k})
        if rnd == 0:  # what the sampler alone achieved, before any refill
            first_share = kept_groups / max(1, len(rows) // G)
    timed("write_trajectories", write_trajectories, cfg=cfg, iteration=it, version=v, rows=rows)
    # The gateway's rows (rl.gateway_rows) join the update as the iteration's own do: under
    # dynamic sampling, their informative groups only.
    gateway = loop_rows(cfg, it, v) if cfg.rl.gateway_rows else []
    both = rows + gateway
    keep = (stages.train_row_mask(both) if cfg.tasks.dynamic_sampling
            else np.ones(len(both), dtype=bool))
    taken = ({"gateway/episodes_taken": len({r.episode_id for r in gateway}),
              "gateway/rows_trained": int(keep[len(rows):].sum())}
             if cfg.rl.gateway_rows else {})
    return Collected(rows=rows, train_rows=[r for r, k in zip(both, keep) if k],
                     episodes=episodes, stepped=stepped, queue=queue, rounds=rounds,
                     kept_groups=kept_groups, first_share=first_share, timings=timings,
                     gateway=taken, sampled_with=v)


def finish(cfg: RunConfig, it: int, col: Collected, train: dict, *, opts: dict, log, client,
           baseline: dict, t_iter: float) -> float:
    """Iteration `it` after its update: its metrics, the held-out evaluation of version it + 1
    when due, the checkpoint record (the iteration is done), its log lines and artifacts.
    `time/iteration_s` is from `t_iter` on: the iteration's start, or with rl.overlap the last
    iteration's end (the loop's pace). Returns when it ended."""
    rows, episodes, timings = col.rows, col.episodes, col.timings
    G, kept_groups = cfg.sampling.group_size, col.kept_groups
    groups = len(rows) // G
    metrics = {**stages.rollout_metrics(rows), **episode_metrics(episodes), **train, **timings,
               **stages.execution_metrics(col.stepped, timings.get("time/run_rollouts_s", 0.0),
                                          total_threads(client), col.queue),
               "curriculum/rounds": col.rounds, "curriculum/groups_generated": groups,
               "curriculum/groups_informative": kept_groups,
               "curriculum/informative_share": kept_groups / groups if groups else math.nan,
               "curriculum/informative_share_first_round": col.first_share,
               "curriculum/groups_trained": len({r.group_id for r in col.train_rows}),
               "curriculum/mean_difficulty": (sum(r.difficulty for r in rows) / len(rows)
                                              if rows else math.nan),
               "policy_sampled": col.sampled_with, **col.gateway, **engine_metrics(cfg)}
    for src in sorted({r.source for r in rows if r.source}):
        mine = [r for r in rows if r.source == src]
        metrics[f"rollout/source/{src}/count"] = len(mine)
        metrics[f"rollout/source/{src}/mean_reward"] = stages.rollout_metrics(mine)["rollout/mean_reward"]
    if eval_due(cfg, it):
        t = time.perf_counter()
        metrics.update(evaluate_policy(cfg, it + 1, opts, client))
        metrics["time/evaluate_s"] = time.perf_counter() - t
    metrics["policy_version"] = it + 1
    ended = time.perf_counter()
    metrics["time/iteration_s"] = ended - t_iter
    call_stage(checkpoint, opts, cfg=cfg, iteration=it, version=it, metrics=metrics)
    log_iteration(cfg, it, col, metrics, log)
    publish_iteration(cfg, it, metrics, log, baseline)
    return ended


