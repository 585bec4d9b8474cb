"""The Prefect flow, the one loop for every kind of environment and turn count: SFT warm start,
then N iterations of generate_tasks -> episodes [sample_completions -> run_rollouts (Dask
shards), once per turn] -> score ->
[refill rounds: the same again for the groups dynamic sampling dropped] ->
write_trajectories -> update_policy -> checkpoint.

The stages are Prefect tasks with explicit cache keys and persisted results (flows/pipeline.py),
so a run killed mid-iteration resumes, in a new process, at the first stage that did not
finish; iterations already marked done are skipped outright.
"""
from __future__ import annotations

import dataclasses
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import numpy as np

from prefect import flow, get_run_logger
from prefect.futures import wait as wait_futures
from pydantic import Field

from flows import stages
from flows.artifacts import publish_evaluation, publish_iteration
from flows.config import RunConfig, load_config, parse_override, validate_config
from flows.episode_exec import Stepped, step_deadline_s
from flows.episodes import BusyClock, Episode, episode_metrics, heldout_metrics, play
from flows.parameters import config_dict, whole_config
# the stages, also reached as flows.iteration.<stage> (benches, tests)
from flows.pipeline import (eval_due, phase_label, checkpoint, generate_tasks,  # noqa: F401
                            run_rollouts, sample_completions, score_rollouts, sft_stage,
                            update_policy, write_trajectories)
from flows.resume import begin_run
from flows.sampler import (close_engines, engine_metrics, play_options, policy_tokenizer,
                           preflight)
from flows.rollouts import (close_clients, cluster_description, dask_client, queue_snapshot,
                            total_threads)
from flows.staging import CODE_VERSION, bulky, call_stage, submit_stage
from flows.stop import second_signal_ends_it
from gateway.train import loop_rows
from storage import registry
from storage.schema import TrajectoryRow
from tasks.record import Task
from training import checkpoints
from training import group as trainer_group
from training.progress import Progress

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


class Play:
    """The stages one round of episodes runs through: the policy's turns in the sample stage,
    the environment's in rollout shards (one Prefect task each, run in threads) while the
    scheduler's queue lengths are sampled every quarter second."""

    def __init__(self, cfg: RunConfig, it: int, v: int, rnd: int | str, greedy: bool,
                 opts: dict, client) -> None:
        self.cfg, self.it, self.v, self.rnd, self.greedy = cfg, it, v, rnd, greedy
        self.opts, self.client = opts, client
        self.queue: list[dict] = []
        self.stepped: list[Stepped] = []  # steps executed in this stage (not cache hits)
        # busy seconds of each stage: per-episode turns overlap their calls
        self.clocks = {"sample": BusyClock(), "run_rollouts": BusyClock()}

    @property
    def times(self) -> dict[str, float]:
        return {name: clock.seconds for name, clock in self.clocks.items()}

    def sample_stage(self):
        """The sample stage with the run's task options. Called from play's threads, where
        Prefect cannot stop a blocked call (it only warned, once a call), it has no Prefect
        deadline: an engine request has its own timeout (engine/vllm_sampler.py)."""
        stage = sample_completions.with_options(**self.opts)
        if threading.current_thread() is not threading.main_thread():
            stage.timeout_seconds = None  # with_options reads None as "keep the stage's own"
        return stage

    def sample_inputs(self, turn: int, k: int, contexts: list[list[int]],
                      max_new_tokens: int) -> dict:
        """The sample stage's inputs, by name (its cache key reads them by name), quoted."""
        return bulky(dict(cfg=self.cfg, iteration=self.it, version=self.v, round_=self.rnd,
                          turn=turn, k=k, contexts=contexts, max_new_tokens=max_new_tokens,
                          greedy=self.greedy))

    def sample(self, turn, contexts, _episodes, max_new_tokens, k):
        with self.clocks["sample"]:
            return self.sample_stage()(**self.sample_inputs(turn, k, contexts, max_new_tokens))

    def step(self, turn, items):
        with self.clocks["run_rollouts"]:
            return self._step(turn, items)

    def _step(self, turn, items):
        cfg, size = self.cfg, self.cfg.cluster.shard_size
        runner = run_rollouts.with_options(**self.opts)
        threads = total_threads(self.client)
        futures = [runner.submit(**bulky(dict(
            cfg=cfg, iteration=self.it, version=self.v, round_=self.rnd, shard=k, turn=turn,
            items=items[i:i + size],
            deadline_s=step_deadline_s(items[i:i + size], cfg.sandbox, threads))))
                   for k, i in enumerate(range(0, len(items), size))]
        sizes = {f: len(items[i:i + size]) for f, i in zip(futures, range(0, len(items), size))}
        with Progress(f"{phase_label(self.it, self.v, self.rnd, turn)}: rollouts", len(items),
                      "steps") as shown:
            while (state := wait_futures(futures, timeout=0.25)).not_done:
                shown.update(sum(sizes[f] for f in state.done),
                             shards=f"{len(state.done)}/{len(futures)}")
                try:
                    self.queue.append(queue_snapshot(self.client))
                except Exception:  # a scheduler hiccup must not fail the stage; the sample is lost
                    pass
            shown.update(len(items), shards=f"{len(futures)}/{len(futures)}")
        out = []
        for f in futures:
            out += f.result()
            if f.state.name != "Cached":  # a shard from the cache took no sandbox time now
                self.stepped += f.result()
        return out

    def play(self, tasks: list[Task], group: int) -> list[Episode]:
        cfg = self.cfg
        tok = policy_tokenizer(cfg.run_dir, self.v)
        env = stages.env_of(cfg)
        return play(tasks, [env(t) for t in tasks], group, cfg.policy.max_len, tok,
                    cfg.sampling.max_new_tokens, self.sample, self.step, **play_options(cfg))


