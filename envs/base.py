"""The environment protocol: the one way every kind of task reaches the loop.

A kind of environment is a class with a typed `Config` (the options of a task source of this
kind), an optional `Payload` model (the kind's own part of a `Task` record), the tasks it can
generate with their train/held-out split, and an episode: `reset(task)` gives the state and the
first observation, `step(state, action, ctx)` runs the policy's text and returns the next
observation, and the last step carries the grade: a `RewardBreakdown` with named reward
components (per-test outcomes with their names, static and runtime signals, hack flags). A
single completion is an episode of one turn (`SingleTurnEnv`), so the loop, the row builder and
the evaluation are the same for every kind and turn count. The sampled tokens are the truth:
an environment sees and returns text, the flow keeps the token ids it sampled.

What runs where: `reset` runs in the flow (no sandbox); `step` runs on a Dask worker with a
`StepContext` (the worker's sandbox, its limits and the reward config). States and
environments cross processes by pickle, so both must be plain picklable values; a plug-in class
is pickled by reference and imported by the worker (it must be installed there too).
"""
from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from rewards.aggregate import RewardBreakdown, RewardConfig, aggregate
from rewards.reports import Outcome, TestReport
from sandbox.base import Limits, Sandbox
from tasks.record import Task

log = logging.getLogger(__name__)
_SAID: set[tuple[str, str]] = set()  # (kind, missing module) warned about in this process


# Outcome and TestReport are here for plug-ins: what a kind's verify returns.
__all__ = ["EnvError", "Environment", "NoOptions", "Outcome", "SingleTurnEnv", "StepContext",
           "StepResult", "TestReport", "breakdown_of", "known_names"]


class NoOptions(BaseModel):
    """A kind without options."""

    model_config = ConfigDict(extra="forbid")


def known_names(given: list[str], known, what: str = "") -> list[str]:
    """`given` if every name is in `known`, else ValueError naming the unknown ones (a kind's
    Config validator for its `families`)."""
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError(f"unknown {what}{unknown}; expected some of {sorted(known)}")
    return given


class EnvError(ValueError):
    """A kind that cannot be used: unknown, failed to import, or given bad options or tasks."""


@dataclass(frozen=True)
class StepContext:
    """What a step may use on the worker: its sandbox, the limits of one execution, the reward
    weights."""

    sandbox: Sandbox
    limits: Limits
    reward: RewardConfig


@dataclass(frozen=True)
class StepResult:
    """One turn of one episode. `info` holds at least `seconds` (environment time of the turn)
    and, when `done`, `end_reason` and `grade` (the final `RewardBreakdown`)."""

    state: Any
    observation: str
    done: bool
    info: dict = field(default_factory=dict)


def breakdown_of(info: Mapping[str, Any]) -> RewardBreakdown | None:
    """The grade of a finished episode, or None if it never got one."""
    g = info.get("grade")
    return g if isinstance(g, RewardBreakdown) else None


