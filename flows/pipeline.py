"""The loop's stages, each a Prefect task (flows/staging.py `pipeline_stage`) whose cache key is
explicit — (stage, run id, iteration, round, shard, policy version, config hash, code version,
digest of the stage's other inputs) — with its result persisted under the run folder
(`.prefect-results/`), so re-running a finished iteration recomputes nothing and a run killed
mid-iteration resumes, in a new process, at the first stage that did not finish. Every stage
retries with exponential backoff and has a deadline; `<run>/stages.jsonl` records each stage a
process actually ran (cache hits are not in it). The flow that chains them is
flows/iteration.py."""
from __future__ import annotations

import math
import time
from contextlib import nullcontext

from engine.boundary import SampleRequest, as_samples
from flows import sampler, stages
from flows.config import RunConfig
from flows.episode_exec import Stepped, step_many
from flows.rollouts import dask_client, launcher_vars
from flows.scoring import episode_rows
from flows.staging import has_checkpoint, pipeline_stage
from flows.warm_start import (agent_demos, dataset_pairs, probe_fn, replayed_tool_demos,
                               tool_demos)
from storage import registry, trajectories
from storage.schema import TrajectoryRow
from tasks.record import Task
from training import checkpoints
from training import group as trainer_group
from training import threads as torch_threads
from training.episodes import token_values
from training.generate import Sample
from training.progress import Progress
from training.trainer import RLSample, sft_warm_start


@pipeline_stage("sft_warm_start", retries=1, timeout_s=4 * 3600,
        product=has_checkpoint(lambda p: 0))
def sft_stage(cfg: RunConfig, version: int = 0) -> dict:
    """The warm start on every source's training tasks with references: (prompt, reference)
    pairs of the single-turn kinds, action-format demonstrations through the real environment
    (steps on Dask) of the multi-turn ones (`episodes.sft_demos`)."""
    if checkpoints.exists(cfg.run_dir, 0):  # what made it, as it was recorded then
        return {**registry.read_warm_start(cfg.run_dir), "sft/reused": True}
    pairs, demos, encoded = [], [], []
    # demonstrations are played in the sandbox: none for a warm start of 0 steps (or one on
    # an exported dataset, which replaces them)
    demonstrate = cfg.sft.steps > 0 and cfg.sft.dataset is None
    for src, tasks in stages.sft_data(cfg):
        env = src.environment()
        if env is not None and getattr(env, "tool_kind", None):  # tool calls in a template
            if demonstrate and getattr(env.config, "sft_demos", False):
                encoded += tool_demos(cfg, src, env, tasks)  # the agent's: read what it sees
            elif demonstrate:
                encoded += replayed_tool_demos(cfg, env, tasks)
            continue
        if env is not None and env.max_turns > 1:
            if demonstrate and getattr(env.config, "sft_demos", False):
                demos += agent_demos(cfg, src, env, tasks)
            continue
        pairs += tasks
    probe = None
    if cfg.sft.until_pass is not None:
        held, pairs = stages.probe_split(pairs, cfg.sft.probe_tasks,
                                           cfg.sft.probe_generic_names)
        if not held:
            raise ValueError("sft.until_pass needs a single-turn source whose training tasks "
                             "have references (the probe is drawn from them)")
        probe = probe_fn(cfg, held)
    prompts, refs, extra = [t.prompt for t in pairs], [t.reference for t in pairs], {}
    if cfg.sft.dataset is not None:  # verified successes replace the sources' references
        prompts, refs, extra = dataset_pairs(cfg, held if probe is not None else [])
        demos, encoded = [], []
    with torch_threads.budget(cfg.threads.torch) as chosen:
        out = sft_warm_start(cfg.run_dir, prompts, refs, cfg.policy, cfg.sft, cfg.rl, cfg.seed,
                             demos=demos or None, probe=probe, encoded=encoded or None)
    out.update(extra)
    out["sft/threads_at_start"] = chosen["threads/torch"]
    if probe is not None:
        out["sft/probe_tasks"] = len(held)
    if demos:
        out["sft/demos_multi_turn"] = sum(len(d[1]) > 1 for d in demos)
    if encoded:
        out["sft/tool_demos"] = len(encoded)
    out["sft/examples"] = len(prompts) + len(demos) + len(encoded)
    registry.record_warm_start(cfg.run_dir, out)
    return out


@pipeline_stage("generate_tasks", timeout_s=600)
def generate_tasks(cfg: RunConfig, iteration: int, round_: int, n: int, ledger,
                   exclude: list[str]) -> list[Task]:
    """The round's tasks, drawn by the curriculum sampler from the ledger of earlier iterations."""
    return stages.pick_tasks(cfg, iteration, round_, n, ledger, exclude)


def _salt(round_: int | str, turn: int, k: int) -> str:
    """The sampling seed's salt: the first call of a round's first turn keeps the salt the
    single-turn loop always had (rollout, rollout:<r>, eval), so its samples stay the same."""
    base = {"eval-sampled": "eval"}.get(str(round_), "rollout" if round_ == 0 else f"rollout:{round_}")
    return base if turn == 1 and k == 0 else f"{base}:turn{turn}:{k}"