def evaluate_policy(cfg: RunConfig, version: int, opts: dict, client,
                    tasks: list[Task] | None = None, prefix: str = "heldout") -> dict:
    """Pass rates of one policy version on `tasks` (default: the held-out ones), greedy (1
    episode per task) and sampled (`tasks.heldout_samples` per task), overall, per family and
    per source, as `<prefix>/...` metrics."""
    tasks = stages.heldout_tasks(cfg) if tasks is None else tasks
    greedy = Play(cfg, version, version, "eval-greedy", True, opts, client).play(tasks, 1)
    sampled = Play(cfg, version, version, "eval-sampled", False, opts, client).play(
        tasks, cfg.tasks.heldout_samples)
    return heldout_metrics(tasks, greedy, sampled, prefix)


def pass_rates_on(cfg: RunConfig, version: int, tasks: list[Task], prefix: str) -> dict:
    """`evaluate_policy` from outside a run's flow (benchmarks), on the run's cluster and
    result store. It runs as a flow of its own: the evaluation submits Prefect tasks, which
    need a flow's task runner. Call it under `if __name__ == "__main__":` (the Dask
    LocalCluster's workers import the caller's main module)."""
    @flow(name="rollforge-pass-rates", log_prints=True)
    def pass_rates() -> dict:
        c = cfg.cluster
        opts = dict(result_storage=Path(cfg.run_dir).resolve() / ".prefect-results")
        try:
            return evaluate_policy(cfg, version, opts, dask_client(
                c.address, c.n_workers, c.threads_per_worker), tasks, prefix)
        finally:
            close_engines()
    return pass_rates()


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
    _log_iteration(cfg, it, col, metrics, log)
    publish_iteration(cfg, it, metrics, log, baseline)
    return ended


