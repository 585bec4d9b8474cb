"""Kind `verifiers`: any environment written for Prime Intellect's `verifiers` package, loaded
as its users load it (`verifiers.load_environment(env_id, **env_args)`), unchanged.

Its dataset's rows are the tasks (the training rows, and its evaluation rows where it has
them), in the split and curriculum machinery like every kind; the answer is graded by the
environment's own rubric, each reward function a named outcome and the rubric's weighted reward
the score (envs/verifiers/grading.py). Everything the environment's code does, loading
included, runs in the sandbox from the kind's own venv (envs/verifiers/venv.py,
envs/verifiers/harness.py), never in the flow or the worker. Multi-turn environments
(`MultiTurnEnv`: its `env_response` and stop conditions) play with `max_turns` above 1: each
step replays the environment's own rollout on the policy's replies so far, in the sandbox, and
its next messages are the observation; the finished rollout is scored by the rubric. A tool
environment's (`ToolEnv`) tools are shown to the policy, and the tool calls of its replies
(Hermes/Qwen `<tool_call>` JSON, or a plain JSON object) reach the environment as the
response's `tool_calls`: docs/environments.md, "verifiers".
"""
from __future__ import annotations

import collections
import functools
import hashlib
import time
from dataclasses import dataclass
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from envs.base import EnvError, SingleTurnEnv, StepContext, StepResult, TestReport
from envs.chat import tools_prompt
from envs.verifiers import venv
from envs.verifiers.grading import content_text, prompt_sha, run_batch, run_turn
from rewards.aggregate import aggregate
from sandbox.base import Limits, Sandbox
from tasks.record import Task


class VerifiersOptions(BaseModel):
    """Which verifiers environment a source of kind `verifiers` plays."""

    model_config = ConfigDict(extra="forbid")

    env_id: str = Field("vf-rollforge-arith", min_length=1, pattern=r"^[A-Za-z0-9_./-]+$",
                        description="the environment's id as `verifiers.load_environment` takes "
                        "it (its package installed in the kind's venv: setup_venv.sh)")
    env_args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of "
                                     "the environment's load_environment")
    max_tasks: int | None = Field(None, ge=1, description="the first this many rows of each "
                                  "split; null: every row")
    heldout: Literal["eval_dataset", "hash"] = Field(
        "eval_dataset", description="eval_dataset: the environment's evaluation rows are held "
        "out (a hash of the prompt splits one that has none); hash: a hash of the prompt always")
    heldout_fraction: float = Field(0.2, ge=0, lt=1, description="share held out by the hash")
    max_turns: int = Field(1, ge=1, le=64, description="the policy's turns in an episode: 1 "
                           "for a single-turn environment; above 1 plays a multi-turn one "
                           "(MultiTurnEnv), whose own stop conditions may end it sooner")
    reference: Literal["answer", "none"] = Field(
        "answer", description="answer: the row's answer, as the environment's parser formats "
        "it, is the task's reference (the warm start's target, the task check's solution); "
        "none: the row's answer is no answer (verifiers' ReasoningGymEnv keeps an index there). "
        "A multi-turn source (max_turns above 1) has none: no one reply answers an episode")


class VerifiersPayload(BaseModel):
    """The kind's part of a `Task`: the row that the sandbox rebuilds (never its answer)."""

    model_config = ConfigDict(extra="forbid")

    env_id: str = Field(min_length=1)
    env_args: dict[str, Any] = Field(default_factory=dict)
    split: Literal["train", "eval"] = Field(description="the environment's dataset it is in")
    index: int = Field(ge=0, description="the row's index in that dataset")
    prompt_sha: str = Field(pattern=r"^[0-9a-f]{64}$", description="digest of the row's "
                            "prompt messages: the sandbox checks the row it rebuilds")
    messages: list[dict[str, Any]] = Field(default_factory=list, description="the row's "
                                           "prompt messages as the environment wrote them")


def prompt_text(prompt: Any) -> str:
    """The prompt as one text: the messages' contents, the system message first."""
    if isinstance(prompt, str):
        return prompt
    parts = []
    for m in prompt or []:
        content = content_text(m.get("content")) if isinstance(m, dict) else ""
        if content:
            parts.append(content)
    return "\n\n".join(parts)


@functools.lru_cache(maxsize=16)
def _generate(options_json: str) -> tuple[Task, ...]:
    c = VerifiersOptions.model_validate_json(options_json)
    rows = venv.rows(c.env_id, c.env_args)
    info = venv.env_info(c.env_id, c.env_args)
    if info.get("multi_turn") and c.max_turns == 1:
        raise EnvError(f"verifiers environment {c.env_id!r} is multi-turn ({info.get('class')}, "
                       f"max_turns {info.get('max_turns')}): set the source's option max_turns "
                       "(the policy's turns in an episode) above 1")
    has_eval = any(r["split"] == "eval" for r in rows)
    # rows whose prompts are the same (a game's one opening, its secret in the answer) are
    # different tasks: their ids also name the row
    seen = collections.Counter((r["split"], prompt_sha(r["prompt"])) for r in rows)
    tasks = []
    for r in rows:
        if c.max_tasks is not None and r["index"] >= c.max_tasks:
            continue
        prompt = r["prompt"]
        text = prompt_text(prompt)
        if not text.strip():
            continue
        digest = prompt_sha(prompt)
        row = digest[:12] + (f"-{r['index']}" if seen[(r["split"], digest)] > 1 else "")
        if c.heldout == "eval_dataset" and has_eval:
            held = r["split"] == "eval"
        else:  # the prompt's hash; a repeated prompt's row by the hash of its id
            key = digest if row == digest[:12] else hashlib.sha256(row.encode()).hexdigest()
            held = int(key[:8], 16) % 1000 < c.heldout_fraction * 1000
        answer = r.get("reference", r.get("answer"))
        tasks.append(Task(
            task_id=f"verifiers/{c.env_id}/{r['split']}/{row}", suite="verifiers",
            family=c.env_id, difficulty=0, split="heldout" if held else "train", prompt=text,
            kind="verifiers", reference=str(answer) if answer not in (None, "")
            and c.reference == "answer" and c.max_turns == 1 else None,
            payload={"env_id": c.env_id, "env_args": c.env_args, "split": r["split"],
                     "index": r["index"], "prompt_sha": digest,
                     "messages": prompt if isinstance(prompt, list) else []}))
    return tuple(tasks)


