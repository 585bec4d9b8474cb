"""score(): one answer to one task, in a sandbox, to a RewardBreakdown, by the task's kind;
evaluate_samples(): many (task, completion) samples with a thread pool.

The kinds are found in the registry (built-ins and plug-ins); this is the short way in for
callers that hold a task and an answer but no environment: the curation checks, `rollforge
eval`, the episode grader. Each sandbox run is its own subprocess (or container), so threads
are enough to keep N of them going at once; nothing here imports a scheduler."""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from envs.base import Environment, EnvError, StepContext
from envs.registry import env_for_task
from rewards.aggregate import RewardBreakdown, RewardConfig, aggregate
from rewards.evaluate import SampleResult
from rewards.reports import TestReport
from sandbox.base import Limits, Sandbox
from tasks.record import Task


def score(task: Task, completion: str, sandbox: Sandbox, limits: Limits, cfg: RewardConfig,
          infra_retries: int = 2) -> tuple[RewardBreakdown, TestReport]:
    """Grade `completion`; an infrastructure failure is retried, then reported as NaN reward."""
    return env_of(task).grade(task, completion, StepContext(sandbox, limits, cfg), infra_retries)


def env_of(task: Task) -> Environment:
    """The environment that grades `task`; ValueError naming the task when its kind is
    unknown or cannot be used."""
    try:
        return env_for_task(task)
    except EnvError as exc:
        raise ValueError(f"task {task.task_id}: {exc}") from None


def evaluate_samples(samples: Sequence[tuple[Task, str]], sandbox: Sandbox, limits: Limits,
                     cfg: RewardConfig, workers: int = 4, batch_size: int | None = None,
                     env_for: Callable[[Task], Environment] = env_of) -> list[SampleResult]:
    """Score every (task, completion), `workers` sandbox runs at a time, in input order.

    `env_for` gives the environment that grades a task: by default its kind with default
    options (`env_of`); a caller that knows the task's source passes the source's environment,
    whose options a kind may need to grade at all (openenv's server).

    The samples of a kind that grades in batches (`Environment.verify_in_batches`: humaneval)
    go several to a sandbox run (each still in its own process inside it): `batch_size` each,
    or by default in batches that shrink towards the end (`batches`), so that the workers
    finish together whatever the samples cost; 1 gives every sample its own sandbox. A sample
    whose batch hit an infrastructure failure is retried on its own. The sandboxes start in the
    background at once (the kind's `warm`), and the static checks run here while the workers
    wait on their sandboxes.
    """
    envs = [env_for(t) for t, _ in samples]
    by_kind: dict[str, list[int]] = {}
    for i, env in enumerate(envs):
        if env.verify_in_batches:
            by_kind.setdefault(samples[i][0].kind, []).append(i)
    jobs: list[list[int]] = []
    for idx in by_kind.values():  # the sandboxes start while the first batches are planned
        cut = batches(idx, workers, batch_size)
        envs[idx[0]].warm(sandbox, min(max(1, workers), len(cut)))
        jobs += cut
    batched = {i for idx in by_kind.values() for i in idx}
    jobs += [[i] for i in range(len(samples)) if i not in batched]
    out: list[SampleResult | None] = [None] * len(samples)
    reports: dict[int, TestReport] = {}

    def one(i: int) -> None:
        task, completion = samples[i]
        bd, rep = envs[i].grade(task, completion, StepContext(sandbox, limits, cfg))
        out[i] = SampleResult(task.task_id, bd, rep)

    def run(job: list[int]) -> None:
        if job[0] not in batched:
            return one(job[0])
        got = envs[job[0]].verify_batch([samples[i] for i in job], sandbox, limits,
                                        cfg.per_test_timeout_s)
        for i, rep in zip(job, got):
            if rep.infra_error:
                one(i)  # score() retries it
            else:
                reports[i] = rep

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(run, job) for job in jobs]
        static = {i: envs[i].static(*samples[i]) for i in batched}
        for f in futures:
            f.result()
    for i, rep in reports.items():
        task, completion = samples[i]
        out[i] = SampleResult(task.task_id, aggregate(rep, cfg, static[i]), rep)
    return out  # type: ignore[return-value]


def batches(items: Sequence[int], workers: int, batch_size: int | None = None
            ) -> list[list[int]]:
    """`items` cut into sandbox runs, in order. With `batch_size`, that many a run. Without,
    guided self-scheduling: each run takes a 1/(2 x workers) share of what is left, between 4
    (a sandbox run costs about what a few samples cost) and 48 samples, so the first runs pay
    the sandbox start for many samples and the last ones are short: a worker that drew slow
    samples is not left finishing a long batch alone.
    E.g. 164 samples, 2 workers: 41, 31, 23, 18, 13, 10, 7, 6, 4, 4, 4, 3."""
    if batch_size is not None:
        return [list(items[i:i + batch_size]) for i in range(0, len(items), batch_size)]
    out, at, share = [], 0, 2 * max(1, workers)
    while at < len(items):
        size = min(48, max(4, math.ceil((len(items) - at) / share)))
        out.append(list(items[at:at + size]))
        at += size
    return out