def _log_iteration(cfg: RunConfig, it: int, col: Collected, metrics: dict, log) -> None:
    """Iteration `it`'s log lines: rewards, groups, the update, off-policy and engine figures."""
    timings, kept_groups = col.timings, col.kept_groups
    groups = len(col.rows) // cfg.sampling.group_size
    msg = (f"iteration {it}: reward {metrics['rollout/mean_reward']:.3f}, "
           f"train pass {metrics['rollout/pass_rate']:.3f}")
    if "episode/turns_mean" in metrics:
        msg += (f", episode turns {metrics['episode/turns_mean']:.2f}, submitted "
                f"{metrics['episode/end_submit']:.2f}")
    if "heldout/pass_sampled" in metrics:
        msg += (f", held-out pass greedy {metrics['heldout/pass_greedy']:.3f} "
                f"sampled {metrics['heldout/pass_sampled']:.3f}")
    log.info(msg + f" ({metrics['time/iteration_s']:.1f}s, {metrics['rollout/per_s']:.0f} rollouts/s)")
    log.info(f"iteration {it} groups: {kept_groups}/{groups} informative in {col.rounds} "
             f"round(s), {metrics['curriculum/groups_trained']} trained on; sandbox utilisation "
             f"{metrics['sandbox/utilisation']:.2f}, scheduler queue max "
             f"{metrics.get('cluster/queued_max', '-')} queued / "
             f"{metrics.get('cluster/processing_max', '-')} processing")
    if "train/peak_mem_mb" in metrics:
        log.info(_update_line(it, metrics))
    if cfg.rl.overlap and "train/staleness" in metrics:
        log.info(f"iteration {it} off-policy: sampled by v{col.sampled_with}, trained from "
                 f"v{it}; importance weight mean {metrics['train/is_weight_mean']:.3f}, "
                 f"{metrics['train/is_weight_capped']:.3f} of tokens at the cap; the flow "
                 f"waited {timings.get('time/update_wait_s', 0.0):.2f}s for the update")
    _log_gap(cfg, it, col, metrics, log)
    log.info("iteration %d stage seconds: %s", it, ", ".join(
        f"{k[5:-2]} {v_:.2f}" for k, v_ in timings.items()))


def _log_gap(cfg: RunConfig, it: int, col: Collected, metrics: dict, log) -> None:
    """The sampler/trainer log-prob gap, a warning over `rl.logprob_gap_warn`."""
    gap = metrics.get("train/logprob_gap_mean")
    if gap is not None:
        line = (f"iteration {it} sampler/trainer log-prob gap: mean {gap:.2e}, max "
                f"{metrics['train/logprob_gap_max']:.2e}, {metrics['train/logprob_gap_over']:.3f} "
                f"of tokens over 0.1")
        if "engine/sync_s" in metrics:
            how = (" in place" if metrics.get("engine/sync_in_place") else "") + (
                f" ({metrics['engine/sync_fallbacks']} fallback(s) to a restart)"
                if metrics.get("engine/sync_fallbacks") else "")
            line += (f"; engine synced to v{col.sampled_with}{how} in "
                     f"{metrics['engine/sync_s']:.1f}s, {metrics['engine/restarts']} restart(s)")
        (log.warning if gap > cfg.rl.logprob_gap_warn else log.info)(
            line + (f" (over rl.logprob_gap_warn={cfg.rl.logprob_gap_warn}: the sampler and the "
                    "trainer disagree about the policy)" if gap > cfg.rl.logprob_gap_warn else ""))


def _update_line(it: int, m: dict) -> str:
    """The update's speed and memory, per rank when it ran on several."""
    n = int(m.get("train/processes", 1))
    per = (lambda k: "/".join(f"{m.get(f'train/rank{r}/{k}', math.nan):.1f}" for r in range(n))
           ) if n > 1 else (lambda k: f"{m[f'train/{k}']:.1f}")
    where = (f" on {int(m['train/group_workers'])} Dask worker(s), "
             f"{int(m['train/group_hosts'])} host(s)") if m.get("train/group_workers") else ""
    return (f"iteration {it} update: {n} rank(s){where}, {m['train/tokens_per_s']:.0f} "
            f"tokens/s; per "
            f"rank MB: peak {per('peak_mem_mb')}, optimizer state {per('optimizer_mb')}, "
            f"weights {per('params_mb')}")


@flow(name="rollforge-evaluate", log_prints=True)
def evaluate_flow(run_dir: str = "runs/default",
                  version: Annotated[int | None, Field(ge=0)] = None) -> dict:
    """Held-out pass rates of one checkpoint of a run (default: its newest), with the run's
    own resolved config; publishes them as an artifact.

    Args:
        run_dir: The run's folder, `out_dir/run_id` of its config (it holds `config.yaml`,
            whose tasks, sandbox and sampling the evaluation uses, and `checkpoints/`).
        version: The checkpoint to evaluate (0: the SFT start, i: after iteration i - 1);
            empty: the newest.
    """
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
        out = evaluate_policy(cfg, version, opts, client)
    finally:
        close_engines()
        close_clients()
    publish_evaluation(cfg, version, out, get_run_logger())
    return {"run_dir": cfg.run_dir, "version": version, **out}