@dataclass(frozen=True)
class Turns:
    """A multi-turn episode's state: its task and the policy's replies so far (the sandbox
    rebuilds the environment's own state from them)."""

    task: Task
    replies: tuple[str, ...] = ()


class VerifiersEnv(SingleTurnEnv):
    """A verifiers environment by id, graded by its own rubric in the sandbox."""

    name = "verifiers"
    description = ("a verifiers environment by id (load_environment), graded by its own rubric "
                   "in the sandbox")
    Config = VerifiersOptions
    Payload = VerifiersPayload
    verify_in_batches = True  # one sandbox run loads the environment for a whole batch

    def generate(self) -> list[Task]:
        return list(_generate(self.config.model_dump_json()))

    @property
    def max_turns(self) -> int:  # type: ignore[override]
        return self.config.max_turns

    @property
    def chat_messages(self) -> bool:
        """A multi-turn episode is a conversation in an instruct policy's template: the
        environment's replies are user messages (flows/episodes.py `_renderer`)."""
        return self.config.max_turns > 1

    @property
    def chat_tools(self) -> list[dict]:
        """The environment's tools (a `ToolEnv`'s), as the policy's chat template is shown
        them; read from the listing, which the tasks were made from in this process."""
        if self.config.max_turns == 1:
            return []
        c = self.config
        return list(venv.env_info(c.env_id, c.env_args).get("tools") or [])

    def opening_messages(self, task: Task) -> list[dict] | None:
        """The row's own prompt messages (system, user and a few-shot example's assistant
        turns, as the environment wrote them)."""
        msgs = [{"role": m["role"], "content": str(m["content"])}
                for m in task.payload.get("messages") or []
                if isinstance(m, dict) and m.get("role") in ("system", "user", "assistant")
                and isinstance(m.get("content"), str)]
        return msgs if msgs and msgs[-1]["role"] == "user" else None

    def reset(self, task: Task):
        """A multi-turn episode's first observation: the prompt, with a tool environment's
        tools and their call format as text (a chat renders them from `chat_tools` instead)."""
        if self.max_turns == 1:
            return super().reset(task)
        tools = self.chat_tools
        return Turns(task), task.prompt + ("\n\n" + tools_prompt(tools) if tools else "")

    def step(self, state, action: str | None, ctx: StepContext) -> StepResult:
        """A multi-turn step: the reply is added and the rollout replayed on the replies; the
        environment's next messages, or the rubric's grade when the rollout ends (by itself,
        at the last turn, or for a full context: `action` None)."""
        if self.max_turns == 1:
            return super().step(state, action, ctx)
        t0 = time.perf_counter()
        replies = state.replies + ((action,) if action is not None else ())
        final = action is None or len(replies) >= self.max_turns
        for _ in range(3):  # as Environment.grade: an infrastructure failure is retried
            got = run_turn(state.task, replies, final, ctx.limits, ctx.reward.per_test_timeout_s)
            if got.report is None or not got.report.infra_error:
                break
        wall = time.perf_counter() - t0
        turn = {"turn": len(replies), "action": "reply" if action is not None else "none",
                "calls": [dict(c, turn=len(replies)) for c in got.calls]}
        new = Turns(state.task, replies)
        if got.report is None:
            obs = "\n\n".join(m["content"] for m in got.messages if m["content"])
            return StepResult(new, obs, False, {**turn, "seconds": wall, "wall_s": wall,
                                                "messages": got.messages})
        breakdown = aggregate(got.report, ctx.reward, None)
        # max_turns: the policy's last turn (the environment may have ended there by itself)
        end = "context_full" if action is None else "max_turns" if final else "answer"
        return StepResult(new, "", True, {**turn, "seconds": wall, "wall_s": wall,
                                          "end_reason": end, "grade": breakdown})

    def attacks(self, task: Task) -> list:
        from envs.verifiers.hacks import attacks  # noqa: PLC0415

        return attacks(task)

    def trivial_answers(self, task: Task) -> dict[str, str]:
        return {"empty": "", "prompt_echo": task.prompt}

    def step_budget_s(self, sandbox_timeout_s: float) -> float:
        return venv.LOAD_BUDGET_S + 8 * sandbox_timeout_s + 10.0

    def verify(self, task: Task, answer: str, sandbox: Sandbox, limits: Limits,
               per_test_timeout_s: float) -> TestReport:
        return run_batch([(task, answer)], limits, per_test_timeout_s)[0]

    def verify_batch(self, items: Sequence[tuple[Task, str]], sandbox: Sandbox,
                     limits: Limits, per_test_timeout_s: float) -> list[TestReport]:
        return run_batch(items, limits, per_test_timeout_s)
