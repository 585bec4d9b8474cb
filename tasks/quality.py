"""Task quality checks: a task is worth training on only if its tests can tell right from wrong.

Per task: the tests are consistent (plain JSON, no input with two answers, examples agreeing
with tests, the entry point defined by the prompt, not all answers equal so a constant cannot
pass); the reference solution, where there is one, passes every hidden test in the real sandbox;
a trivial solution (`pass`, which returns None) does not (those runs grade the task through its
kind: envs/quality.py). Over a set of tasks: duplicates (same
content up to the function's name) are removed, and no task appears on both sides of the
train/held-out split. A verification-only task (`reference=None`) gets every check but the
reference run.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
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
