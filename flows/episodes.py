"""Episode mode of the loop (`episodes.enabled`): G multi-turn agent episodes per task.

Each turn alternates the two places work happens (DESIGN.md): the policy samples the next
action of every live episode in one batch where it lives (this process, the `sample_actions`
stage), then the environment steps of all those episodes fan out on Dask in shards (the
`step_episodes` stages, one `Client.map` each, flows/episode_exec.py), and the observations come
back into each episode's token sequence (training/episodes.py). Repeat until every episode has
submitted, hit `max_turns` or its time budget; the last step grades the workspace's solution.py
with the hidden tests in a fresh sandbox. Then one row per episode goes to the store, GRPO
gets one advantage per episode (group = the task's G episodes) and trains on the policy's
tokens only.

Both stages have explicit cache keys over (iteration, version, turn, shard, inputs), so a
resumed run replays finished turns from the cache and continues at the first one that did not
finish.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from prefect.futures import wait as wait_futures

from flows import stages
from flows.config import RunConfig
from flows.episode_config import EpisodeConfig
from flows.episode_exec import Stepped, start_episode, step_deadline_s, step_many
from flows.iteration import (_eval_due, _stage, checkpoint, generate_tasks, update_policy,
                             write_trajectories)
from flows.rollouts import dask_client, total_threads
from rewards.aggregate import RewardBreakdown, group_advantages
from sandbox.episode import EpisodeState
from tasks.families.edges import first_attempts
from tasks.record import Task
from training.episodes import EpisodeTokens, fit_observation, observation_text, sample_actions
from training.generate import Sample
from training.policy import tokenizer_of
from training.trainer import policy_for_sampling, sft_warm_start

# (turn, contexts, episodes) -> one action per context; `episodes` are the live episodes the
# contexts belong to (a scripted policy reads their observations, a model needs only contexts)
SampleFn = Callable[[int, list[list[int]], list["Episode"]], list[Sample]]
StepFn = Callable[[int, list[tuple[EpisodeState, str | None]]], list[Stepped]]


@dataclass
class Episode:
    """One episode as the flow tracks it between turns."""

    task: Task
    index: int  # sample index within the task's group
    state: EpisodeState
    intro: str  # the first observation (the row's prompt)
    tokens: EpisodeTokens
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)  # as the policy saw them
    turn_seconds: list[float] = field(default_factory=list)
    gen_s: float = 0.0
    text: list[str] = field(default_factory=list)  # the completion's text, piece by piece
    final: dict | None = None  # the closing turn's info (grade, end_reason)

    @property
    def done(self) -> bool:
        return self.final is not None


def play(tasks: list[Task], group: int, ecfg: EpisodeConfig, max_turns: int, max_len: int, tok,
         sample_fn: SampleFn, step_fn: StepFn) -> list[Episode]:
    """Run `group` episodes per task to the end, all turns batched (see the module docstring).
    An episode whose context has no room left for another action is ended and graded as it
    stands (`end_reason` = context_full)."""
    eps = []
    for t in tasks:
        state, obs = start_episode(t, ecfg, max_turns)
        for g in range(group):
            eps.append(Episode(t, g, state, obs, EpisodeTokens(tok.encode_prompt(obs))))
    for turn in range(1, max_turns + 1):
        live = [e for e in eps if not e.done]
        if not live:
            break
        fits = [e for e in live if len(e.tokens.context()) + ecfg.action_tokens <= max_len]
        full = [e for e in live if len(e.tokens.context()) + ecfg.action_tokens > max_len]
        t0 = time.perf_counter()
        samples = sample_fn(turn, [e.tokens.context() for e in fits], fits) if fits else []
        gen = (time.perf_counter() - t0) / max(1, len(fits))
        for e, s in zip(fits, samples):
            e.tokens.add_policy(s.completion_ids, s.logprobs)
            e.actions.append(s.text)
            e.text.append(s.text)
            e.gen_s += gen
        items = [(e.state, s.text) for e, s in zip(fits, samples)] + [(e.state, None) for e in full]
        for e, r in zip(fits + full, step_fn(turn, items)):
            e.state = r.state
            seen = fit_observation(tok, r.observation, ecfg.obs_tokens) if r.observation else ""
            if r.info.get("action") != "none":  # a real turn (not an end for a full context)
                e.turn_seconds.append(float(r.info.get("seconds", r.seconds)))
                e.observations.append(seen)
            if r.done:
                e.final = r.info
            else:
                e.tokens.add_env(tok.encode(observation_text(seen), bos=False))
                e.text.append(observation_text(seen))
    return eps


def shaping_of(e: Episode, ecfg: EpisodeConfig) -> float:
    """visible_progress: coef x the best visible pass fraction any turn's <run_tests/> reached
    (the telescoped sum of per-turn potential gains); 0 when shaping is off."""
    if ecfg.shaping == "none":
        return 0.0
    fracs = [h["visible_passed"] / h["visible_total"] for h in e.state.history
             if h.get("visible_total")]
    return ecfg.shaping_coef * max(fracs, default=0.0)


def solved(e: Episode) -> bool | None:
    """Whether the final grade passed every hidden test; None when it could not be scored."""
    g = (e.final or {}).get("grade", {})
    if g.get("infra_error"):
        return None
    return bool(g.get("solved"))


_BREAKDOWN_FIELDS = {f.name for f in dataclasses.fields(RewardBreakdown)}
_REQUIRED = {f.name for f in dataclasses.fields(RewardBreakdown)
             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


def episode_rows(cfg: RunConfig, iteration: int, version: int, eps: list[Episode], group: int,
                 config_hash: str, group_offset: int = 0) -> list[dict]:
    """One trajectory row per episode (storage/ANALYSTS.md), GRPO advantages per task group."""
    grades = [(e.final or {}).get("grade", {}) for e in eps]
    shaping = [shaping_of(e, cfg.episodes) for e in eps]
    rewards = np.array([float(g.get("reward", math.nan)) + s for g, s in zip(grades, shaping)],
                       dtype=np.float64)
    groups = np.array([i // group for i in range(len(eps))])
    adv = group_advantages(rewards, groups, scale=cfg.rl.scale_advantages)
    rows = []
    for i, (e, g) in enumerate(zip(eps, grades)):
        t = e.task
        gid = group_offset + i // group
        comps = (RewardBreakdown(**{k: g[k] for k in _BREAKDOWN_FIELDS if k in g}).components()
                 if _REQUIRED <= g.keys() else {})
        rows.append({
            "run_id": cfg.run_id, "iteration": iteration, "policy_version": version,
            "task_id": t.task_id, "suite": t.suite, "family": t.family, "difficulty": t.difficulty,
            "split": t.split, "sample_index": e.index, "group_id": f"{iteration}:{gid}",
            "prompt": e.intro,
            "completion": "".join(e.text),
            "prompt_token_ids": e.tokens.prompt_ids, "completion_token_ids": e.tokens.ids,
            "sampling_logprobs": e.tokens.logprobs, "completion_mask": e.tokens.mask,
            "reward": float(rewards[i]), "reward_components": comps, "advantage": float(adv[i]),
            "pass_fraction": g.get("pass_fraction"), "tests_passed": g.get("tests_passed"),
            "tests_total": g.get("tests_total"), "test_outcomes": list(g.get("test_outcomes", ())),
            "status": g.get("status", "not_graded"), "error_type": g.get("error_type"),
            "hack_flags": list(g.get("hack_flags", ())), "infra_error": bool(g.get("infra_error")),
            "sandbox_backend": cfg.sandbox.backend, "gen_time_s": e.gen_s,
            "exec_time_s": float(sum(e.turn_seconds)), "score_time_s": g.get("exec_time_s"),
            "config_hash": config_hash,
            "episode_id": f"{iteration}:{gid}:{e.index}", "turns": e.state.turn,
            "end_reason": (e.final or {}).get("end_reason"), "turn_seconds": e.turn_seconds,
            "turn_actions": e.actions, "turn_observations": e.observations,
            "shaping_reward": shaping[i],
        })
    return rows


def episode_metrics(eps: list[Episode], prefix: str = "episode") -> dict:
    """Turns, end reasons, per-turn seconds and token shares of a batch of episodes."""
    if not eps:
        return {}
    out = {f"{prefix}/count": len(eps),
           f"{prefix}/turns_mean": float(np.mean([e.state.turn for e in eps])),
           f"{prefix}/turn_seconds_mean": float(np.mean([s for e in eps for s in e.turn_seconds]
                                                         or [math.nan])),
           f"{prefix}/policy_tokens_mean": float(np.mean([sum(e.tokens.mask) for e in eps])),
           f"{prefix}/env_tokens_mean": float(np.mean([len(e.tokens.mask) - sum(e.tokens.mask)
                                                       for e in eps]))}
    for reason in ("submit", "max_turns", "time_budget", "context_full"):
        out[f"{prefix}/end_{reason}"] = sum((e.final or {}).get("end_reason") == reason
                                            for e in eps) / len(eps)
    marks = [s for s in map(solved, eps) if s is not None]
    out[f"{prefix}/pass_rate"] = float(np.mean(marks)) if marks else math.nan
    return out


# -- the Prefect stages -----------------------------------------------------------------------
@_stage("sample_actions", timeout_s=3600)
def sample_actions_stage(cfg: RunConfig, iteration: int, version: int, round_: str, turn: int,
                         contexts: list[list[int]], greedy: bool) -> list[Sample]:
    model = policy_for_sampling(cfg.run_dir, version)
    s = cfg.sampling
    return sample_actions(model, contexts, cfg.episodes.action_tokens, s.temperature, s.top_p,
                          greedy=greedy, batch_size=s.batch_size,
                          generator=stages.sampling_generator(cfg.seed, iteration,
                                                              f"episode:{round_}:{turn}"))


@_stage("step_episodes", retries=3, timeout_s=None)
def step_episodes(cfg: RunConfig, iteration: int, version: int, round_: str, shard: int,
                  turn: int, max_turns: int, items: list, deadline_s: float) -> list[Stepped]:
    """One shard of episode steps, fanned out on the Dask cluster."""
    c = cfg.cluster
    client = dask_client(c.address, c.n_workers, c.threads_per_worker)
    return step_many(client, items, cfg.episodes, max_turns, cfg.sandbox, cfg.rewards,
                     timeout_s=deadline_s)


def _flow_fns(cfg: RunConfig, it: int, v: int, rnd: str, max_turns: int, greedy: bool,
              opts: dict, client) -> tuple[SampleFn, StepFn]:
    def sample_fn(turn, contexts, _episodes):
        return sample_actions_stage.with_options(**opts)(cfg, it, v, rnd, turn, contexts, greedy)

    def step_fn(turn, items):
        size = cfg.cluster.shard_size
        deadline = step_deadline_s(min(size, len(items)), cfg.episodes, total_threads(client))
        runner = step_episodes.with_options(**opts)
        futures = [runner.submit(cfg, it, v, rnd, k, turn, max_turns, items[i:i + size], deadline)
                   for k, i in enumerate(range(0, len(items), size))]
        wait_futures(futures)
        return [r for f in futures for r in f.result()]

    return sample_fn, step_fn


def run_episode_iteration(cfg: RunConfig, it: int, opts: dict, log, client) -> dict:
    """One iteration in episode mode: tasks -> episodes -> rows -> store -> update -> checkpoint."""
    v, G, ecfg = it, cfg.sampling.group_size, cfg.episodes
    timings: dict[str, float] = {}
    t_iter = time.perf_counter()
    ledger = stages.ledger_frame(cfg.run_dir, it)
    batch = generate_tasks.with_options(**opts)(cfg, it, 0, cfg.tasks.tasks_per_iteration,
                                                ledger, [])
    model = policy_for_sampling(cfg.run_dir, v)
    t = time.perf_counter()
    eps = play(batch, G, ecfg, ecfg.max_turns, cfg.policy.max_len, tokenizer_of(model),
               *_flow_fns(cfg, it, v, "train", ecfg.max_turns, False, opts, client))
    timings["time/episodes_s"] = time.perf_counter() - t
    rows = episode_rows(cfg, it, v, eps, G, cfg.hash())
    t = time.perf_counter()
    write_trajectories.with_options(**opts)(cfg, it, v, rows)
    timings["time/write_trajectories_s"] = time.perf_counter() - t
    keep = stages.informative_row_mask(rows)
    train_rows = [r for r, k in zip(rows, keep) if k] if cfg.tasks.dynamic_sampling else rows
    t = time.perf_counter()
    train = update_policy.with_options(**opts)(cfg, it, v, train_rows)
    timings["time/update_policy_s"] = time.perf_counter() - t
    groups = len(rows) // G
    metrics = {**stages.rollout_metrics(rows), **episode_metrics(eps), **train, **timings,
               "curriculum/groups_generated": groups,
               "curriculum/groups_trained": len({r["group_id"] for r in train_rows})}
    if _eval_due(cfg, it):
        t = time.perf_counter()
        metrics.update(evaluate_episodes(cfg, v + 1, opts, client))
        metrics["time/evaluate_s"] = time.perf_counter() - t
    metrics["policy_version"] = v + 1
    metrics["time/iteration_s"] = time.perf_counter() - t_iter
    checkpoint.with_options(**opts)(cfg, it, v, metrics)
    log.info(f"iteration {it} (episodes): reward {metrics['rollout/mean_reward']:.3f}, pass "
             f"{metrics['episode/pass_rate']:.3f}, turns {metrics['episode/turns_mean']:.2f}, "
             f"submitted {metrics['episode/end_submit']:.2f}"
             + (f", held-out pass greedy {metrics['heldout/pass_greedy']:.3f}"
                if "heldout/pass_greedy" in metrics else "")
             + f" ({metrics['time/iteration_s']:.1f}s)")
    return metrics


def heldout_metrics(tasks: list[Task], greedy: list[Episode], sampled: list[Episode]) -> dict:
    """Held-out pass rates of episodes, overall and per family (unscored ones left out)."""
    def rate(eps, fam=None):
        marks = [s for e in eps if fam in (None, e.task.family) for s in [solved(e)]
                 if s is not None]
        return float(np.mean(marks)) if marks else math.nan

    out = {"heldout/tasks": len(tasks), "heldout/pass_greedy": rate(greedy),
           "heldout/pass_sampled": rate(sampled),
           "heldout/turns_mean": float(np.mean([e.state.turn for e in greedy])) if greedy else math.nan}
    for fam in sorted({t.family for t in tasks}):
        out[f"heldout/{fam}/pass_greedy"] = rate(greedy, fam)
        out[f"heldout/{fam}/pass_sampled"] = rate(sampled, fam)
        out[f"heldout/{fam}/tasks"] = sum(t.family == fam for t in tasks)
    return out


def evaluate_episodes(cfg: RunConfig, version: int, opts: dict, client) -> dict:
    """Held-out pass rate of one policy version in episodes: greedy (1 per task) and sampled
    (`tasks.heldout_samples` per task), `episodes.max_turns` turns each."""
    tasks = stages.heldout_tasks(cfg.tasks)
    tok = tokenizer_of(policy_for_sampling(cfg.run_dir, version))
    m, k = cfg.episodes.max_turns, cfg.tasks.heldout_samples
    greedy = play(tasks, 1, cfg.episodes, m, cfg.policy.max_len, tok,
                  *_flow_fns(cfg, version, version, "eval-greedy", m, True, opts, client))
    sampled = play(tasks, k, cfg.episodes, m, cfg.policy.max_len, tok,
                   *_flow_fns(cfg, version, version, "eval-sampled", m, False, opts, client))
    return heldout_metrics(tasks, greedy, sampled)


def scripted_policy(naive: dict[str, str], tok, fix_on_fail: bool = True) -> SampleFn:
    """A fixed policy that reads the observation, for tests and benchmarks (not a model): turn
    1 writes the task's naive body (`naive[task_id]`) and runs the visible tests; after an
    observation with a FAIL or an error it writes the task's reference and submits (with
    `fix_on_fail`), otherwise it submits."""
    def fn(turn, contexts, episodes):
        out = []
        for ctx, e in zip(contexts, episodes):
            last = e.observations[-1] if e.observations else ""
            if turn == 1:
                text = write_action(full_function(e.task, naive[e.task.task_id]), "<run_tests/>")
            elif fix_on_fail and ("FAIL" in last or "Error" in last):
                text = write_action(full_function(e.task, e.task.reference), "<submit/>")
            else:
                text = "<submit/>"
            ids = tok.encode(text, bos=False) + [tok.eos_token_id]
            out.append(Sample(list(ctx), ids, [0.0] * len(ids), text, True))
        return out
    return fn


# -- SFT demonstrations -------------------------------------------------------------------------
def full_function(task: Task, body: str) -> str:
    """The signature line of the task's prompt followed by `body`: a whole solution.py."""
    return task.prompt.split("\n", 1)[0] + "\n" + body


