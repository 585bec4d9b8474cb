"""Kind `logic`: the policy proves a goal from premises as a numbered chain of steps, and z3
checks every step (envs/logic/checker.py; the syntax: envs/logic/syntax.py).

A task shows premises `P1.`, `P2.`, ... and a goal (or, for knights and knaves and the integer
puzzles, asks to find the solution: the goal is then hidden and the last step must state it).
The answer is one step a line, `N. formula [cited]`, each citing at most `max_cited` premises or
earlier steps it follows from. Each step is one named outcome (`step 1`, `step 2`, ...):
`passed` valid, `failed` not entailed by what it cites (or citing an invalid step, or too many),
`error` unparsable, `timeout` undecided within the per-check limit. The last outcome, `goal`,
passes when the last step is valid and equivalent to the goal.

Reward: the share of passed outcomes (so about the share of valid steps, the goal included),
given only when the goal is reached and nothing is flagged, else 0: a right answer reached by a
wrong argument, an argument that stops short, and a cheat all earn nothing. The run's hack
penalty does not apply (a flagged chain earns 0, not less), because the flags also fire on
honest slips (a wrong last step that states the goal is `restated_goal`); the flags say which
was which. Chain length is the number of `step N` outcomes of the row (`test_outcomes`,
`test_names`), next to `pass_fraction` and `hack_flags` in the store.

Where the checks run: on the worker, in-process, not in the sandbox: the answer is text that
our own parser reads into z3 terms, never code that runs; the solver is bounded by the
per-check timeout (`rewards.per_test_timeout_s`), the answer's budget (`sandbox.timeout_s`),
z3's memory cap (`sandbox.memory_mb`) and the syntax's size caps. The threat model is in
envs/logic/checker.py.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import random
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from envs.base import SingleTurnEnv, StepContext, known_names
from envs.logic import hacks
from envs.logic.checker import check_chain, premises_consistent, set_memory_cap, task_sorts
from envs.logic.families import FAMILIES, Problem
from envs.logic.syntax import ParseError
from rewards.aggregate import RewardBreakdown
from rewards.reports import TestReport
from sandbox.base import ExecResult, Limits, Sandbox
from tasks.record import Task


class LogicOptions(BaseModel):
    """Which logic problems a source of kind `logic` generates."""

    model_config = ConfigDict(extra="forbid")

    families: list[str] = Field(default_factory=lambda: list(FAMILIES), min_length=1,
                                description=f"problem families, some of {sorted(FAMILIES)}")
    tasks_per_family: int = Field(30, ge=1, description="tasks drawn per family")
    heldout_fraction: float = Field(0.2, gt=0, lt=1, description="share of tasks held out "
                                    "(by a hash of the task's content)")
    seed: int = Field(0, description="generator seed; the same options give the same tasks")
    max_cited: int = Field(2, ge=1, le=4, description="premises and earlier steps one step may "
                           "cite: the size of one inference (the generated goals need 3 "
                           "premises or more, so at 2 restating the goal never passes; above "
                           "2 a goal may follow in one step)")
    max_steps: int = Field(16, ge=2, le=64, description="steps checked in one answer; later "
                           "lines fail")
    sft_variants: int = Field(4, ge=1, description="seeds whose training-split tasks make the "
                              "SFT data (held-out tasks never appear, whatever the seed)")

    @field_validator("families")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        return known_names(v, FAMILIES)


class LogicPayload(BaseModel):
    """The kind's part of a `Task` record."""

    model_config = ConfigDict(extra="forbid")

    premises: list[str] = Field(min_length=1, max_length=12, description="formulas P1, P2, ...")
    goal: str = Field(min_length=1, description="what the last step must state (up to "
                      "equivalence)")
    ask: Literal["prove", "determine"] = Field("prove", description="prove: the prompt shows "
                                               "the goal; determine: it asks for the solution")
    max_cited: int = Field(2, ge=1, le=4, description="lines one step may cite")
    max_steps: int = Field(16, ge=2, le=64, description="steps checked in one answer")


STEPS = ("in steps `N. formula [cited]`, each citing at most {k} premises (P1) or earlier "
         "steps (1)")
SYNTAX = "Syntax: not and or -> <-> all x. some x. 2*x + y >= 3"
ASK = {
    "prove": "Goal: {goal}\nProve it {steps}; end with the goal.",
    "knights_knaves": "Knights tell the truth, knaves lie; K_a: a is a knight. Find who is a "
                      "knight {steps}; end like `K_a and not K_b and K_c`.",
    "integers": "Find x, y... {steps}; end like `x = 1 and y = 2`.",
}


def prompt_of(family: str, p: Problem, max_cited: int) -> str:
    ask = ASK["prove" if p.ask == "prove" else family]
    return "\n".join(["Premises:", *(f"P{i}. {f}" for i, f in enumerate(p.premises, 1)),
                      ask.format(goal=p.goal, steps=STEPS.format(k=max_cited)), SYNTAX,
                      "Steps:", ""])


