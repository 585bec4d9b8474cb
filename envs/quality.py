"""A task's checks that run it: its reference and its kind's trivial answers graded in the
sandbox by the environment that grades it (the record's own checks are tasks/quality.py's)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from envs.base import EnvError, StepContext
from envs.registry import env_for_task
from rewards.aggregate import RewardConfig
from sandbox.base import Limits
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox
from tasks.quality import TaskCheck
from tasks.record import Task


def check_task(task: Task, sandbox, limits, reward_cfg=None, env=None) -> TaskCheck:
    """All checks of one task by the environment that grades it (`env`, default: the task's
    kind): its record checks, then the reference and the kind's trivial answers in `sandbox`."""
    cfg = reward_cfg or RewardConfig()
    try:
        env = env or env_for_task(task)
    except EnvError as exc:
        return TaskCheck(task.task_id, (f"{exc}; the task cannot be graded",))
    problems = env.problems(task)
    if problems and any(p.startswith("field ") for p in problems):
        return TaskCheck(task.task_id, tuple(problems))  # a bad record is not run
    ctx = StepContext(sandbox, limits, cfg)
    infra = False
    ref_reward = None
    if task.reference is not None:
        b, report = env.grade(task, task.reference, ctx)
        ref_reward = b.reward
        if b.infra_error:
            infra = True
            problems.append(f"reference could not be run: sandbox infra_error "
                            f"({report.load_error or getattr(report.exec_result, 'error', None)})")
        elif not b.solved:
            why = b.error_type or report.load_error or ",".join(b.test_outcomes)
            problems.append(f"reference fails its hidden tests ({b.tests_passed}/{b.tests_total} "
                            f"passed; {why})")
    trivial = {}
    for name, completion in env.trivial_answers(task).items():
        b, _ = env.grade(task, completion, ctx)
        trivial[name] = b.reward
        if b.infra_error:
            infra = True
            problems.append(f"trivial solution {name!r} could not be run: sandbox infra_error")
        elif b.solved:
            problems.append(f"trivial solution {name!r} passes every hidden test")
        elif env.trivial_earn_nothing and b.reward > 0:
            problems.append(f"trivial answer {name!r} earns {b.reward:.3f} (must earn nothing)")
    return TaskCheck(task.task_id, tuple(problems), ref_reward, trivial, infra)


def check_tasks(tasks: Sequence[Task], sandbox=None, limits=None, reward_cfg=None,
                workers: int = 2, env=None) -> list[TaskCheck]:
    """`check_task` over many tasks; sandbox runs overlap in `workers` threads (run() is
    thread-safe). Without a sandbox, the default one is made from `SandboxConfig()`."""
    own = sandbox is None
    if own:
        cfg = SandboxConfig(site_packages=any((env or env_for_task(t)).site_packages
                                              for t in tasks))
        sandbox, limits = make_sandbox(cfg), limits or cfg.limits()
    if limits is None:
        limits = Limits()
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            return list(pool.map(lambda t: check_task(t, sandbox, limits, reward_cfg, env), tasks))
    finally:
        if own:  # the one made here: its zygotes (or containers) go with it
            sandbox.close()
