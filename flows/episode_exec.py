"""Episode steps on Dask workers: what runs there, and the fan-out the flow calls.

An episode in progress is a plain state (its task and, for multi-turn kinds, the workspace:
a few KB), so a step ships (environment, state, action) to any worker and the new state comes
back: no episode is pinned to a worker, a worker that dies loses nothing (the scheduler reruns
the step from the same state), and the flow holds every episode between turns. The sandbox is
the worker's own (one per process and sandbox config); an environment is pickled as its class
and options, so a plug-in kind is imported by the worker.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from envs.base import Environment, StepContext
from flows.rollouts import sandbox_for, map_within
from rewards.aggregate import RewardConfig
from sandbox.config import SandboxConfig


@dataclass(frozen=True)
class Stepped:
    """One turn of one episode, as the worker saw it."""

    state: Any
    observation: str
    done: bool
    info: dict  # the environment's turn info (`grade` and `end_reason` on the last turn)
    seconds: float  # wall time of the step on the worker, grading included
    backend: str = ""
    image_digest: str | None = None


def sandbox_config_for(env: Environment, cfg: SandboxConfig) -> SandboxConfig:
    """The run's sandbox config with what the kind needs (its installed packages)."""
    return cfg.model_copy(update={"site_packages": True}) if env.site_packages else cfg


def step_episode(env: Environment, state: Any, action: str | None, sandbox_cfg: SandboxConfig,
                 reward_cfg: RewardConfig) -> Stepped:
    """Run one turn of `state` with the policy's `action` (None: end it now, context full)."""
    t0 = time.perf_counter()
    scfg = sandbox_config_for(env, sandbox_cfg)
    sandbox = sandbox_for(scfg)
    r = env.step(state, action, StepContext(sandbox, scfg.limits(), reward_cfg))
    return Stepped(r.state, r.observation, r.done, r.info, time.perf_counter() - t0,
                   sandbox.name, getattr(sandbox, "image_digest", None))


StepItem = tuple[Environment, Any, "str | None"]


def step_local(items: list[StepItem], sandbox_cfg: SandboxConfig, reward_cfg: RewardConfig
               ) -> list[Stepped]:
    """`step_many` in this process, one after another (tests, debugging; no cluster)."""
    return [step_episode(e, s, a, sandbox_cfg, reward_cfg) for e, s, a in items]


def step_many(client, items: list[StepItem], sandbox_cfg: SandboxConfig,
              reward_cfg: RewardConfig, timeout_s: float | None = None) -> list[Stepped]:
    """One Dask task per episode step (`Client.map`), gathered in order; past `timeout_s` the
    steps are cancelled and `ShardTimeout` raised (the calling stage retries)."""
    if not items:
        return []
    return map_within(client, step_episode, [e for e, _, _ in items], [s for _, s, _ in items],
                      [a for _, _, a in items], timeout_s=timeout_s, what="episode steps",
                      sandbox_cfg=sandbox_cfg, reward_cfg=reward_cfg)


def step_deadline_s(items: list[StepItem], sandbox_cfg: SandboxConfig, threads: int) -> float:
    """How long a shard of steps may take before it counts as hung: every step taking its
    kind's longest, one wave after another on the threads there are, twice over, plus a
    minute."""
    if not items:
        return 60.0
    waves = -(-len(items) // max(1, threads))
    budget = max(e.step_budget_s(sandbox_cfg.timeout_s) for e, _, _ in items)
    return 60.0 + 2.0 * waves * budget