@pipeline_stage("sample_completions", timeout_s=3600)
def sample_completions(cfg: RunConfig, iteration: int, version: int, round_: int | str,
                       turn: int, k: int, contexts: list[list[int]], max_new_tokens: int,
                       greedy: bool) -> tuple[list[Sample], float]:
    """The next action of every live episode of a round's turn, sampled by the run's engine
    (`sampling.engine`, flows/sampler.py): the policy in this process, seeded by (run seed,
    iteration, round, turn), or a vLLM server synced to `version`, which has no per-request
    seed (its samples are not reproducible by a rerun)."""
    s = cfg.sampling
    request = SampleRequest(contexts, 1, s.temperature, s.top_p, max_new_tokens, tuple(s.stop),
                            greedy, None if greedy else stages.sampling_seed(
                                cfg.seed, iteration, _salt(round_, turn, k)))
    t0 = time.perf_counter()
    local = s.engine == "local"
    with torch_threads.budget(cfg.threads.torch) if local else nullcontext(), \
            Progress(f"{phase_label(iteration, version, round_, turn)}: sampling", len(contexts),
                     "sequences") as shown:
        out = as_samples(request, sampler.sample(cfg, version, request, shown))
    return out, time.perf_counter() - t0


def phase_label(iteration: int, version: int, round_: int | str, turn: int) -> str:
    """What a round's turn is for, as its progress lines name it."""
    what = (f"held-out evaluation of v{version} ({str(round_)[5:]})"
            if str(round_).startswith("eval-") else
            f"iteration {iteration}" + (f", refill round {round_}" if round_ else ""))
    return what + (f", turn {turn}" if turn > 1 else "")


@pipeline_stage("run_rollouts", retries=3, timeout_s=None)
def run_rollouts(cfg: RunConfig, iteration: int, version: int, round_: int | str, shard: int,
                 turn: int, items: list, deadline_s: float) -> list[Stepped]:
    """One shard of environment steps (a single-turn kind's step grades the answer): they fan
    out on the Dask cluster (a plain `Client.map`); a shard not done by `deadline_s` is
    cancelled and retried."""
    c = cfg.cluster
    client = dask_client(c.address, c.n_workers, c.threads_per_worker)
    return step_many(client, items, cfg.sandbox, cfg.rewards, timeout_s=deadline_s)


@pipeline_stage("score", timeout_s=1800)
def score_rollouts(cfg: RunConfig, iteration: int, version: int, round_: int, episodes: list,
                   group_offset: int) -> list[TrajectoryRow]:
    return episode_rows(cfg, iteration, version, episodes, cfg.sampling.group_size, cfg.hash(),
                        group_offset)


@pipeline_stage("write_trajectories", timeout_s=1800)
def write_trajectories(cfg: RunConfig, iteration: int, version: int,
                       rows: list[TrajectoryRow]) -> list[str]:
    # One switch from any earlier attempt of this iteration (another config or code) to this
    # one: readers never see rows of both, and a crash at any step leaves one whole attempt.
    size = cfg.cluster.shard_size
    return trajectories.write_iteration(cfg.run_dir, iteration,
                                        [rows[i:i + size] for i in range(0, len(rows), size)])


def rl_samples(cfg: RunConfig, rows: list[TrajectoryRow]) -> list[RLSample]:
    """The update's samples of scored rows: a row's turn advantages (rl.turn_credit) go on its
    policy tokens, run by run; without them every token takes the row's advantage."""
    return [RLSample(r.prompt_token_ids, r.completion_token_ids, r.sampling_logprobs,
                     0.0 if math.isnan(r.advantage) else r.advantage,
                     reward=r.reward, group_id=r.group_id,
                     token_advantages=token_values(r.completion_mask, r.turn_advantages)
                     if r.turn_advantages is not None else None,
                     completion_mask=r.completion_mask, version=r.policy_version,
                     engine_sampled=cfg.sampling.engine != "local") for r in rows]


@pipeline_stage("update_policy", retries=1, timeout_s=4 * 3600,
        product=has_checkpoint(lambda p: p["version"] + 1))
def update_policy(cfg: RunConfig, iteration: int, version: int,
                  rows: list[TrajectoryRow]) -> dict:
    t0 = time.perf_counter()
    samples = rl_samples(cfg, rows)
    replay = stages.replay_pairs(cfg) if cfg.rl.replay_coef > 0 else ()
    # On rl.processes ranks: this process for one, the resident trainer group for more (or
    # with rl.overlap, beside the sampler), its ranks placed on this machine or (rl.placement
    # dask) on the rollouts' Dask workers. Only an update in this process takes this process's
    # thread budget: an overlapped one must not change the sampler's thread count.
    c = cfg.cluster
    client = dask_client(c.address, c.n_workers, c.threads_per_worker) \
        if cfg.rl.placement == "dask" else None
    here = trainer_group.runs_here(cfg.rl, client)
    with (torch_threads.budget(cfg.threads.torch) if here else nullcontext({})) as chosen:
        out = trainer_group.update(cfg.run_dir, version, samples, cfg.policy, cfg.rl,
                                   cfg.sampling.temperature, cfg.seed, replay, client=client,
                                   launcher_vars=launcher_vars() if client else ())
    return {**out, **chosen, "train/stage_seconds": time.perf_counter() - t0}


@pipeline_stage("checkpoint", retries=2, timeout_s=600,
        product=lambda p: p["iteration"] in registry.finished_iterations(p["cfg"].run_dir))
def checkpoint(cfg: RunConfig, iteration: int, version: int, metrics: dict) -> str:
    path = checkpoints.checkpoint_dir(cfg.run_dir, version + 1)
    registry.record_metrics(cfg.run_dir, iteration, metrics)
    registry.record_checkpoint(cfg.run_dir, iteration, str(path), {
        k: v for k, v in metrics.items() if k.startswith(("heldout/pass", "rollout/mean"))})
    registry.mark_iteration_done(cfg.run_dir, iteration)
    # With rl.overlap the next update may be writing its version's staging folder right now.
    checkpoints.prune(cfg.run_dir, cfg.keep_checkpoints, keep={0},
                      staging=not cfg.rl.overlap)
    return str(path)


def eval_due(cfg: RunConfig, iteration: int) -> bool:
    return (iteration + 1) % cfg.eval_every == 0 or iteration + 1 == cfg.iterations