@functools.lru_cache(maxsize=32)
def _generate(options_json: str) -> tuple[Task, ...]:
    c = LogicOptions.model_validate_json(options_json)
    tasks = []
    for family in c.families:
        for i in range(c.tasks_per_family):
            # One RNG per task, seeded by its coordinates: adding a family or a task changes
            # no other task.
            p = FAMILIES[family](random.Random(f"logic:{c.seed}:{family}:{i}"))
            digest = hashlib.sha256(json.dumps([family, p.premises, p.goal, p.ask]).encode()
                                    ).hexdigest()
            split = "heldout" if int(digest[:8], 16) % 1000 < c.heldout_fraction * 1000 \
                else "train"
            tasks.append(Task(
                task_id=f"logic/{family}/{digest[:10]}", suite="logic", family=family,
                difficulty=p.difficulty, split=split, prompt=prompt_of(family, p, c.max_cited),
                kind="logic", reference="\n".join(p.reference),
                payload={"premises": list(p.premises), "goal": p.goal, "ask": p.ask,
                         "max_cited": c.max_cited, "max_steps": c.max_steps}))
    return tuple(tasks)


class LogicEnv(SingleTurnEnv):
    """Proofs as numbered chains, every step checked by z3 (this module's docstring says how)."""

    name = "logic"
    description = "a numbered chain of proof steps, each checked by the z3 solver"
    Config = LogicOptions
    Payload = LogicPayload

    # -- tasks -----------------------------------------------------------------------------
    def generate(self) -> list[Task]:
        return list(_generate(self.config.model_dump_json()))

    def sft_tasks(self) -> list[Task]:
        c = self.config
        out: dict[str, Task] = {}
        for k in range(c.sft_variants):
            for t in _generate(c.model_copy(update={"seed": c.seed + k}).model_dump_json()):
                if t.split == "train":
                    out.setdefault(t.task_id, t)
        return list(out.values())

    def validate(self, task: Task) -> Task:
        super().validate(task)
        p = LogicPayload.model_validate(task.payload)
        try:
            task_sorts(p.premises, p.goal)
        except ParseError as exc:
            raise ValueError(f"field 'payload.premises' or 'payload.goal': {exc}") from None
        return task

    def problems(self, task: Task) -> list[str]:
        bad = super().problems(task)
        if not bad and not premises_consistent(tuple(task.payload["premises"])):
            bad.append("premises are contradictory (or not shown consistent): anything "
                       "follows from them")
        return bad

    trivial_earn_nothing = True  # the task check runs every cheat: none may earn anything

    def trivial_answers(self, task: Task) -> dict[str, str]:
        """The empty answer and one answer per cheat (each must earn nothing): the old cheats,
        the issue-34 chain and the curried chain from the hack suite (envs/logic/hacks.py
        `TASK_CHECK`; the whole suite is `attacks`)."""
        return hacks.trivial_answers(task)

    def attacks(self, task: Task) -> list:
        """The kind's hack suite (envs/logic/hacks.py; `rollforge hacks logic`)."""
        return hacks.attacks(task)

    # -- grading -----------------------------------------------------------------------------
    def verify(self, task: Task, answer: str, sandbox: Sandbox, limits: Limits,
               per_test_timeout_s: float) -> TestReport:
        p = LogicPayload.model_validate(task.payload)
        set_memory_cap(limits.memory_mb)
        v = check_chain(p.premises, p.goal, answer, max_cited=p.max_cited,
                        timeout_ms=int(per_test_timeout_s * 1000), budget_s=limits.timeout_s,
                        max_steps=p.max_steps)
        names = tuple(f"step {i}" for i in range(1, len(v.steps) + 1)) + ("goal",)
        verdicts = v.steps + (v.goal,)
        log = "\n".join(f"{n}: {s.outcome}: {s.why}" for n, s in zip(names, verdicts))
        errors = tuple("ParseError" if s.outcome == "error" else "Timeout"
                       for s in v.steps if s.outcome in ("error", "timeout"))
        return TestReport(
            tuple(s.outcome for s in verdicts), errors,
            "syntax_error" if v.steps and not v.parsed else "ok",
            ExecResult("ok", 0, log, "", v.seconds, "z3"), v.flags, None, names)

    def grade(self, task: Task, answer: str, ctx: StepContext, infra_retries: int = 2
              ) -> tuple[RewardBreakdown, TestReport]:
        """The aggregate reward when the goal is reached and nothing is flagged, else 0."""
        b, report = super().grade(task, answer, ctx, infra_retries)
        reached = report.outcomes[-1:] == ("passed",)
        if not b.infra_error and (b.hack_flags or not reached):
            b = dataclasses.replace(b, reward=0.0)
        return b, report

