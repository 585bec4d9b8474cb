"""What a round's finished episodes (flows/episodes.py `play`) become: one trajectory row each
(storage/schema.py `TrajectoryRow`), with GRPO advantages per task group and, under
`rl.turn_credit: progress`, per turn; and the metrics of the episodes (turns, tool calls, how
they ended) and of a held-out evaluation (pass rates overall, per family, per source)."""
from __future__ import annotations

import math

import numpy as np

from flows.episodes import Episode, solved
from rewards.advantages import advantages_for, turn_advantages
from storage.schema import TrajectoryRow
from tasks.record import Task
from training.episodes import policy_runs


def _turn_credit(rl, e: Episode, advantage: float) -> list[float] | None:
    """Each turn's advantage under `rl.turn_credit` progress, or None (every policy token takes
    the episode's): credit off, or the token sequence does not hold one run of policy tokens
    per turn (then the turns' spans are not known; the episode's advantage is still right)."""
    if rl.turn_credit != "progress" or policy_runs(e.tokens.mask) != len(e.progress):
        return None
    return turn_advantages(advantage, e.progress, rl.turn_credit_coef)


def episode_rows(cfg, iteration: int, version: int, eps: list[Episode], group: int,
                 config_hash: str, group_offset: int = 0) -> list[TrajectoryRow]:
    """One trajectory row per episode (storage/schema.py `TrajectoryRow`; the columns:
    docs/analysts.md), GRPO advantages per task group.
    The columns only multi-turn episodes fill (the turns' text, the mask, shaping) stay null on
    single-turn rows."""
    grades = [e.grade for e in eps]
    shaping = [float((e.final or {}).get("shaping", 0.0)) for e in eps]
    rewards = np.array([(g.reward if g else math.nan) + s for g, s in zip(grades, shaping)],
                       dtype=np.float64)
    groups = np.array([i // group for i in range(len(eps))])
    # what the update of the configured algorithm uses, so the store holds that
    adv = advantages_for(cfg.rl.algorithm, cfg.rl.scale_advantages, rewards, groups)
    credit = [_turn_credit(cfg.rl, e, a if not math.isnan(r) else math.nan)
              for e, a, r in zip(eps, adv, rewards)]
    rows = []
    for i, (e, g) in enumerate(zip(eps, grades)):
        t = e.task
        gid = group_offset + i // group
        # a chat's per-turn record is kept even at one turn: its calls are read turn by turn
        multi = e.env.max_turns > 1 or e.chat is not None
        rows.append(TrajectoryRow(
            run_id=cfg.run_id, iteration=iteration, policy_version=version,
            task_id=t.task_id, suite=t.suite, family=t.family, difficulty=t.difficulty,
            split=t.split, source=t.source, kind=e.env.name or type(e.env).__name__,
            sample_index=e.index, group_id=f"{iteration}:{gid}",
            prompt=e.intro, completion="".join(e.text),
            prompt_token_ids=e.tokens.prompt_ids, completion_token_ids=e.tokens.ids,
            sampling_logprobs=e.tokens.logprobs,
            completion_mask=e.tokens.mask if multi else None,
            reward=float(rewards[i]), reward_components=g.components() if g else {},
            advantage=float(adv[i]),
            pass_fraction=g.pass_fraction if g else None,
            tests_passed=g.tests_passed if g else None,
            tests_total=g.tests_total if g else None,
            test_outcomes=list(g.test_outcomes) if g else [],
            test_names=list(g.test_names) if g else [],
            status=g.status if g else "not_graded", error_type=g.error_type if g else None,
            hack_flags=list(g.hack_flags) if g else [],
            infra_error=bool(g.infra_error) if g else False, solved=solved(e),
            sandbox_backend=e.backend, image_digest=e.image_digest,
            gen_time_s=e.gen_s, exec_time_s=float(sum(e.turn_seconds)),
            score_time_s=e.wall_s, config_hash=config_hash,
            episode_id=f"{iteration}:{gid}:{e.index}", turns=e.turns,
            end_reason=(e.final or {}).get("end_reason"),
            turn_seconds=e.turn_seconds if multi else None,
            turn_actions=e.actions if multi else None,
            turn_observations=e.observations if multi else None,
            shaping_reward=shaping[i] if multi else None,
            answer_executed=e.executed,
            tool_calls=e.calls if e.chat else None,
            turn_progress=e.progress if multi else None,
            turn_advantages=credit[i] if multi else None,
        ))
    return rows


def episode_metrics(eps: list[Episode], prefix: str = "episode") -> dict:
    """Turns, end reasons, per-turn seconds and token shares of the multi-turn and tools
    episodes of a batch (none: no metrics)."""
    eps = [e for e in eps if e.env.max_turns > 1 or e.chat]  # a tools turn's calls count
    if not eps:
        return {}
    out = {f"{prefix}/count": len(eps),
           f"{prefix}/turns_mean": float(np.mean([e.turns for e in eps])),
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
    chats = [e for e in eps if e.chat]
    if chats:  # tools episodes: call validity, and whether the template kept the history
        calls = sum(e.tool_calls for e in chats)
        out[f"{prefix}/tool_calls_mean"] = calls / len(chats)
        out[f"{prefix}/tool_valid_rate"] = (1 - sum(e.malformed_calls for e in chats) / calls
                                            if calls else math.nan)
        out[f"{prefix}/chat_prefix_stable"] = float(np.mean(
            [all(a.prefix_stable for a in e.chat.appends) for e in chats]))
    return out


def heldout_metrics(tasks: list[Task], greedy: list[Episode], sampled: list[Episode],
                    prefix: str = "heldout") -> dict:
    """Held-out pass rates, greedy (1 per task) and sampled, overall, per family and per
    source (`<prefix>/source/<name>/...`); episodes that could not be scored are left out,
    never counted as failures."""
    def rate(eps, keep=lambda e: True):
        marks = [s for e in eps if keep(e) for s in [solved(e)] if s is not None]
        return float(np.mean(marks)) if marks else math.nan

    out = {f"{prefix}/tasks": len(tasks), f"{prefix}/pass_greedy": rate(greedy),
           f"{prefix}/pass_sampled": rate(sampled)}
    if any(e.env.max_turns > 1 for e in greedy):
        out[f"{prefix}/turns_mean"] = float(np.mean([e.turns for e in greedy]))
    for fam in sorted({t.family for t in tasks}):
        def of_fam(e, fam=fam):
            return e.task.family == fam
        out[f"{prefix}/{fam}/pass_greedy"] = rate(greedy, of_fam)
        out[f"{prefix}/{fam}/pass_sampled"] = rate(sampled, of_fam)
        out[f"{prefix}/{fam}/tasks"] = sum(t.family == fam for t in tasks)
    sources = sorted({t.source for t in tasks if t.source})
    for src in sources:
        def of_src(e, src=src):
            return e.task.source == src
        out[f"{prefix}/source/{src}/pass_greedy"] = rate(greedy, of_src)
        out[f"{prefix}/source/{src}/pass_sampled"] = rate(sampled, of_src)
        out[f"{prefix}/source/{src}/tasks"] = sum(t.source == src for t in tasks)
    return out
