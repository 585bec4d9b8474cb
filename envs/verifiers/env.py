"""Kind `verifiers`: any environment written for Prime Intellect's `verifiers` package, loaded
as its users load it (`verifiers.load_environment(env_id, **env_args)`), unchanged.

Its dataset's rows are the tasks (the training rows, and its evaluation rows where it has
them), in the split and curriculum machinery like every kind; the answer is graded by the
environment's own rubric, each reward function a named outcome and the rubric's weighted reward
the score (envs/verifiers/grading.py). Everything the environment's code does, loading
included, runs in the sandbox from the kind's own venv (envs/verifiers/venv.py,
envs/verifiers/harness.py), never in the flow or the worker. Single-turn environments
(`SingleTurnEnv` and a rubric); what multi-turn and tool environments would take:
docs/environments.md, "verifiers".
"""
from __future__ import annotations

import functools
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from envs.base import SingleTurnEnv, TestReport
from envs.verifiers import venv
from envs.verifiers.grading import prompt_sha, run_batch
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
    reference: Literal["answer", "none"] = Field(
        "answer", description="answer: the row's answer, as the environment's parser formats "
        "it, is the task's reference (the warm start's target, the task check's solution); "
        "none: the row's answer is no answer (verifiers' ReasoningGymEnv keeps an index there)")


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
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):  # content parts: their text
            content = "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        if content:
            parts.append(str(content))
    return "\n\n".join(parts)


@functools.lru_cache(maxsize=16)
def _generate(options_json: str) -> tuple[Task, ...]:
    c = VerifiersOptions.model_validate_json(options_json)
    rows = venv.rows(c.env_id, c.env_args)
    has_eval = any(r["split"] == "eval" for r in rows)
    tasks = []
    for r in rows:
        if c.max_tasks is not None and r["index"] >= c.max_tasks:
            continue
        prompt = r["prompt"]
        text = prompt_text(prompt)
        if not text.strip():
            continue
        digest = prompt_sha(prompt)
        if c.heldout == "eval_dataset" and has_eval:
            held = r["split"] == "eval"
        else:
            held = int(digest[:8], 16) % 1000 < c.heldout_fraction * 1000
        answer = r.get("reference", r.get("answer"))
        tasks.append(Task(
            task_id=f"verifiers/{c.env_id}/{r['split']}/{digest[:12]}", suite="verifiers",
            family=c.env_id, difficulty=0, split="heldout" if held else "train", prompt=text,
            kind="verifiers", reference=str(answer) if answer not in (None, "")
            and c.reference == "answer" else None,
            payload={"env_id": c.env_id, "env_args": c.env_args, "split": r["split"],
                     "index": r["index"], "prompt_sha": digest,
                     "messages": prompt if isinstance(prompt, list) else []}))
    return tuple(tasks)


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
