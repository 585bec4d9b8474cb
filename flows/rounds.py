"""A round of episodes through the loop's stages (`Play`: the policy's turns in the sample
stage, the environment's in rollout shards on Dask) and what is built of such rounds outside
an iteration's training: the held-out evaluation of a policy version (`evaluate_policy`, two
rounds, greedy and sampled), from a benchmark (`pass_rates_on`) or as a flow of its own
(`evaluate_flow`, a deployment). The iteration (flows/iteration.py) plays its rounds here."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated

from prefect import flow, get_run_logger
from prefect.futures import wait as wait_futures
from pydantic import Field

from flows import stages
from flows.artifacts import publish_evaluation
from flows.config import RunConfig, validate_config
from flows.episode_exec import Stepped, step_deadline_s
from flows.episodes import BusyClock, Episode, play
from flows.pipeline import phase_label, run_rollouts, sample_completions
from flows.scoring import heldout_metrics
from flows.rollouts import (close_clients, cluster_description, dask_client, queue_snapshot,
                            total_threads)
from flows.sampler import close_engines, play_options, policy_tokenizer
from flows.staging import bulky
from storage import registry
from tasks.record import Task
from training import checkpoints
from training.progress import Progress


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
        """The sample stage with the run's task options. Called from play's pool threads (an
        engine's calls; the local sampler's run on play's own), where Prefect cannot stop a
        blocked call (it only warned, once a call), it has no Prefect deadline: an engine
        request has its own timeout (engine/vllm_sampler.py)."""
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
