"""The `Task` record: one executable, verifiable problem, whatever kind of environment it is for.

Common fields say what every loop stage needs (identity, family, difficulty, split, the first
observation, a known-good answer); `kind` names the environment that grades it (`envs/`), and
`payload` holds what only that kind needs, validated by the kind's own model
(`envs.base.Environment.Payload`). The function kinds (`io`, `dataframe`, `humaneval`) keep their
historic top-level fields (`entry_point`, `tests`, `examples`); other kinds leave them empty.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Split = Literal["train", "heldout"]


class TestCase(BaseModel):
    """One call of the entry point: positional `args` (JSON values) and the `expected` JSON result."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    __test__ = False  # not a pytest class

    args: tuple[Any, ...]
    expected: Any


class Task(BaseModel):
    """A problem the policy solves, starting from `prompt` (its first observation).

    For the function kinds `tests` are hidden from the policy and `examples` are the ones shown
    in the docstring. `reference` is a known-good completion where the suite has one, else None
    (a verification-only task: only the reward can teach it). `source` is the name of the run
    config's task source the task was drawn from (set when a pool is built; None elsewhere).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str = Field(min_length=1)
    suite: str = Field(min_length=1)
    family: str = Field(min_length=1)
    difficulty: int = Field(ge=0, le=10)
    split: Split
    prompt: str = Field(min_length=1)
    kind: str = Field("io", min_length=1,
                      description="environment kind that grades the task (`rollforge envs`)")
    entry_point: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    tests: tuple[TestCase, ...] = ()
    examples: tuple[TestCase, ...] = ()
    reference: str | None = None
    payload: dict[str, Any] = Field(default_factory=dict,
                                    description="the kind's own fields, checked by its Payload")
    source: str | None = None

    def fingerprint(self) -> str:
        """Content hash of what the policy sees and is graded on (used to remove duplicates)."""
        parts: list[Any] = [self.prompt, [t.model_dump(mode="json") for t in self.tests]]
        if self.payload:
            parts.append(self.payload)
        payload = json.dumps(parts, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]
