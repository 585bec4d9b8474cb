"""Kind `reasoning_gym`: any dataset of the `reasoning-gym` package (100+ procedural generators,
each with its own `score_answer`) by name, with its options, curriculum levels and seed.

The prompt is the entry's question, the answer is the policy's text (stripped), and the reward
is the dataset's own score, a fraction in [0, 1] (`TestReport.score`), computed in the sandbox
(envs/reasoning_gym/harness.py: some scorers evaluate the answer) and read back only from the
guard's keyed records (envs/reasoning_gym/grading.py). A solve is a full score. The threat
model, what is and is not defended: docs/environments.md, "reasoning_gym".
"""
from __future__ import annotations

import functools
import hashlib
import json
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envs.base import SingleTurnEnv, TestReport
from envs.reasoning_gym import datasets as rgd
from envs.reasoning_gym.grading import run_batch, warm_sandbox
from sandbox.base import Limits, Sandbox
from tasks.record import Task


class DatasetSpec(BaseModel):
    """One reasoning-gym dataset of a source."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="the dataset's reasoning-gym name, e.g. "
                      "countdown (an unknown name is refused with the list of known ones)")
    options: dict[str, Any] = Field(default_factory=dict, description="the dataset's own "
                                    "config fields (not seed or size, which are the kind's)")
    levels: list[int] | None = Field(None, description="reasoning-gym curriculum levels to "
                                     "draw tasks at (each is the task's difficulty); null: the "
                                     "dataset's defaults and options alone, difficulty 0")

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or any(not 0 <= x <= rgd.MAX_LEVEL for x in v)):
            raise ValueError(f"levels={v}; expected a non-empty list of 0..{rgd.MAX_LEVEL}")
        return v


class ReasoningGymOptions(BaseModel):
    """Which reasoning-gym tasks a source of kind `reasoning_gym` generates."""

    model_config = ConfigDict(extra="forbid")

    datasets: list[DatasetSpec] = Field(
        default_factory=lambda: [DatasetSpec(name=n) for n in ("basic_arithmetic", "countdown",
                                                               "n_queens")],
        min_length=1, description="datasets: a name, or {name, options, levels}")
    tasks_per_level: int = Field(20, ge=1, le=10000, description="entries drawn per dataset "
                                 "and level (a question drawn again is one task: a dataset with "
                                 "few distinct questions gives fewer)")
    heldout_fraction: float = Field(0.2, ge=0, lt=1, description="share of tasks held out (by "
                                    "a hash of the question)")
    seed: int = Field(0, description="run seed; each dataset and level gets its own generator "
                      "seed from it")

    @field_validator("datasets", mode="before")
    @classmethod
    def _names(cls, v: Any) -> Any:
        return [{"name": x} if isinstance(x, str) else x for x in v] if isinstance(v, list) else v

    @model_validator(mode="after")
    def _known(self) -> "ReasoningGymOptions":
        for spec in self.datasets:  # every dataset, option and level, refused here by name
            for level in spec.levels or [None]:
                try:
                    rgd.check(spec.name, spec.options, level)
                except rgd.DatasetError as exc:
                    raise ValueError(str(exc)) from None
        return self


class ReasoningGymPayload(BaseModel):
    """The kind's part of a `Task`: the recipe that rebuilds its entry (never the answer)."""

    model_config = ConfigDict(extra="forbid")

    dataset: str = Field(min_length=1, description="the reasoning-gym dataset's name")
    options: dict[str, Any] = Field(default_factory=dict, description="its options as given")
    level: int | None = Field(None, ge=0, le=rgd.MAX_LEVEL, description="curriculum level")
    seed: int = Field(ge=0, description="the dataset's generator seed")
    size: int = Field(ge=1, description="the dataset's size")
    index: int = Field(ge=0, description="the entry's index in the dataset")


@functools.lru_cache(maxsize=16)
def _generate(options_json: str) -> tuple[Task, ...]:
    c = ReasoningGymOptions.model_validate_json(options_json)
    tasks, seen = [], set()
    for spec in c.datasets:
        for level in spec.levels or [None]:
            seed = rgd.seed_of(c.seed, spec.name, level)
            size = c.tasks_per_level
            for i, entry in enumerate(rgd.entries(spec.name, spec.options, level, seed, size)):
                question = str(entry["question"])
                digest = hashlib.sha256(json.dumps([spec.name, question]).encode()).hexdigest()
                if digest in seen:
                    # a dataset with few distinct questions (n_queens' boards) draws one again:
                    # one task, the first draw; the source has fewer than tasks_per_level
                    continue
                seen.add(digest)
                held = int(digest[:8], 16) % 1000 < c.heldout_fraction * 1000
                answer = entry.get("answer")
                tasks.append(Task(
                    task_id=f"reasoning_gym/{spec.name}/{digest[:12]}", suite="reasoning_gym",
                    family=spec.name, difficulty=level or 0,
                    split="heldout" if held else "train", prompt=question,
                    kind="reasoning_gym", reference=None if answer is None else str(answer),
                    payload={"dataset": spec.name, "options": spec.options, "level": level,
                             "seed": seed, "size": size, "index": i}))
    return tuple(tasks)


class ReasoningGymEnv(SingleTurnEnv):
    """reasoning-gym's datasets, scored by their own `score_answer` in the sandbox."""

    name = "reasoning_gym"
    description = "any reasoning-gym dataset by name, scored in [0, 1] by its own score_answer"
    Config = ReasoningGymOptions
    Payload = ReasoningGymPayload
    site_packages = True  # reasoning_gym and what it imports live in site-packages
    verify_in_batches = True  # one sandbox run pays reasoning_gym's import for a whole batch

    def generate(self) -> list[Task]:
        return list(_generate(self.config.model_dump_json()))

    def validate(self, task: Task) -> Task:
        super().validate(task)
        p = ReasoningGymPayload.model_validate(task.payload)
        try:
            rgd.check(p.dataset, p.options, p.level)
        except rgd.DatasetError as exc:
            raise ValueError(f"field 'payload.dataset' or 'payload.options': {exc}") from None
        if p.index >= p.size:
            raise ValueError(f"field 'payload.index': {p.index} is past the dataset's size "
                             f"{p.size} (payload.size)")
        return task

    def attacks(self, task: Task) -> list:
        from envs.reasoning_gym.hacks import attacks  # noqa: PLC0415

        return attacks(task)

    def answer(self, state: Any, text: str) -> str:
        return text.strip()

    def step_budget_s(self, sandbox_timeout_s: float) -> float:
        return sandbox_timeout_s + 15.0  # the sandbox's parent imports reasoning_gym first

    def verify(self, task: Task, answer: str, sandbox: Sandbox, limits: Limits,
               per_test_timeout_s: float) -> TestReport:
        return run_batch([(task, answer)], sandbox, limits, per_test_timeout_s)[0]

    def verify_batch(self, items: Sequence[tuple[Task, str]], sandbox: Sandbox,
                     limits: Limits, per_test_timeout_s: float) -> list[TestReport]:
        return run_batch(items, sandbox, limits, per_test_timeout_s)

    def warm(self, sandbox: Sandbox, runs: int) -> None:
        warm_sandbox(sandbox, runs)