def write_action(source: str, then: str) -> str:
    return f'<write path="solution.py">\n{source}</write>\n{then}'


def first_try_right(task_id: str, share: float) -> bool:
    """Deterministic per task: whether its demonstration's first attempt is already right."""
    return int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) / 16 ** 8 < share


def build_demos(tasks: list[Task], naive: dict[str, str], ecfg: EpisodeConfig, tok,
                step_fn: StepFn) -> list[tuple[str, list[tuple[str, bool]]]]:
    """Action-format demonstrations `(intro, [(text, by_policy), ...])`: for a task with a naive
    body, a first attempt (naive, or already right for `demo_first_try_share` of them) and
    `<run_tests/>`, the real observation, then the fix and `<submit/>` (or `<submit/>` alone when
    the visible tests passed); for any other task, write + submit in one turn."""
    max_turns = max(2, ecfg.max_turns)
    single, multi = [], []
    for t in tasks:
        if t.reference is None:
            continue
        state, intro = start_episode(t, ecfg, max_turns)
        if t.task_id not in naive:
            single.append((intro, [(write_action(full_function(t, t.reference), "<submit/>"), True)]))
            continue
        body = t.reference if first_try_right(t.task_id, ecfg.demo_first_try_share) else naive[t.task_id]
        multi.append((t, state, intro, write_action(full_function(t, body), "<run_tests/>")))
    stepped = step_fn(1, [(s, a) for _, s, _, a in multi]) if multi else []
    demos = list(single)
    for (t, _, intro, a1), r in zip(multi, stepped):
        passed = r.info.get("visible_total") and r.info["visible_passed"] == r.info["visible_total"]
        a2 = "<submit/>" if passed else write_action(full_function(t, t.reference), "<submit/>")
        obs = fit_observation(tok, r.observation, ecfg.obs_tokens)
        demos.append((intro, [(a1, True), (observation_text(obs), False), (a2, True)]))
    return demos