class Environment:
    """A kind of environment; subclass it (see envs/README.md).

    Class attributes: `name` (the registry key, also `Task.kind` of the tasks it grades),
    `description` (one line for `rollforge envs`), `Config` and `Payload` (pydantic models),
    `site_packages` (its executions need the interpreter's installed packages, e.g. pandas).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Config: ClassVar[type[BaseModel]] = NoOptions
    Payload: ClassVar[type[BaseModel] | None] = None
    site_packages: ClassVar[bool] = False
    # True: every answer of `trivial_answers` (the kind's cheats too) must earn no reward at all,
    # not only fail to solve (the task check reports one that earns partial credit)
    trivial_earn_nothing: ClassVar[bool] = False
    max_turns: int = 1

    def __init__(self, config: BaseModel | Mapping[str, Any] | None = None) -> None:
        if isinstance(config, BaseModel) and isinstance(config, self.Config):
            self.config = config
        else:
            try:
                self.config = self.Config.model_validate(dict(config or {}))
            except ValidationError as exc:
                raise EnvError(f"kind {self.name!r}: bad options: " + "; ".join(
                    f"{'.'.join(map(str, e['loc'])) or '(options)'}: {e['msg']}"
                    for e in exc.errors())) from None

    def __reduce__(self):  # pickled as (class, options): small, and re-validated on arrival
        return (type(self), (self.config.model_dump(mode="json"),))

    # -- tasks -----------------------------------------------------------------------------
    def generate(self) -> list[Task]:
        """The kind's own tasks (with their split). Kinds that only grade files raise."""
        raise EnvError(f"kind {self.name!r} generates no tasks of its own: give the source a "
                       f"task file (`file:`)")

    def sft_tasks(self) -> list[Task]:
        """The warm start's tasks: training-split tasks that have a reference."""
        return [t for t in self.generate() if t.split == "train" and t.reference is not None]

    def demo_tool_calls(self, task: Task) -> list[list[tuple[str, dict]]] | None:
        """A tools kind's demonstration of `task` (action_format: tools): its tool calls turn
        by turn, as (name, arguments). The warm start plays them through the real environment
        and trains on the episodes that solve (flows/warm_start.py `replayed_tool_demos`).
        None: no demonstration of this task."""
        return None

    def validate(self, task: Task) -> Task:
        """Check a task record against this kind (its payload first); raise ValueError naming
        the field. Returns the task (a kind may normalise it)."""
        if self.Payload is not None:
            try:
                self.Payload.model_validate(task.payload)
            except ValidationError as exc:
                raise ValueError("; ".join(
                    f"field 'payload.{'.'.join(map(str, e['loc']))}': {e['msg']}"
                    for e in exc.errors())) from None
        return task

    def problems(self, task: Task) -> list[str]:
        """What is wrong with a task that needs no execution to see (`rollforge tasks check`)."""
        try:
            self.validate(task)
        except ValueError as exc:
            return [str(exc)]
        return []

    def trivial_answers(self, task: Task) -> dict[str, str]:
        """Answers that must not solve any task (the quality check runs them)."""
        return {"empty": ""}

    def attacks(self, task: Task) -> list:
        """The kind's hack suite on `task`: `envs.hacks.Attack`s, each of which must earn nothing
        and raise a named flag (`rollforge hacks`, envs/hacks.py)."""
        return []

    def attack_tasks(self) -> list[Task]:
        """The tasks `rollforge hacks` plays the suite on when no file is given: the kind's own
        (`generate`); a kind that generates none returns a task file it ships."""
        return self.generate()

    # -- an episode --------------------------------------------------------------------------
    def reset(self, task: Task) -> tuple[Any, str]:
        """A new episode on `task`: (state, first observation)."""
        raise NotImplementedError

    def step(self, state: Any, action: str | None, ctx: StepContext) -> StepResult:
        """Run the policy's `action` (None: the policy's context is full, end and grade now)."""
        raise NotImplementedError

    def answer(self, state: Any, text: str) -> str:
        """The action an instruct model's `text` stands for (prompts in a chat template: it
        answers in its own format, envs/answers.py); the text itself unless the kind says."""
        return text

    def action_tokens(self, default: int) -> int:
        """Longest action of one turn, in tokens (`sampling.max_new_tokens` unless the kind
        says otherwise)."""
        return default

    obs_tokens: int = 256  # budget of one observation in the policy's context (multi-turn)

    def step_budget_s(self, sandbox_timeout_s: float) -> float:
        """The longest one step may take on a worker (its shard's deadline is built from it)."""
        return sandbox_timeout_s + 5.0

    # -- grading -----------------------------------------------------------------------------
    def verify(self, task: Task, answer: str, sandbox: Sandbox, limits: Limits,
               per_test_timeout_s: float) -> TestReport:
        """Run the task's checks on `answer`: one outcome per check ("passed", "failed",
        "error", "timeout", "missing"; named in `test_names` where the kind knows), the
        execution evidence and runtime hack flags. `status` is the sandbox's (`ok`, `failed`,
        `timeout`, `memory_exceeded`, `output_truncated`), `syntax_error` when the answer
        never ran because it does not parse (the reward's `syntax_ok` reads it), and
        `infra_error` only when the host failed, never for anything the answer did."""
        raise NotImplementedError

    # True: `verify_batch` grades several answers in one sandbox run, cheaper than a run each
    # (`rollforge eval` then cuts the kind's samples into batches: envs/score.py)
    verify_in_batches: ClassVar[bool] = False

    def verify_batch(self, items: Sequence[tuple[Task, str]], sandbox: Sandbox, limits: Limits,
                     per_test_timeout_s: float) -> list[TestReport]:
        """`verify` of several (task, answer) pairs of this kind, one report each, in order;
        `limits.timeout_s` bounds each answer, not the batch. A report with `infra_error` is
        graded again on its own by the caller. One `verify` each unless the kind says."""
        return [self.verify(t, a, sandbox, limits, per_test_timeout_s) for t, a in items]

    def warm(self, sandbox: Sandbox, runs: int) -> None:
        """Let `sandbox` start, in the background, what `runs` concurrent `verify_batch` runs
        will run in, while the caller plans them; nothing unless the kind says."""

    def static(self, task: Task, answer: str):
        """Static signals of the answer (a `rewards.static_checks.StaticReport`), or None."""
        return None

    def grade(self, task: Task, answer: str, ctx: StepContext, infra_retries: int = 2
              ) -> tuple[RewardBreakdown, TestReport]:
        """The answer's reward and its components; an infrastructure failure is retried, then
        reported as NaN reward (not scored, never scored zero)."""
        static = self.static(task, answer)
        for _ in range(infra_retries + 1):
            report = self.verify(task, answer, ctx.sandbox, ctx.limits,
                                 ctx.reward.per_test_timeout_s)
            if not report.infra_error:
                break
            missing = missing_module(report)
            if missing is not None:  # the kind's own dependency: no retry will find it
                report = replace(report, load_error=self._missing_dependency(missing))
                if (self.name, missing) not in _SAID:
                    _SAID.add((self.name, missing))
                    log.warning("%s", report.load_error)
                break
        return aggregate(report, ctx.reward, static), report

    def _missing_dependency(self, module: str) -> str:
        where = ("install it into the interpreter the sandbox runs (rollforge's own; the "
                 "process backend shows its site-packages read-only)" if self.site_packages
                 else "set `site_packages = True` on the kind, so that the sandbox sees the "
                 "packages of rollforge's interpreter, and install it there")
        return (f"MissingDependency: kind {self.name!r}: its sandbox run could not import "
                f"{module!r}: {where}")


_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")


def missing_module(report: TestReport) -> str | None:
    """The module a kind's own sandbox program could not import, when that is why its run
    failed as infrastructure (a candidate's failed import is its own failure, never
    infra_error), else None."""
    if not report.infra_error:
        return None
    res = report.exec_result
    for text in (report.load_error, getattr(res, "error", None), getattr(res, "stderr", None)):
        m = _NO_MODULE.search(text or "")
        if m:
            return m.group(1)
    return None


class SingleTurnEnv(Environment):
    """One turn: the first observation is the task's prompt, the action is the answer, and the
    step grades it."""

    def reset(self, task: Task) -> tuple[Any, str]:
        return task, task.prompt

    def step(self, state: Any, action: str | None, ctx: StepContext) -> StepResult:
        t0 = time.perf_counter()
        breakdown, _ = self.grade(state, action or "", ctx)
        seconds = breakdown.exec_time_s if not math.isnan(breakdown.exec_time_s) else 0.0
        return StepResult(state, "", True, {
            "seconds": seconds, "end_reason": "answer" if action is not None else "context_full",
            "grade": breakdown, "wall_s": time.perf_counter() - t0})
