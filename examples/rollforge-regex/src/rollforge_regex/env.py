"""Kind `regex`: the policy writes a regular expression that must fully match every positive
string of a task and none of its negatives. A worked example of a plug-in kind (see
envs/README.md in the rollforge repository): its own options, payload, task generator and
verifier, which is not a Python function run against tests.

The answer's first non-blank line, stripped of surrounding whitespace, is the pattern (Python
`re` syntax, matched with `re.fullmatch`); anything after it is ignored, so a policy may explain
itself on the following lines. A pattern that must start or end with a space has to spell it
`[ ]` or `\\x20`.
"""
from __future__ import annotations

import hashlib
import json
import random

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envs.base import SingleTurnEnv
from rewards.reports import TestReport
from sandbox.base import Limits, Sandbox
from tasks.record import Task

from rollforge_regex.checker import CHECK_SOURCE, report_of
from rollforge_regex.families import FAMILIES, draw_strings


class RegexOptions(BaseModel):
    """Which regex tasks a source of kind `regex` generates."""

    model_config = ConfigDict(extra="forbid")

    families: list[str] = Field(default_factory=lambda: list(FAMILIES), min_length=1,
                                description=f"rule families in the pool, some of "
                                f"{sorted(FAMILIES)}")
    tasks_per_family: int = Field(20, ge=1, description="tasks drawn per family")
    strings_per_side: int = Field(8, ge=1, le=100, description="positives, and negatives, "
                                  "each task is graded on")
    shown_per_side: int = Field(4, ge=1, description="of those, how many of each side the "
                                "prompt shows; the rest are hidden, so a pattern that lists "
                                "the shown strings does not pass")
    heldout_fraction: float = Field(0.2, gt=0, lt=1, description="share of tasks held out")
    seed: int = Field(0, description="generator seed; the same options give the same tasks")

    @field_validator("families")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = sorted(set(v) - set(FAMILIES))
        if unknown:
            raise ValueError(f"unknown {unknown}; expected some of {sorted(FAMILIES)}")
        return v

    @model_validator(mode="after")
    def _shown_fits(self) -> "RegexOptions":
        if self.shown_per_side > self.strings_per_side:
            raise ValueError(f"shown_per_side={self.shown_per_side} is more than "
                             f"strings_per_side={self.strings_per_side}")
        return self


class RegexPayload(BaseModel):
    """The kind's part of a `Task` record: the strings the pattern is graded on."""

    model_config = ConfigDict(extra="forbid")

    positives: list[str] = Field(min_length=1, description="strings the pattern must match")
    negatives: list[str] = Field(min_length=1, description="strings it must not match")


def pattern_of(answer: str) -> str:
    """The pattern in an answer: its first non-blank line, whitespace stripped."""
    lines = answer.strip().splitlines()
    return lines[0].strip() if lines else ""


def _quoted(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _test_name(verb: str, s: str) -> str:
    q = _quoted(s)
    return f"{verb} {q if len(q) <= 40 else q[:37] + '...'}"


def prompt_of(rule_text: str, positives: list[str], negatives: list[str]) -> str:
    lines = ["Write a regular expression (Python `re` syntax) that matches a whole string, as "
             f"`re.fullmatch` does, exactly when the string {rule_text}.", "",
             "It must match each of these strings:"]
    lines += [f"  {_quoted(s)}" for s in positives]
    lines += ["It must match none of these:"]
    lines += [f"  {_quoted(s)}" for s in negatives]
    lines += ["", "Answer with the pattern alone on one line: no quotes, no slashes, no code "
              "block.", "Regex:"]
    return "\n".join(lines)


class RegexEnv(SingleTurnEnv):
    name = "regex"
    description = "a regular expression that fully matches the positive strings and no negative"
    Config = RegexOptions
    Payload = RegexPayload

    # -- tasks -----------------------------------------------------------------------------
    def generate(self) -> list[Task]:
        c = self.config
        tasks: list[Task] = []
        for family in c.families:
            for i in range(c.tasks_per_family):
                # One RNG per task, seeded by its coordinates (a str seed is hashed stably),
                # so a task does not change when another family or count is added.
                rng = random.Random(f"regex:{c.seed}:{family}:{i}")
                rule = FAMILIES[family](rng)
                pos, neg = draw_strings(rule, rng, c.strings_per_side)
                prompt = prompt_of(rule.text, pos[:c.shown_per_side], neg[:c.shown_per_side])
                # The split is a pure function of the task's content, never of the order the
                # tasks were drawn in.
                digest = hashlib.sha256(json.dumps(
                    [family, rule.reference, prompt, pos, neg]).encode()).hexdigest()
                split = "heldout" if int(digest[:8], 16) % 1000 < c.heldout_fraction * 1000 \
                    else "train"
                tasks.append(Task(task_id=f"regex/{family}/{digest[:10]}", suite="regex",
                                  family=family, difficulty=rule.difficulty, split=split,
                                  prompt=prompt, kind=self.name, reference=rule.reference,
                                  payload={"positives": pos, "negatives": neg}))
        return tasks

    def validate(self, task: Task) -> Task:
        super().validate(task)  # the payload model first
        both = sorted(set(task.payload["positives"]) & set(task.payload["negatives"]))
        if both:
            raise ValueError(f"field 'payload.negatives': {both[:3]!r} also in "
                             f"'payload.positives'; a string cannot be on both sides")
        return task

    def problems(self, task: Task) -> list[str]:
        bad = super().problems(task)  # validate()
        if not bad:
            for side in ("positives", "negatives"):
                if len(set(task.payload[side])) < len(task.payload[side]):
                    bad.append(f"field 'payload.{side}': a string is repeated")
        return bad

    def trivial_answers(self, task: Task) -> dict[str, str]:
        return {"match_all": ".*", "empty": ""}

    # -- grading -----------------------------------------------------------------------------
    def verify(self, task: Task, answer: str, sandbox: Sandbox, limits: Limits,
               per_test_timeout_s: float) -> TestReport:
        p = RegexPayload.model_validate(task.payload)
        strings = p.positives + p.negatives
        expected = [True] * len(p.positives) + [False] * len(p.negatives)
        names = tuple(_test_name("match", s) for s in p.positives) + \
            tuple(_test_name("reject", s) for s in p.negatives)
        files = {"check.py": CHECK_SOURCE,
                 "case.json": json.dumps({"pattern": pattern_of(answer), "strings": strings})}
        res = sandbox.run(files, ["python", "check.py", repr(float(per_test_timeout_s))], limits)
        return report_of(res, expected, names)