def sft_stage_episodes(cfg: RunConfig, client) -> dict:
    """The warm start of an episode-mode run: action-format demonstrations through the real
    environment (steps on Dask), then SFT with the loss over the policy's segments only."""
    from training.policy import _split_gguf  # noqa: PLC0415
    from training.tokenizer import ByteTokenizer, load_tokenizer  # noqa: PLC0415

    p = cfg.policy
    if p.model_path is None:
        tok = ByteTokenizer()
    else:
        folder, gguf = _split_gguf(p.model_path)
        tok = load_tokenizer(folder, gguf_file=gguf, chat_template=p.chat_template)
    tasks = stages.sft_tasks(cfg.tasks)
    tc = cfg.tasks
    naive = first_attempts(tc.families, tc.difficulties, tc.tasks_per_family, tc.seed,
                           tc.sft_variants)
    m = max(2, cfg.episodes.max_turns)

    def step_fn(turn, items):
        threads = total_threads(client)
        return step_many(client, items, cfg.episodes, m, cfg.sandbox, cfg.rewards,
                         timeout_s=step_deadline_s(len(items), cfg.episodes, threads))

    demos = build_demos(tasks, naive, cfg.episodes, tok, step_fn)
    out = sft_warm_start(cfg.run_dir, [], [], cfg.policy, cfg.sft, cfg.rl, cfg.seed, demos=demos)
    return {**out, "sft/demos_multi_turn": sum(len(d[1]) > 1 for d in demos)}
