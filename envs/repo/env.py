"""Kind `repo`: fix a bug synthesized into a real Python package, over several turns.

The workspace is the repository at the buggy state: the pristine sdist tree (one copy per
process, shared by every episode, envs/repo/source.py) under an overlay of the files the bug
and the agent changed. Resetting an episode makes an empty overlay plus the bug's file(s), so
it costs the bug's few KB, never a copy of the tree; the state that crosses processes is that
overlay. Each command the agent runs is one fresh sandbox execution over the tree, in the
repository's environment layer (its pytest and test dependencies), with only the overlay
written: the rest is the extracted sdist as the run's base (sandbox/base.py `BaseTree`), which
the process backend shows read-only in place rather than copies.

Actions (text outside them is ignored; the format of envs/agent/EPISODES.md, more verbs):

    <ls path="DIR"/>                          files under DIR (default: the root)
    <read path="FILE" start="N" end="M"/>     lines N..M with their numbers (default: 1..200)
    <search pattern="REGEX" path="DIR"/>      matching lines, FILE:LINE: text
    <edit path="FILE">                        search/replace blocks, each SEARCH must match once
    <<<<<<< SEARCH
    old lines
    =======
    new lines
    >>>>>>> REPLACE
    </edit>
    <write path="FILE">...</write>            create or replace a file
    <run>pytest ARGS</run> | <run>python ARGS</run>   in the sandbox's limits
    <submit/>                                 end: graded on a pristine copy (envs/repo/grading.py)

Edits to several files are allowed; edits to tests are dropped at grading and flagged. What each
action does is envs/repo/actions.py; this module holds the episode (its state, turns and end).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envs.base import Environment, StepContext, StepResult
from envs.repo.actions import parse_actions, run_action
from envs.repo.diffs import PatchError, apply_diff
from envs.repo.grading import apply_overlay, grade_candidate
from envs.repo.scripted import scripted_calls
from envs.tools import ToolOptions, call_outcomes, outcome, read_turn, tool_results
from rewards.aggregate import RewardBreakdown, aggregate
from rewards.reports import TestReport
from sandbox.base import Limits, Sandbox
from sandbox.workspace import check_relpath
from tasks.record import Task

DEFAULT_FILE = str(Path(__file__).with_name("instances.jsonl"))


class RepoOptions(ToolOptions):
    """A source of kind `repo`: which instances, and the episode's limits."""

    model_config = ConfigDict(extra="forbid")

    file: str | None = Field(None, description="the instances' task file (rollforge tasks "
                             "build-repo writes it); null: the built-in envs/repo/instances.jsonl")
    repos: list[str] | None = Field(None, description="only these packages (names)")
    max_turns: int = Field(8, ge=1, description="policy turns per episode; at the last one "
                           "the workspace is graded whatever the policy did")
    time_budget_s: float = Field(120.0, gt=0, description="seconds of sandbox time per "
                                 "episode, all commands together")
    action_tokens: int = Field(384, ge=8, description="longest action, in tokens")
    obs_tokens: int = Field(512, ge=32, description="token budget of one observation")
    obs_bytes: int = Field(8192, ge=256, description="hard cap of an observation's text")


class RepoPayload(BaseModel):
    """The kind's part of a task record (envs/repo/build.py writes it)."""

    model_config = ConfigDict(extra="forbid")

    repo: str = Field(pattern=r"^[A-Za-z0-9._-]+==[A-Za-z0-9._+-]+$")
    sdist_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    patch: str = Field(min_length=1, description="the bug, a unified diff over the sdist")
    files: list[str] = Field(min_length=1)
    operators: list[str]
    sites: list[str]
    fail_to_pass: list[str] = Field(min_length=1)
    pass_to_pass: list[str] = Field(description="node ids, or a file's, class's or function's "
                                    "name for every node under it that is not FAIL_TO_PASS")
    n_collected: int = Field(ge=1, description="nodes pytest collects for the graded names")


@dataclass(frozen=True)
class RepoState:
    """An episode in progress: the overlay over the pristine tree (bug and edits), picklable."""

    task: Task
    files: dict[str, bytes | None]
    turn: int = 0
    used_s: float = 0.0
    done: bool = False
    history: tuple[dict, ...] = ()


INTRO = """You are in the repository {repo} (Python). Some of its tests fail; fix the library.
Actions (several per turn, in order; text outside them is ignored):
<ls path="DIR"/>  <read path="FILE" start="N" end="M"/>  <search pattern="REGEX" path="DIR"/>
<edit path="FILE">
<<<<<<< SEARCH
old lines
=======
new lines
>>>>>>> REPLACE
</edit>
<write path="FILE">content</write>  <run>pytest ARGS</run>  <run>python ARGS</run>  <submit/>
"""

