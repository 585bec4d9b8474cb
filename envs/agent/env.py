"""Kind `agent`: multi-turn agent episodes over function tasks. The policy writes files, runs
the visible tests, reads the output, fixes, submits; the hidden tests of the task's own kind
grade the workspace's solution.py in a fresh sandbox (envs/agent/episode.py,
envs/agent/EPISODES.md, envs/agent/grading.py). Its options are the run config's `episodes`
section; its own tasks are procedural ones (`procedural`), or a source's task file.
"""
from __future__ import annotations

import functools
import time
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from envs.base import Environment, StepContext, StepResult
from envs.function_task import function_problems
from envs.io import FunctionsEnv, ProceduralOptions
from envs.tools import ToolOptions
from rewards.aggregate import RewardBreakdown
from rewards.outcome import count_ok
from tasks.record import Task


class EpisodeConfig(ToolOptions):
    """The agent kind's options. As the run config's `episodes` section, `enabled` makes the
    run's implicit task source (the `tasks` fields) a source of kind `agent`."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="run G multi-turn episodes per task (the policy "
                          "writes, runs the visible tests, reads the output, fixes, submits) "
                          "instead of G one-shot completions; same group size, GRPO over whole "
                          "episodes with the environment's tokens masked out of the loss")
    max_turns: int = Field(3, ge=1, description="policy turns per episode; at the last one the "
                           "workspace is graded whatever the policy did")
    time_budget_s: float = Field(30.0, gt=0, description="seconds of sandbox time per episode "
                                 "(all its commands together); each command's limit is cut to "
                                 "what is left, and the episode ends when it is spent")
    action_tokens: int = Field(160, ge=8, description="longest action (one turn of the policy), "
                               "in tokens")
    obs_tokens: int = Field(256, ge=32, description="token budget of one observation in the "
                            "policy's context: a longer one keeps whole lines, the ones that say "
                            "what happened (FAIL lines, errors, the verdict, the turn counter) "
                            "before PASS lines and tracebacks, with markers where lines were cut "
                            "(training/episodes.py fit_observation)")
    obs_bytes: int = Field(4096, ge=256, description="hard cap of the environment's observation "
                           "text before the token budget applies")
    intro: Literal["prompt", "brief", "full"] = Field(
        "prompt", description="the first observation: prompt = the task prompt only (for a "
        "small policy warm-started on the action format); brief = instructions + prompt; full = "
        "instructions + prompt + the visible examples (envs/agent/episode.py)")
    shaping: Literal["none", "visible_progress"] = Field(
        "none", description="per-turn shaping added to the final reward: visible_progress = "
        "shaping_coef x (best visible pass fraction reached by any turn's `<run_tests/>`), the sum "
        "of potential-based per-turn gains (Ng et al. 1999), paid only on top of a positive, "
        "unflagged hidden grade (it never makes a zero or flagged episode pay); the fraction is "
        "the environment's own count, never read from the program's output (issue 34); none: "
        "the hidden-test grade alone")
    shaping_coef: float = Field(0.1, ge=0, description="weight of the shaping term")
    sft_demos: bool = Field(True, description="warm start on action-format demonstrations "
                            "instead of bare reference bodies: multi-turn transcripts through the "
                            "real environment for the edge families (naive attempt, real test "
                            "output, fix, submit), write + submit for every other family; with "
                            "action_format=tools the same turns as tool calls in tool_format, "
                            "played through the policy's chat template as RL episodes are "
                            "(flows/warm_start.py `tool_demos`), kept where the hidden tests "
                            "passed")
    demo_first_try_share: float = Field(
        0.25, ge=0, le=1, description="share of edge-family demonstrations whose first attempt "
        "is already right (the visible tests pass and turn 2 only submits), so that the policy "
        "must read the observation to choose between fixing and submitting")

    @model_validator(mode="after")
    def _cross_checks(self) -> "EpisodeConfig":
        if self.shaping != "none" and self.shaping_coef == 0:
            raise ValueError(f"episodes.shaping={self.shaping!r} with shaping_coef=0 does "
                             "nothing; set shaping='none' or a positive coefficient")
        return self


class AgentOptions(EpisodeConfig):
    """A source of kind `agent`: the episode settings and, without a task file, which
    procedural tasks it plays."""

    procedural: ProceduralOptions = ProceduralOptions()


class AgentEnv(Environment):
    name = "agent"
    description = ("multi-turn episodes over function tasks: write, run the visible tests, "
                   "read, fix, submit; the hidden tests grade solution.py")
    Config = AgentOptions

    @property
    def max_turns(self) -> int:  # type: ignore[override]
        return self.config.max_turns

    @property
    def obs_tokens(self) -> int:  # type: ignore[override]
        return self.config.obs_tokens

    def action_tokens(self, default: int) -> int:
        return self.config.action_tokens

    def step_budget_s(self, sandbox_timeout_s: float) -> float:
        return self.config.time_budget_s + 10.0

    @functools.cached_property
    def functions(self) -> FunctionsEnv:
        """The io kind over the same procedural tasks: it draws them and grades a whole answer."""
        return FunctionsEnv(self.config.procedural)

    def generate(self) -> list[Task]:
        return self.functions.generate()

    def sft_tasks(self) -> list[Task]:
        return self.functions.sft_tasks()

    def grade(self, task: Task, answer: str, ctx: StepContext, infra_retries: int = 2):  # noqa: ANN201
        """An answer given whole (`rollforge tasks check`'s reference and trivial answers) is
        graded as an episode's submitted solution.py is: by the io kind's hidden tests
        (envs/agent/grading.py scores it with envs.score.score, which is the io grader)."""
        return self.functions.grade(task, answer, ctx, infra_retries)

    def trivial_answers(self, task: Task) -> dict[str, str]:
        return self.functions.trivial_answers(task)

    def validate(self, task: Task) -> Task:
        problems = function_problems(task)
        if problems:
            raise ValueError("; ".join(problems))
        return task

    def _env(self, ctx: StepContext | None):
        from envs.agent.grading import make_grader  # noqa: PLC0415
        from envs.agent.episode import EpisodeEnv  # noqa: PLC0415

        c = self.config
        sandbox, limits = (ctx.sandbox, ctx.limits) if ctx else (None, None)
        grade = make_grader(ctx.sandbox, ctx.limits, ctx.reward) if ctx else None
        return EpisodeEnv(sandbox, limits, grade, max_turns=c.max_turns,
                          time_budget_s=c.time_budget_s, obs_bytes=c.obs_bytes, intro=c.intro)

    @property
    def tool_kind(self) -> str | None:
        """The kind whose tools (envs/tools.py) this env's episodes use as messages; None:
        text actions in one sequence (flows/episodes.py `play` reads it)."""
        return "agent" if self.config.action_format == "tools" else None

    def reset(self, task: Task) -> tuple[Any, str]:
        env = self._env(None)
        obs = env.reset(task)
        if self.tool_kind:  # the XML instructions would contradict the tools
            obs = _tools_intro(task, self.config)
        return env.state(), obs

    def step(self, state: Any, action: str | None, ctx: StepContext) -> StepResult:
        t0 = time.perf_counter()
        env = self._env(ctx).restore(state)
        calls: dict = {}
        if action is None:
            obs, done, info = "", True, env.end("context_full")
        elif self.tool_kind:
            from envs.tools import call_outcomes, read_turn  # noqa: PLC0415

            turn = read_turn("agent", action, self.config.tool_format)
            obs, done, info = env.step(turn.action, refused=turn.refusal)
            calls = {"calls": call_outcomes(turn, _executed(info), info["turn"])}
        else:
            obs, done, info = env.step(action)
        info = dict(info, **calls)
        info["wall_s"] = time.perf_counter() - t0
        if done:
            info["grade"] = _breakdown(info.get("grade") or {}, state.task)
            info["shaping"] = self.shaping(env.state().history, info["grade"])
        return StepResult(env.state(), obs, done, info)

    def attacks(self, task: Task) -> list:
        from envs.agent.hacks import attacks  # noqa: PLC0415

        return attacks(task)

    def shaping(self, history, grade: RewardBreakdown) -> float:
        """visible_progress: coef x the best visible pass fraction any turn's <run_tests/>
        reached (the telescoped sum of potential-based per-turn gains); 0 when off, and 0
        unless the hidden grade is positive and nothing was flagged: shaping rewards progress
        towards a solution the hidden tests pay for, never a hack or a zero."""
        c = self.config
        if (c.shaping == "none" or grade.hack_flags or grade.infra_error
                or not grade.reward > 0 or any(h.get("hack_flags") for h in history)):
            return 0.0
        fracs = [h["visible_passed"] / h["visible_total"] for h in history
                 if count_ok(h.get("visible_passed"), h.get("visible_total"))]
        return c.shaping_coef * max(fracs, default=0.0)


TOOLS_INTRO = """\
Write the function below into `solution.py` (the whole function, signature included) with the
tools: write it, run the visible tests, read the result, fix it, and submit. The episode ends at
submit, after {max_turns} turns, or after {budget:.0f} s of running time.

{prompt}"""


def _tools_intro(task: Task, c: EpisodeConfig) -> str:
    """The first user message of a tools episode (`intro: full` adds the visible examples)."""
    from envs.agent.episode import truncate  # noqa: PLC0415

    text = TOOLS_INTRO.format(max_turns=c.max_turns, budget=c.time_budget_s, prompt=task.prompt)
    if c.intro == "full" and task.examples:
        text += "\nVisible examples (run_tests checks these):\n" + "".join(
            f"  {task.entry_point}({', '.join(repr(a) for a in ex.args)}) == {ex.expected!r}\n"
            for ex in task.examples)
    return truncate(text, c.obs_bytes)


def _executed(info: dict) -> list[dict]:
    """The outcome of each action a turn ran (envs/tools.py `call_outcomes`), as the episode
    recorded it: a refused write, a program's non-zero exit or kill, a sandbox that did not
    start are `failed`; an action the time budget left out `not_run`; run_tests carries its
    visible counts."""
    return list(info.get("outcomes", []))


def _breakdown(g: dict, task: Task) -> RewardBreakdown:
    """The episode grader's dict as a RewardBreakdown (a missing solution.py is the model's
    failure: reward 0)."""
    import dataclasses  # noqa: PLC0415

    fields = {f.name for f in dataclasses.fields(RewardBreakdown)}
    known = {k: (tuple(v) if isinstance(v, list) else v) for k, v in g.items() if k in fields}
    base = dict(reward=0.0, pass_fraction=0.0, tests_passed=0, tests_total=len(task.tests),
                test_outcomes=(), status="not_graded", error_type=None, hack_flags=(),
                infra_error=False, exec_time_s=0.0)
    return RewardBreakdown(**{**base, **known})
