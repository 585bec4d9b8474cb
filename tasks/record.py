"""The `Task` record: one executable, verifiable problem, whatever suite it came from."""
from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Split = Literal["train", "heldout"]


class TestCase(BaseModel):
    """One call of the entry point: positional `args` (JSON values) and the `expected` JSON result."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    __test__ = False  # not a pytest class

    args: tuple[Any, ...]
    expected: Any


class Task(BaseModel):
    """A problem the policy solves by continuing `prompt` (a signature and a docstring).

    `tests` are hidden from the policy; `examples` are the ones shown in the docstring. `reference`
    is a known-good completion (the function body) where the suite has one, else None.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str = Field(min_length=1)
    suite: str = Field(min_length=1)
    family: str = Field(min_length=1)
    difficulty: int = Field(ge=0, le=10)
    split: Split
    prompt: str = Field(min_length=1)
    entry_point: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    tests: tuple[TestCase, ...] = Field(min_length=1)
    examples: tuple[TestCase, ...] = ()
    reference: str | None = None
    verifier: str = "io"

    @field_validator("prompt")
    @classmethod
    def _prompt_defines_something(cls, v: str) -> str:
        if "def " not in v:
            raise ValueError("prompt must contain the function signature ('def ...')")
        return v

    def fingerprint(self) -> str:
        """Content hash of what the policy sees and is graded on (used to remove duplicates)."""
        payload = json.dumps(
            [self.prompt, [t.model_dump(mode="json") for t in self.tests]], sort_keys=True
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]