TOOLS_INTRO = """You are in the repository {repo} (Python). Some of its tests fail; fix the library
with the tools: list (ls), read and search files, edit or write them, run `pytest ARGS` or
`python ARGS`, and submit when the tests pass (several calls per turn run in order).
"""

class RepoEnv(Environment):
    name = "repo"
    description = ("fix a bug synthesized into a real package: list, read, search, edit, run "
                   "the tests, submit; graded by FAIL_TO_PASS and PASS_TO_PASS on a pristine copy")
    Config = RepoOptions
    Payload = RepoPayload
    trivial_earn_nothing = True  # the task check reports a no-op that earns anything

    @property
    def max_turns(self) -> int:  # type: ignore[override]
        return self.config.max_turns

    @property
    def obs_tokens(self) -> int:  # type: ignore[override]
        return self.config.obs_tokens

    def action_tokens(self, default: int) -> int:
        return self.config.action_tokens

    def step_budget_s(self, sandbox_timeout_s: float) -> float:
        return self.config.time_budget_s + 120.0  # the grade's runs come after the budget

    # -- tasks -----------------------------------------------------------------------------
    def generate(self) -> list[Task]:
        from tasks.files import load_tasks  # noqa: PLC0415

        tasks = load_tasks(self.config.file or DEFAULT_FILE, validate=self.validate)
        if self.config.repos is not None:
            tasks = [t for t in tasks if t.family in self.config.repos]
        return tasks

    def demo_tool_calls(self, task: Task) -> list[list[tuple[str, dict]]] | None:
        """Two turns (envs/repo/scripted.py): run the failing test and read the buggy lines,
        then edit them (one search/replace a hunk of the gold patch) and submit."""
        if task.reference is None or self.config.max_turns < 2:
            return None
        return scripted_calls(task)

    @property
    def tool_kind(self) -> str | None:
        """The kind whose tools this env's episodes use as messages (flows/episodes.py `play`
        reads it); None: text actions in one sequence."""
        return "repo" if self.config.action_format == "tools" else None

    def validate(self, task: Task) -> Task:
        super().validate(task)
        p = task.payload
        for i, path in enumerate(p["files"]):
            try:
                check_relpath(path)
            except ValueError as exc:
                raise ValueError(f"field 'payload.files.{i}': {exc}") from None
        if set(p["fail_to_pass"]) & set(p["pass_to_pass"]):
            raise ValueError("field 'payload.pass_to_pass': shares tests with fail_to_pass")
        return task

    def grade(self, task: Task, answer: str, ctx: StepContext, infra_retries: int = 2
              ) -> tuple[RewardBreakdown, TestReport]:
        b, report = super().grade(task, answer, ctx, infra_retries)
        return resolved_reward(b), report

    def attacks(self, task: Task) -> list:
        from envs.repo.hacks import attacks  # noqa: PLC0415 (the suite builds on envs.hacks)

        return attacks(task)

    def trivial_answers(self, task: Task) -> dict[str, str]:
        return {"noop": ""}  # the bug left in place: the FAIL_TO_PASS tests must fail

    # -- grading -----------------------------------------------------------------------------
    @staticmethod
    def trees(task: Task) -> tuple[dict[str, bytes], dict[str, bytes | None]]:
        """(pristine tree, the bug's overlay): `envs.repo.source.task_trees`."""
        from envs.repo.source import task_trees  # noqa: PLC0415

        return task_trees(task)

    def grade_files(self, task: Task, files: dict[str, bytes | None], sandbox: Sandbox,
                    limits: Limits, per_test_s: float = 10.0) -> TestReport:
        """The grade of a workspace (an overlay over the pristine tree, the bug's files in it)."""
        from envs.repo.sandboxes import layer_sandbox  # noqa: PLC0415

        tree, bug = self.trees(task)
        buggy = apply_overlay(tree, bug)
        mine = {k: v for k, v in files.items() if buggy.get(k) != v}
        p = task.payload
        limits = replace(limits, timeout_s=max(limits.timeout_s, 30.0),
                         memory_mb=max(limits.memory_mb, 1024))
        return grade_candidate(tree, bug, mine, p["fail_to_pass"], p["pass_to_pass"],
                               layer_sandbox(sandbox.name), limits, max(per_test_s, 10.0),
                               p["n_collected"])

    def verify(self, task: Task, answer: str, sandbox: Sandbox, limits: Limits,
               per_test_timeout_s: float) -> TestReport:
        """A single-turn answer: a unified diff over the buggy repository."""
        tree, bug = self.trees(task)
        buggy = apply_overlay(tree, bug)
        names = tuple(task.payload["fail_to_pass"]) + tuple(task.payload["pass_to_pass"])
        try:
            changes = apply_diff(buggy, answer) if answer.strip() else {}
        except PatchError as exc:
            return TestReport(("failed",) * len(names), (), "failed", None,
                              load_error=f"PatchError: {exc}", test_names=names)
        return self.grade_files(task, dict(bug, **changes), sandbox, limits, per_test_timeout_s)

    # -- an episode --------------------------------------------------------------------------
    def reset(self, task: Task) -> tuple[Any, str]:
        _, bug = self.trees(task)
        top = sorted({p.split("/")[0] + ("/" if "/" in p else "") for p in self.trees(task)[0]})
        intro = TOOLS_INTRO if self.tool_kind else INTRO
        obs = (intro.format(repo=task.payload["repo"]) + "\n" + task.prompt
               + "\n\nTop level: " + " ".join(top) + "\n")
        return RepoState(task, dict(bug)), obs

    def step(self, state: Any, action: str | None, ctx: StepContext) -> StepResult:
        t0 = time.monotonic()
        files = dict(state.files)
        info: dict = {"turn": state.turn + 1, "actions": [], "infra_error": False}
        parts: list[str] = []
        ran: list[dict] = []  # each executed action's outcome, in order
        submitted = False
        calls = read_turn("repo", action, self.config.tool_format) \
            if self.tool_kind and action is not None else None
        if action is not None:
            try:
                if calls and calls.refusal:
                    raise ValueError(calls.refusal)
                acts = parse_actions(calls.action if calls else action)
            except ValueError as exc:
                info["action"] = "malformed"
                parts.append(f"Malformed action: {exc}")
            else:
                info["actions"] = [a[0] for a in acts]
                info["action"] = acts[0][0]
                for a in acts:
                    if a[0] == "submit":
                        submitted = True
                        ran.append(outcome("ran"))
                        break
                    left = self.config.time_budget_s - state.used_s - (time.monotonic() - t0)
                    text, done = self._do(a, state.task, files, ctx, left, info)
                    parts.append(text)
                    ran.append(done)
        info["outcomes"] = ran  # what each action the turn ran did, in either format
        if calls:
            info["calls"] = call_outcomes(calls, ran, info["turn"])
        used = state.used_s + time.monotonic() - t0
        turn = state.turn + 1
        reason = ("context_full" if action is None else "submit" if submitted
                  else "max_turns" if turn >= self.config.max_turns
                  else "time_budget" if used >= self.config.time_budget_s else None)
        info["seconds"] = time.monotonic() - t0
        if reason is None:
            parts.append(f"[turn {turn}/{self.config.max_turns}]")
            if calls:  # one tool message per action (envs/CHAT.md)
                info["tool_results"] = tool_results(parts, self.config.obs_bytes, _cut)
            new = replace(state, files=files, turn=turn, used_s=used,
                          history=state.history + (info,))
            return StepResult(new, _cut("\n".join(parts), self.config.obs_bytes), False, info)
        report = self.grade_files(state.task, files, ctx.sandbox, ctx.limits,
                                  ctx.reward.per_test_timeout_s)
        info.update(end_reason=reason, grade=resolved_reward(aggregate(report, ctx.reward, None)),
                    wall_s=time.monotonic() - t0)
        info["seconds"] = time.monotonic() - t0
        parts.append(f"[episode over: {reason}]")
        if calls:
            info["tool_results"] = tool_results(parts, self.config.obs_bytes, _cut)
        new = replace(state, files=files, turn=turn, used_s=used, done=True,
                      history=state.history + (info,))
        return StepResult(new, _cut("\n".join(parts), self.config.obs_bytes), True, info)

    def _do(self, a: tuple, task: Task, files: dict, ctx: StepContext, left: float,
            info: dict) -> tuple[str, dict]:
        """Run one action (envs/repo/actions.py) over the workspace as it is now."""
        tree, _ = self.trees(task)
        return run_action(a, apply_overlay(tree, files), task, files, ctx, left, info)


def resolved_reward(b: RewardBreakdown) -> RewardBreakdown:
    """The repo kind's reward: the aggregate's only for a resolved instance (every FAIL_TO_PASS
    and PASS_TO_PASS test passed, nothing flagged) or a flagged one (the hack penalty); any
    other outcome earns 0, while the components keep the partial credit (`pass_fraction`,
    `tests_passed`, the outcome of each test by name). The PASS_TO_PASS tests pass at the buggy
    state already, so a share of them is what doing nothing would earn: 0.37 of the tests on
    average over the built-in instances, up to 0.98."""
    if b.infra_error or b.hack_flags or b.solved:
        return b
    return replace(b, reward=0.0)


def _cut(text: str, cap: int) -> str:
    data = text.encode()
    if len(data) <= cap:
        return text
    return data[:cap].decode("utf-8", "ignore") + f"\n...[truncated: {len(data)} bytes]"
