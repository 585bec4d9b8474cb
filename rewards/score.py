"""score(): one answer to one task, in a sandbox, to a RewardBreakdown, by the task's kind.

The kinds live in `envs/` (and in plug-ins); this is the short way in for callers that hold a
task and an answer but no environment: the curation checks, `rollforge eval`, the episode
grader."""
from __future__ import annotations

from rewards.aggregate import RewardBreakdown, RewardConfig
from rewards.reports import TestReport
from sandbox.base import Limits, Sandbox
from tasks.record import Task


def score(task: Task, completion: str, sandbox: Sandbox, limits: Limits, cfg: RewardConfig,
          infra_retries: int = 2) -> tuple[RewardBreakdown, TestReport]:
    """Grade `completion`; an infrastructure failure is retried, then reported as NaN reward."""
    from envs.base import StepContext  # noqa: PLC0415 (envs builds on rewards)

    return env_of(task).grade(task, completion, StepContext(sandbox, limits, cfg), infra_retries)


def env_of(task: Task):
    """The environment (`envs.base.Environment`) that grades `task`; ValueError naming the
    task when its kind is unknown or cannot be used."""
    from envs.base import EnvError  # noqa: PLC0415 (envs builds on rewards)
    from envs.registry import env_for_task  # noqa: PLC0415

    try:
        return env_for_task(task)
    except EnvError as exc:
        raise ValueError(f"task {task.task_id}: {exc}") from None
