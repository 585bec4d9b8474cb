"""Kind `openenv`: an environment served by an OpenEnv (`openenv-core`) environment server, as TRL
plays them: reset, the observation is the prompt, the policy's completion is the action, step,
until the environment says done or the turn limit; the environment's reward is the episode's.

The server is named by the source (envs/openenv/server.py): an address (`url`) or one the run
starts on loopback (`app` or `command`, from the kind's own venv). Its code runs there, in its
own process and venv, never in the flow or a worker; they speak its WebSocket protocol
(envs/openenv/client.py). A task is one set of reset arguments; it carries them and the digest
of the first observation, never a server: a task file cannot make the run start anything.

Episodes are replayed. The loop's state crosses processes by pickle and a group's episodes
share their first state, while a server session is one live connection; so every step opens a
session, resets with the task's arguments, replays the episode's earlier actions, takes the new
one and closes. Each replayed observation must match the digest the episode recorded: an
environment that does not replay (its reset not determined by its arguments, a seed) is not
scored (NaN, infra_error), never scored on another episode than the policy saw. A step costs
as many server steps as the episode has turns so far.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envs.base import EnvError, Environment, StepContext, StepResult, TestReport
from envs.openenv import server
from envs.openenv.client import ActionRefused, Observed, Session, get_json
from rewards.aggregate import RewardConfig, aggregate
from sandbox.base import Limits, Sandbox
from tasks.record import Task


class OpenEnvOptions(BaseModel):
    """Which OpenEnv server a source of kind `openenv` plays, and how text becomes actions."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(None, pattern=r"^(https?|wss?)://[^\s/]+(/\S*)?$", description=
                            "a running server's address (http://host:port); its sessions are "
                            "opened at <url>/ws")
    app: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$", description=
                            "an ASGI app as module:attr (what openenv-core's create_app "
                            "returns), served by uvicorn from the kind's venv on 127.0.0.1")
    command: list[str] | None = Field(None, min_length=1, description="argv of a command that "
                                      "serves on 127.0.0.1:{port} ({port} is replaced), with the "
                                      "kind's venv's bin first on PATH")
    cwd: str | None = Field(None, description="working folder of a started server")
    python_path: list[str] = Field(default_factory=list, description="folders put first on a "
                                   "started server's PYTHONPATH (where `app`'s module lives)")
    start_timeout_s: float = Field(60.0, gt=0, description="seconds a started server has to "
                                   "answer GET /health")
    reset_args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of "
                                       "the environment's reset, for every task")
    seeds: list[int] = Field(default_factory=lambda: list(range(8)), description="one task per "
                             "seed, reset with reset_args and `seed`; empty: one task of "
                             "reset_args alone")
    action: Literal["field", "json"] = Field("field", description="field: the action is "
                                             "{action_field: the policy's text}; json: the text "
                                             "is the action, a JSON object")
    action_field: str = Field("message", min_length=1, description="the action's text field")
    observation_field: str | None = Field(None, description="the observation field shown to "
                                          "the policy; null: its only text field, else the "
                                          "observation as JSON")
    instructions: str = Field("", description="text put before the first observation")
    max_turns: int = Field(1, ge=1, le=64, description="policy turns per episode; the episode "
                           "ends there if the environment has not said done")
    obs_tokens: int = Field(256, ge=16, description="token budget of one observation")
    reward: Literal["last", "sum"] = Field("last", description="the episode's reward: the last "
                                           "step's, or the sum of its steps'")
    reward_range: tuple[float, float] = Field((0.0, 1.0), description="the environment's "
                                              "rewards [low, high], mapped to a score in [0, 1] "
                                              "(clipped); high is a solve")
    timeout_s: float = Field(30.0, gt=0, description="seconds the server has for one message")
    heldout_fraction: float = Field(0.2, ge=0, lt=1, description="share held out, by a hash of "
                                    "the reset arguments")

    @model_validator(mode="after")
    def _one_server(self) -> "OpenEnvOptions":
        named = [k for k in ("url", "app", "command") if getattr(self, k) is not None]
        if len(named) > 1:
            raise ValueError(f"name one server, not {' and '.join(named)}")
        lo, hi = self.reward_range
        if not lo < hi:
            raise ValueError(f"reward_range={list(self.reward_range)}: expected low < high")
        return self


class OpenEnvPayload(BaseModel):
    """The kind's part of a `Task`: the reset arguments and what their first observation was."""

    model_config = ConfigDict(extra="forbid")

    reset_args: dict[str, Any] = Field(default_factory=dict)
    obs_sha: str = Field(pattern=r"^[0-9a-f]{64}$", description="digest of the first "
                         "observation: a replay must see the same")


_FENCED = re.compile(r"\s*```[A-Za-z]*[ \t]*\n(.*?)\n[ \t]*```\s*", re.S)


