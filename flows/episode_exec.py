"""Agent-episode steps on Dask workers: what runs there, and the fan-out the flow calls.

An episode in progress is a plain `EpisodeState` (its task and workspace files, a few KB), so
a step ships the state and the policy's action to any worker and the new state comes back:
no episode is pinned to a worker, a worker that dies loses nothing (the scheduler reruns the
step from the same state), and the flow holds every episode between turns. The sandbox is the
worker's own (one per process, as for one-shot rollouts); every command of a step is a fresh
sandbox run, and the final grade is a fresh sandbox run over the hidden tests.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from flows.episode_config import EpisodeConfig
from flows.rollouts import _sandbox, map_within
from rewards.aggregate import RewardConfig
from rewards.episode_grading import make_grader
from sandbox.config import SandboxConfig
from sandbox.episode import EpisodeEnv, EpisodeState
from tasks.record import Task


@dataclass(frozen=True)
class Stepped:
    """One turn of one episode, as the worker saw it."""

    state: EpisodeState
    observation: str
    done: bool
    info: dict  # EpisodeEnv's turn info (grade and end_reason on the last turn)
    seconds: float  # wall time of the step on the worker, grading included


def make_env(ecfg: EpisodeConfig, max_turns: int, sandbox=None, limits=None, grade=None
             ) -> EpisodeEnv:
    return EpisodeEnv(sandbox, limits, grade, max_turns=max_turns,
                      time_budget_s=ecfg.time_budget_s, obs_bytes=ecfg.obs_bytes,
                      intro=ecfg.intro)


def start_episode(task: Task, ecfg: EpisodeConfig, max_turns: int) -> tuple[EpisodeState, str]:
    """A new episode on `task` and its first observation (no sandbox needed)."""
    env = make_env(ecfg, max_turns)
    obs = env.reset(task)
    return env.state(), obs


def step_episode(state: EpisodeState, action: str | None, ecfg: EpisodeConfig, max_turns: int,
                 sandbox_cfg: SandboxConfig, reward_cfg: RewardConfig) -> Stepped:
    """Run one turn of `state` with the policy's `action` (None: end it now, context full)."""
    t0 = time.perf_counter()
    sandbox, limits = _sandbox(sandbox_cfg), sandbox_cfg.limits()
    env = make_env(ecfg, max_turns, sandbox, limits, make_grader(sandbox, limits, reward_cfg))
    env.restore(state)
    if action is None:
        obs, done, info = "", True, env.end("context_full")
    else:
        obs, done, info = env.step(action)
    return Stepped(env.state(), obs, done, info, time.perf_counter() - t0)


def step_local(items: list[tuple[EpisodeState, str | None]], ecfg: EpisodeConfig, max_turns: int,
               sandbox_cfg: SandboxConfig, reward_cfg: RewardConfig) -> list[Stepped]:
    """`step_many` in this process, one after another (tests, debugging; no cluster)."""
    return [step_episode(s, a, ecfg, max_turns, sandbox_cfg, reward_cfg) for s, a in items]


def step_many(client, items: list[tuple[EpisodeState, str | None]], ecfg: EpisodeConfig,
              max_turns: int, sandbox_cfg: SandboxConfig, reward_cfg: RewardConfig,
              timeout_s: float | None = None) -> list[Stepped]:
    """One Dask task per episode step (`Client.map`), gathered in order; past `timeout_s` the
    steps are cancelled and `ShardTimeout` raised (the calling stage retries)."""
    if not items:
        return []
    return map_within(client, step_episode, [s for s, _ in items], [a for _, a in items],
                      timeout_s=timeout_s, what="episode steps", ecfg=ecfg, max_turns=max_turns,
                      sandbox_cfg=sandbox_cfg, reward_cfg=reward_cfg)


def step_deadline_s(n_items: int, ecfg: EpisodeConfig, threads: int) -> float:
    """How long a shard of steps may take: each step bounded by the episode's time budget plus
    a grading run, one wave after another on the threads there are, twice over, plus a minute."""
    waves = -(-n_items // max(1, threads))
    return 60.0 + 2.0 * waves * (ecfg.time_budget_s + 10.0)
