"""Task quality checks: a task is worth training on only if its tests can tell right from wrong.

Per task: the tests are consistent (plain JSON, no input with two answers, examples agreeing
with tests, the entry point defined by the prompt, not all answers equal so a constant cannot
pass); the reference solution, where there is one, passes every hidden test in the real sandbox;
a trivial solution (`pass`, which returns None) does not. Over a set of tasks: duplicates (same
content up to the function's name) are removed, and no task appears on both sides of the
train/held-out split. A verification-only task (`reference=None`) gets every check but the
reference run.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from tasks.record import Task

@dataclass(frozen=True)
class TaskCheck:
    """The verdict on one task. `problems` empty means the task is fit to train on."""

    task_id: str
    problems: tuple[str, ...]
    reference_reward: float | None = None  # None: no reference (verification-only) or not run
    trivial_rewards: dict[str, float] = field(default_factory=dict)
    infra_error: bool = False  # the sandbox failed: the task could not be checked, not judged bad

    @property
    def ok(self) -> bool:
        return not self.problems


def _plain(v: Any) -> bool:
    """JSON values only: None, bool, int, finite float, str, lists/tuples, dicts with str keys."""
    if v is None or isinstance(v, (bool, int, str)):
        return True
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, (list, tuple)):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain(x) for k, x in v.items())
    return False


def _canon(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=repr)


def check_tests_consistent(task: Task, *, compares_values: bool) -> list[str]:
    """Problems with a function task's tests that need no execution to see. `compares_values`
    (declared by the task's kind, `FunctionTaskEnv.compares_values`): its grader compares each
    test's returned value with `expected`, so a repeated test or one answer for every test (a
    constant would pass) is a problem too."""
    problems = []
    if task.entry_point is None or not re.search(
            rf"^\s*def\s+{re.escape(task.entry_point)}\s*\(", task.prompt, re.M):
        problems.append(f"entry point {task.entry_point!r} is not defined in the prompt")
    answers: dict[str, str] = {}
    for kind, cases in (("test", task.tests), ("example", task.examples)):
        for i, case in enumerate(cases):
            if not (_plain(list(case.args)) and _plain(case.expected)):
                problems.append(f"{kind} {i}: args or expected value is not plain JSON "
                                f"(no NaN/inf, str dict keys)")
                continue
            key, ans = _canon(list(case.args)), _canon(case.expected)
            if key in answers and answers[key] != ans:
                problems.append(f"{kind} {i}: args {list(case.args)!r} already expect "
                                f"{answers[key]}, here {ans}")
            answers.setdefault(key, ans)
    if not compares_values:
        return problems  # e.g. HumanEval: one test that is a check program, not a value
    if len({_canon(list(t.args)) for t in task.tests}) < len(task.tests):
        problems.append("a hidden test is repeated")
    if len({_canon(t.expected) for t in task.tests}) == 1:
        problems.append(f"every hidden test expects {_canon(task.tests[0].expected)}: a constant "
                        f"solution passes")
    return problems


def check_task(task: Task, sandbox, limits, reward_cfg=None, env=None) -> TaskCheck:
    """All checks of one task by the environment that grades it (`env`, default: the task's
    kind): its record checks, then the reference and the kind's trivial answers in `sandbox`."""
    from envs.base import EnvError, StepContext  # noqa: PLC0415 (envs builds on tasks)
    from envs.registry import env_for_task  # noqa: PLC0415
    from rewards.aggregate import RewardConfig  # noqa: PLC0415

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
                            f"({getattr(report.exec_result, 'error', None)})")
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
        from sandbox.config import SandboxConfig
        from sandbox.registry import make_sandbox

        from envs.registry import env_for_task  # noqa: PLC0415

        cfg = SandboxConfig(site_packages=any((env or env_for_task(t)).site_packages
                                              for t in tasks))
        sandbox, limits = make_sandbox(cfg), limits or cfg.limits()
    if limits is None:
        from sandbox.base import Limits
        limits = Limits()
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            return list(pool.map(lambda t: check_task(t, sandbox, limits, reward_cfg, env), tasks))
    finally:
        if own:  # the one made here: its zygotes (or containers) go with it
            sandbox.close()


def content_key(task: Task) -> str:
    """What a task asks and how it is graded, up to the function's name (so a renamed copy of a
    task is still the same task)."""
    prompt = (re.sub(rf"\b{re.escape(task.entry_point)}\b", "ENTRY", task.prompt)
              if task.entry_point else task.prompt)
    payload = json.dumps([prompt, [t.model_dump(mode="json") for t in task.tests], task.payload],
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def dedupe(tasks: Iterable[Task]) -> tuple[list[Task], list[str]]:
    """Remove duplicates by content; when a train and a held-out copy collide the held-out one
    is kept, so evaluation stays untouched. Returns (kept, removed task ids)."""
    kept: dict[str, Task] = {}
    removed = []
    for t in tasks:
        key = content_key(t)
        prev = kept.get(key)
        if prev is None:
            kept[key] = t
        elif prev.split == "train" and t.split == "heldout":
            removed.append(prev.task_id)
            kept[key] = t
        else:
            removed.append(t.task_id)
    return list(kept.values()), removed


def find_split_leaks(tasks: Iterable[Task]) -> list[str]:
    """Each way a held-out task is also seen in training: the same id or the same content."""
    by_id: dict[str, set[str]] = {}
    by_key: dict[str, dict[str, list[str]]] = {}
    for t in tasks:
        by_id.setdefault(t.task_id, set()).add(t.split)
        by_key.setdefault(content_key(t), {}).setdefault(t.split, []).append(t.task_id)
    leaks = [f"task id {i!r} is in both splits" for i, s in by_id.items() if len(s) > 1]
    for sides in by_key.values():
        if "train" in sides and "heldout" in sides:
            leaks.append(f"held-out {sides['heldout'][0]!r} has the same content as train "
                         f"{sides['train'][0]!r}")
    return leaks


def summarize(checks: Sequence[TaskCheck]) -> dict[str, Any]:
    bad = [c for c in checks if not c.ok]
    refs = [c.reference_reward for c in checks if c.reference_reward is not None]
    return {"tasks": len(checks), "ok": len(checks) - len(bad), "with_problems": len(bad),
            "infra_errors": sum(c.infra_error for c in checks),
            "verification_only": sum(c.reference_reward is None for c in checks),
            "reference_mean_reward": (sum(refs) / len(refs)) if refs and not any(
                math.isnan(r) for r in refs) else None}