def sha(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


class NotReplayed(EnvError):
    """A replayed episode saw another observation than it recorded."""


class OpenEnvEnv(Environment):
    """An OpenEnv environment server's episodes; the environment's reward is the reward."""

    name = "openenv"
    description = ("an OpenEnv environment server (an address, or an app or command the run "
                   "starts): reset, step on the policy's text, the environment's reward")
    Config = OpenEnvOptions
    Payload = OpenEnvPayload

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self.max_turns, self.obs_tokens = self.config.max_turns, self.config.obs_tokens

    def step_budget_s(self, sandbox_timeout_s: float) -> float:
        c = self.config
        return c.start_timeout_s + c.timeout_s * (c.max_turns + 1) + 5.0

    # -- the server ----------------------------------------------------------------------
    def url(self) -> str:
        c = self.config
        if c.url:
            return c.url
        if c.app or c.command:
            return server.started(c.app, c.command, c.cwd, c.python_path, c.start_timeout_s).url
        raise EnvError("kind 'openenv': its options name no server: give `url` (a running "
                       "server), `app` (module:attr) or `command` (argv with {port})")

    def session(self) -> Session:
        return Session(self.url(), self.config.timeout_s)

    def text(self, obs: dict[str, Any]) -> str:
        """What the policy sees of an observation."""
        field = self.config.observation_field
        if field is not None:
            if field not in obs:
                raise EnvError(f"kind 'openenv': observation_field={field!r}, but the "
                               f"observation's fields are {sorted(obs)}")
            value = obs[field]
            return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        texts = [v for v in obs.values() if isinstance(v, str)]
        return texts[0] if len(texts) == 1 else json.dumps(obs, sort_keys=True)

    def check_schema(self, url: str) -> None:
        """Refuse, by name, an action_field the environment's action schema does not have."""
        if self.config.action != "field":
            return
        schema = get_json(url, "/schema", self.config.timeout_s).get("action") or {}
        props = sorted(schema.get("properties") or {})
        field = self.config.action_field
        if props and field not in props:
            raise EnvError(f"kind 'openenv': action_field={field!r}, but the environment at "
                           f"{url} takes actions with fields {props}: set `action_field` to "
                           "its text field, or `action: json`")
        missing = sorted(set(schema.get("required") or ()) - {field})
        if missing:
            raise EnvError(f"kind 'openenv': the environment at {url} requires action fields "
                           f"{missing} besides {field!r}: `action: json` lets the policy "
                           "write the whole action")

    # -- tasks ---------------------------------------------------------------------------
    def generate(self) -> list[Task]:
        return list(_generate(self.config.model_dump_json()))

    def _resets(self) -> list[dict[str, Any]]:
        c = self.config
        return [dict(c.reset_args, seed=s) for s in c.seeds] if c.seeds else [dict(c.reset_args)]

    def trivial_answers(self, task: Task) -> dict[str, str]:
        return {"empty": ""}

    def attack_tasks(self) -> list[Task]:
        """None: the kind has no hack suite. The reward is the environment's own verdict on the
        text it was sent, which nothing of rollforge's runs or reads (`action: json` only parses
        it); and `rollforge hacks` with no kind named must not need a server."""
        return []

    # -- an episode ----------------------------------------------------------------------
    def reset(self, task: Task) -> tuple[Any, str]:
        p = OpenEnvPayload.model_validate(task.payload)
        return {"task": task, "actions": (), "rewards": (), "shas": (p.obs_sha,)}, task.prompt

    def action_of(self, text: str) -> dict[str, Any]:
        """The action the policy's text stands for; ValueError when it stands for none."""
        if self.config.action == "field":
            return {self.config.action_field: text}
        fenced = _FENCED.fullmatch(text)  # an instruct model's habit: the object in a fence
        try:
            value = json.loads(fenced.group(1) if fenced else text.strip())
        except ValueError as exc:
            raise ValueError(f"the action is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError(f"the action is JSON {type(value).__name__}, not an object")
        return value

    def step(self, state: Any, action: str | None, ctx: StepContext | None) -> StepResult:
        t0 = time.perf_counter()
        task = state["task"]
        if action is None:
            return self._end(state, "context_full", t0, ctx)
        try:
            act = self.action_of(action)
        except ValueError as exc:
            return self._end(dict(state, refused=("BadAction", str(exc))), "bad_action", t0, ctx)
        try:
            with self.session() as s:
                self._replay(s, task, state)
                got = s.step(act)
        except ActionRefused as exc:  # the policy's action does not fit the schema
            return self._end(dict(state, refused=("ActionRefused", str(exc))), "bad_action",
                             t0, ctx)
        except EnvError as exc:  # the server or the environment failed: not the model
            return self._end(dict(state, infra=f"{type(exc).__name__}: {exc}"), "infra_error",
                             t0, ctx)
        state = dict(state, actions=state["actions"] + (act,),
                     rewards=state["rewards"] + (got.reward,),
                     shas=state["shas"] + (sha(got.observation),))
        if got.done:
            return self._end(state, "done", t0, ctx)
        if len(state["actions"]) >= self.config.max_turns:
            return self._end(state, "max_turns", t0, ctx)
        try:
            obs = self.text(got.observation)
        except EnvError as exc:
            return self._end(dict(state, infra=str(exc)), "infra_error", t0, ctx)
        return StepResult(state, obs, False, {"seconds": time.perf_counter() - t0,
                                              "wall_s": time.perf_counter() - t0})

    def _replay(self, s: Session, task: Task, state: dict) -> Observed:
        p = OpenEnvPayload.model_validate(task.payload)
        got = s.reset(p.reset_args)
        for i, act in enumerate((None,) + state["actions"]):
            if i:
                got = s.step(act)
            if sha(got.observation) != state["shas"][i]:
                raise NotReplayed(
                    f"the environment did not replay the episode: its observation after "
                    f"{'reset' if i == 0 else f'step {i}'} with {p.reset_args} differs from "
                    "the one the episode saw (its reset must be determined by its arguments, "
                    "e.g. a seed)")
        return got

    # -- the grade -----------------------------------------------------------------------
    def report(self, state: dict) -> TestReport:
        """Per-step rewards as named outcomes, the episode's reward as the score."""
        c = self.config
        rewards = [0.0 if r is None else r for r in state["rewards"]]
        names = [f"step {i + 1}: reward {r:g}" for i, r in enumerate(rewards)]
        outcomes: list = ["passed"] * len(rewards)
        errors: tuple[str, ...] = ()
        if "infra" in state:
            return TestReport(tuple(outcomes) + ("error",), ("InfraError",), "infra_error", None,
                              load_error=state["infra"], test_names=tuple(names) + (
                                  f"step {len(rewards) + 1}: {state['infra'][:200]}",))
        if "refused" in state:
            kind, msg = state["refused"]
            names.append(f"step {len(rewards) + 1}: {kind}: {msg[:200]}")
            outcomes.append("error")
            errors = (kind,)
        total = (rewards[-1] if rewards else 0.0) if c.reward == "last" else sum(rewards)
        lo, hi = c.reward_range
        score = min(1.0, max(0.0, (total - lo) / (hi - lo)))
        names.append(f"episode: reward {total:g}")
        outcomes.append("passed" if score >= 1.0 else "failed")
        return TestReport(tuple(outcomes), errors, "ok", None, test_names=tuple(names),
                          score=score)

    def _end(self, state: dict, reason: str, t0: float, ctx: StepContext | None) -> StepResult:
        report = self.report(state)
        grade = aggregate(report, ctx.reward if ctx else RewardConfig())
        seconds = time.perf_counter() - t0
        info = {"seconds": seconds, "wall_s": seconds, "end_reason": reason, "grade": grade,
                "step_rewards": list(state["rewards"])}
        if reason == "context_full":  # no turn was played (the loop counts turns by it)
            info["action"] = "none"
        if "infra" in state:
            info["error"] = state["infra"]
        return StepResult(state, "", True, info)

    def verify(self, task: Task, answer: str, sandbox: Sandbox | None, limits: Limits | None,
               per_test_timeout_s: float) -> TestReport:
        """The answer as the episode's first action, graded where that step leaves it (the
        task check and `rollforge eval`, which grade one completion)."""
        state, _ = self.reset(task)
        return self.report(self.step(state, answer, None).state)


@functools.lru_cache(maxsize=16)
def _generate(options_json: str) -> tuple[Task, ...]:
    env = OpenEnvEnv(json.loads(options_json))
    c = env.config
    url = env.url()
    env.check_schema(url)
    ident = c.url or c.app or " ".join(c.command or [])
    tasks = []
    for args in env._resets():
        try:
            with env.session() as s:
                first = s.reset(args)
        except EnvError as exc:
            raise EnvError(f"kind 'openenv': the environment at {url} ({ident}) did not reset "
                           f"with {args}: {exc}") from None
        obs = env.text(first.observation)
        prompt = f"{c.instructions}\n\n{obs}" if c.instructions else obs
        if not prompt.strip():
            raise EnvError(f"kind 'openenv': the environment at {url} gave an empty first "
                           f"observation with {args}")
        key = sha(args)
        held = int(key[:8], 16) % 1000 < c.heldout_fraction * 1000
        tasks.append(Task(
            task_id=f"openenv/{sha(ident)[:8]}/{key[:12]}", suite="openenv",
            family=ident[:80], difficulty=0, split="heldout" if held else "train",
            prompt=prompt, kind="openenv", reference=None,
            payload={"reset_args": args, "obs_sha": sha(first.observation)}))
    return tuple(tasks)

