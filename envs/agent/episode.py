"""Multi-turn agent episodes: the model edits files, runs the visible tests, reads the errors,
tries again, and submits.

`EpisodeEnv` has a gym-like interface (`reset(task) -> observation`,
`step(action_text) -> (observation, done, info)`). The episode's workspace is a dict
path -> content held here; every command runs in a *fresh* sandbox execution over those files
and the files it changed or made are read back, so no sandbox outlives a turn and nothing leaks
when an episode ends or fails. That is how "one sandbox for the whole episode" is realised: the
workspace persists across turns, the processes do not. It also makes the whole episode a small
plain value (`EpisodeState`): `state()` / `from_state()` move it between processes, so any
worker of a cluster can run any episode's next step. The final grade is an injected
`grade(task, files, flags) -> dict` (see `envs/agent/grading.py`). The action format is
documented in `envs/agent/EPISODES.md`.

Reward integrity (issue 34): nothing the candidate's processes print is read as a verdict. The
visible count of `<run_tests/>` is the environment's own, from values that come back on a
channel authenticated by a per-run nonce (envs/agent/scripts.py); the files a `<run>`
leaves come back through a manifest whose every entry is checked. What imitates the
environment (a forged record or count line, a manifest entry the runner never writes, a
program printing the environment's verdict) raises a flag in the turn's `info["hack_flags"]`,
and the episode's flags go to the grader, which pays a flagged episode no credit.
"""
from __future__ import annotations

import dataclasses
import json
import re
import secrets
import shlex
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping

from envs.agent.scripts import CHECK_SOURCE as _CHECK_SOURCE
from envs.agent.scripts import CHECK_NO_START, IMITATION, read_visible
from envs.agent.scripts import RUN_SOURCE as _RUN_SOURCE
from envs.tools import outcome, tool_results
from sandbox.base import ExecResult, Limits, Sandbox
from sandbox.fork_server import trust_script
from sandbox.workspace import check_relpath

Grader = Callable[[Any, Mapping[str, str], tuple[str, ...]], dict]  # (task, files, flags)
trust_script(_CHECK_SOURCE)  # the env's own helper programs: zygotes may keep them compiled

_RESERVED = "_episode_"  # prefix of the env's own helper files; the agent may not write them
_MANIFEST = "_episode_files.json"
_MAX_FILES = 32
_MAX_WORKSPACE_BYTES = 512 * 1024

INSTRUCTIONS = """\
You are working in a small workspace. Write the function below into `solution.py` (the whole
function, signature included), check it, and submit. Each turn, reply with one or more actions;
text outside actions is ignored. Actions run in order:

<write path="solution.py">
...file content...
</write>                      create or replace a file
<run_tests/>                  run the visible examples against solution.py
<run>python FILE.py ARGS</run>  run a Python file of the workspace
<submit/>                     end the episode; hidden tests grade solution.py (must be last)

The episode ends at <submit/>, after {max_turns} turns, or after {budget:.0f} s of running time.
"""

Intro = Literal["full", "brief", "prompt"]


@dataclass(frozen=True)
class EpisodeState:
    """Everything an episode in progress is: picklable, a few KB (the workspace's text files)."""

    task: Any  # tasks.record.Task
    files: dict[str, str]
    turn: int = 0
    used_s: float = 0.0
    done: bool = False
    history: tuple[dict, ...] = ()


_ACTION = re.compile(
    r'<write\s+path\s*=\s*"(?P<path>[^"]*)"\s*>(?P<body>.*?)</write>'
    r"|<run_tests\s*/>"
    r"|<run>(?P<cmd>.*?)</run>"
    r"|<submit\s*/>",
    re.S,
)
_STRAY = re.compile(r"</?(write|run_tests|run|submit)\b[^>]*>?")


@dataclass(frozen=True)
class Action:
    kind: str  # "write" | "run_tests" | "run" | "submit"
    path: str = ""
    body: str = ""
    argv: tuple[str, ...] = ()


class ActionError(ValueError):
    """The agent's text could not be read as actions; the message is shown to it."""


def _strip_fence(body: str) -> str:
    if body.startswith("\n"):
        body = body[1:]
    m = re.fullmatch(r"\s*```[\w+-]*\n(.*?)\n?```\s*", body, re.S)
    return m.group(1) + "\n" if m else body


def parse_actions(text: str, files: Mapping[str, str]) -> list[Action]:
    """The actions in `text`, in order; raise `ActionError` saying what is wrong, if anything."""
    actions: list[Action] = []
    pos = 0
    for m in _ACTION.finditer(text):
        _check_gap(text[pos:m.start()])
        pos = m.end()
        tag = m.group(0)
        if tag.startswith("<write"):
            path = m.group("path").strip()
            try:
                path = check_relpath(path)
            except ValueError as exc:
                raise ActionError(f"<write path={path!r}>: {exc}")
            if path.startswith(_RESERVED):
                raise ActionError(f"<write path={path!r}>: names starting with {_RESERVED!r} are "
                                  "reserved for the environment")
            actions.append(Action("write", path=path, body=_strip_fence(m.group("body"))))
        elif tag.startswith("<run_tests"):
            actions.append(Action("run_tests"))
        elif tag.startswith("<run>"):
            actions.append(Action("run", argv=_check_command(m.group("cmd"), files, actions)))
        else:
            actions.append(Action("submit"))
    _check_gap(text[pos:])
    if not actions:
        raise ActionError("no action found; expected at least one of <write path=\"...\">...</write>, "
                          "<run_tests/>, <run>python FILE.py</run>, <submit/>")
    if any(a.kind == "submit" for a in actions[:-1]):
        raise ActionError("<submit/> must be the last action of the turn")
    return actions


def _check_gap(gap: str) -> None:
    m = _STRAY.search(gap)
    if m:
        raise ActionError(f"could not read {m.group(0)!r}: expected <write path=\"FILE\">...</write>"
                          ", <run_tests/>, <run>python FILE.py</run> or <submit/> (is a closing "
                          "tag missing?)")


def _check_command(cmd: str, files: Mapping[str, str], earlier: list[Action]) -> tuple[str, ...]:
    try:
        argv = shlex.split(cmd)
    except ValueError as exc:
        raise ActionError(f"<run>{cmd}</run>: cannot split the command: {exc}")
    if len(argv) < 2 or argv[0] not in ("python", "python3") or not argv[1].endswith(".py"):
        raise ActionError(f"<run>{cmd}</run>: only `python FILE.py [ARGS...]` is allowed")
    try:
        target = check_relpath(argv[1])
    except ValueError as exc:
        raise ActionError(f"<run>{cmd}</run>: {exc}")
    if target not in files and not any(a.kind == "write" and a.path == target for a in earlier):
        raise ActionError(f"<run>{cmd}</run>: no file {target!r} in the workspace "
                          f"(files: {sorted(files)})")
    return (target, *argv[2:])


def truncate(text: str, max_bytes: int) -> str:
    """`text` cut to `max_bytes` UTF-8 bytes, with a marker that says so."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    marker = f"\n...[truncated: {len(data)} bytes, showing the first {{}}]\n"
    keep = max(0, max_bytes - len(marker.format(max_bytes).encode()))
    return data[:keep].decode(errors="ignore") + marker.format(keep)


class EpisodeEnv:
    """One agent episode at a time over a task; see the module docstring."""

    def __init__(self, sandbox: Sandbox | None, limits: Limits, grade: Grader | None,
                 max_turns: int = 8, time_budget_s: float = 60.0, obs_bytes: int = 4096,
                 intro: Intro = "full") -> None:
        """`intro` is the first observation: "full" = instructions, the prompt and every visible
        example; "brief" = instructions and the prompt (the visible examples only through
        `<run_tests/>`); "prompt" = the task prompt alone (a small policy trained on the action
        format needs no instructions). `sandbox`/`grade` may be None where only `reset` runs."""
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns!r}")
        if time_budget_s <= 0:
            raise ValueError(f"time_budget_s must be > 0, got {time_budget_s!r}")
        if intro not in ("full", "brief", "prompt"):
            raise ValueError(f"intro must be 'full', 'brief' or 'prompt', got {intro!r}")
        if obs_bytes < 256:
            raise ValueError(f"obs_bytes must be >= 256 (room for an error message), "
                             f"got {obs_bytes!r}")
        self.sandbox, self.limits, self.grade = sandbox, limits, grade
        self.max_turns, self.time_budget_s, self.obs_bytes = max_turns, time_budget_s, obs_bytes
        self.intro = intro
        self.task: Any = None
        self.files: dict[str, str] = {}
        self.turn = 0
        self.done = True
        self.used_s = 0.0  # seconds spent in steps so far (the time budget counts these)
        self.history: list[dict] = []

    def reset(self, task: Any) -> str:
        """Start an episode on `task` (a `tasks.record.Task`); return the first observation."""
        self.task = task
        self.files = {"solution.py": task.prompt}
        self.turn, self.used_s, self.done, self.history = 0, 0.0, False, []
        if self.intro == "prompt":
            return task.prompt
        examples = "".join(f"  {task.entry_point}({', '.join(repr(a) for a in ex.args)}) == "
                           f"{ex.expected!r}\n" for ex in task.examples) or "  (none)\n"
        if self.intro == "brief":
            examples = f"  {len(task.examples)} (run <run_tests/> to see them)\n"
        obs = (INSTRUCTIONS.format(max_turns=self.max_turns, budget=self.time_budget_s)
               + f"\nTask: implement `{task.entry_point}` in solution.py.\n\n{task.prompt}\n"
               + f"Visible examples (<run_tests/> checks these):\n{examples}"
               + "solution.py now holds the prompt above.\n")
        return truncate(obs, self.obs_bytes)

    def state(self) -> EpisodeState:
        """The episode as a plain value (see `from_state`)."""
        return EpisodeState(self.task, dict(self.files), self.turn, self.used_s, self.done,
                            tuple(self.history))

    def restore(self, state: EpisodeState) -> "EpisodeEnv":
        """Continue the episode `state` in this env (its sandbox, limits, grader, settings)."""
        self.task, self.files, self.turn = state.task, dict(state.files), state.turn
        self.used_s, self.done, self.history = state.used_s, state.done, list(state.history)
        return self

    def end(self, reason: str) -> dict:
        """End the episode now without an action (e.g. the policy's context is full): grade the
        workspace as it is. Returns the closing info (as the last `step` would)."""
        if self.task is None or self.done:
            raise RuntimeError("end() needs an episode in progress: call reset(task) first")
        info: dict = {"turn": self.turn, "actions": [], "infra_error": False, "seconds": 0.0,
                      "action": "none"}
        self._close(reason, info)
        self.history.append(info)
        return info

    def _close(self, reason: str, info: dict) -> str:
        self.done = True
        info["end_reason"] = reason
        flags = tuple(dict.fromkeys(f for h in [*self.history, info]
                                    for f in h.get("hack_flags", ())))
        grade = self.grade(self.task, dict(self.files), flags)
        info["grade"] = grade
        info["reward"] = grade.get("reward")
        return f"Episode over ({reason}). Final reward: {grade.get('reward')!r}."

    def step(self, action_text: str, refused: str | None = None) -> tuple[str, bool, dict]:
        """Run a turn's actions. `refused`: the turn's actions came as tool calls and some could
        not be read (envs/tools.py); the turn is then malformed with that reason, as a
        malformed action is, and nothing of it runs."""
        if self.task is None or self.done:
            raise RuntimeError("step() needs an episode in progress: call reset(task) first")
        start = time.monotonic()
        self.turn += 1
        # `outcomes`: what each action the turn ran did (envs/tools.py `outcome`), in order
        info: dict = {"turn": self.turn, "actions": [], "outcomes": [], "infra_error": False}
        parts: list[str] = []
        submitted = False
        try:
            if refused is not None:
                raise ActionError(refused)
            actions = parse_actions(action_text, self.files)
        except ActionError as exc:
            info["action"] = "malformed"
            parts.append(f"Malformed action: {exc}")
        else:
            info["action"] = actions[0].kind
            info["actions"] = [a.kind for a in actions]
            for a in actions:
                if a.kind == "submit":
                    submitted = True
                    info["outcomes"].append(outcome("ran"))
                    break
                text, done = self._do(a, start, info)
                parts.append(text)
                info["outcomes"].append(done)
        info["seconds"] = time.monotonic() - start
        self.used_s += info["seconds"]
        reason = ("submit" if submitted else "max_turns" if self.turn >= self.max_turns
                  else "time_budget" if self.used_s >= self.time_budget_s else None)
        if reason:
            parts.append(self._close(reason, info))
        else:
            left = self.max_turns - self.turn
            parts.append(f"[turn {self.turn}/{self.max_turns}; {left} left]")
        # one text per action, for a chat's tool messages (a tool call each: envs/CHAT.md)
        info["tool_results"] = tool_results(parts, self.obs_bytes, truncate)
        self.history.append(info)
        return truncate("\n".join(parts), self.obs_bytes), self.done, info

    # -- actions --------------------------------------------------------------------------
    def _do(self, a: Action, start: float, info: dict) -> tuple[str, dict]:
        """Run one action: its text for the observation and its outcome."""
        if a.kind == "write":
            return self._write(a)
        remaining = self.time_budget_s - self.used_s - (time.monotonic() - start)
        if remaining <= 0:
            return (f"<{a.kind}> skipped: the episode's time budget is spent",
                    outcome("not_run", "the episode's time budget is spent"))
        limits = dataclasses.replace(self.limits, timeout_s=min(self.limits.timeout_s,
                                                                  max(remaining, 0.1)))
        if a.kind == "run_tests":
            if not self.task.examples:
                return ("Visible tests: this task shows none; check your own calls with <run>.",
                        outcome("failed", "this task shows no visible tests"))
            return self._run_tests(limits, info)
        res = self._run(a.argv, limits, info)
        head = "$ python " + " ".join(shlex.quote(x) for x in a.argv)
        if res.infra_error:
            return _infra(head, res, info)
        if IMITATION.search(res.stdout) or IMITATION.search(res.stderr):
            _flag(info, "fake_success_report")  # the environment's verdict, printed by a program
        return _describe(head, res), (outcome("ran") if res.status == "ok"
                                      else outcome("failed", _status_label(res)))

    def _write(self, a: Action) -> tuple[str, dict]:
        size = len(a.body.encode())
        total = size + sum(len(v.encode()) for k, v in self.files.items() if k != a.path)
        if total > _MAX_WORKSPACE_BYTES:
            why = f"refused, the workspace would hold {total} bytes (limit {_MAX_WORKSPACE_BYTES})"
        elif a.path not in self.files and len(self.files) >= _MAX_FILES:
            why = f"refused, the workspace already holds {_MAX_FILES} files"
        else:
            self.files[a.path] = a.body
            return f"wrote {a.path} ({size} bytes)", outcome("ran")
        return f"write {a.path}: {why}", outcome("failed", why)

    def _run_tests(self, limits: Limits, info: dict) -> tuple[str, dict]:
        """The visible examples' arguments go into the sandbox, their values come back with the
        run's nonce (sent on stdin, known to no file) and are compared here."""
        files = dict(self.files)
        files["_episode_check.py"] = _CHECK_SOURCE
        files["_episode_examples.json"] = json.dumps([list(ex.args) for ex in self.task.examples])
        nonce = secrets.token_hex(16)
        res = self.sandbox.run(files, ["python", "_episode_check.py", self.task.entry_point,
                                       str(limits.output_bytes // 2)],
                               limits, stdin=(nonce + "\n").encode())
        head = "Visible tests"
        if res.status == "failed" and res.exit_code == CHECK_NO_START and not res.stdout:
            res = dataclasses.replace(res, status="infra_error", error=res.stderr.strip())
        if res.infra_error:
            return _infra(head, res, info)
        seen = read_visible(res, nonce, self.task.entry_point, self.task.examples)
        for name in seen.flags:
            _flag(info, name)
        if not seen.flags:  # the last run_tests of the turn counts (shaping)
            info["visible_passed"], info["visible_total"] = seen.passed, seen.total
        out = [head + (f" [{_STATUS[res.status]}]" if res.status in _KILLED else ""), *seen.lines]
        if res.stderr.strip():
            out += ["output:", res.stderr.rstrip()]
        done = (outcome("failed", "flagged: " + ", ".join(seen.flags)) if seen.flags
                else outcome("ran", _STATUS.get(res.status, ""), seen.passed, seen.total))
        return "\n".join(out + [f"{seen.passed}/{seen.total} visible examples passed"]), done

    def _run(self, argv: tuple[str, ...], limits: Limits, info: dict) -> ExecResult:
        cap = min(limits.output_bytes, 64 * 1024)
        files = dict(self.files)
        files["_episode_run.py"] = source = _RUN_SOURCE % {"cap": cap}
        trust_script(source)
        res = self.sandbox.run(files, ["python", "_episode_run.py", *argv], limits,
                               collect=[_MANIFEST])
        if res.infra_error:
            return res
        raw = res.files.get(_MANIFEST)
        if raw is not None:
            files, forged = read_manifest(raw, cap)
            if forged:  # the runner writes it whole (os.replace) or not at all: the program did
                _flag(info, "forged_record")
            if files is not None:
                self.files = files
        return res


def read_manifest(raw: str, cap: int) -> tuple[dict[str, str] | None, bool]:
    """The workspace a `<run>` left, from its manifest (None: keep the files as they were), and
    whether the manifest holds what the runner never writes (not a JSON object of texts, a path
    outside the workspace or not normalised, an `_episode_` name): the program wrote it. Entries
    are kept within the workspace's limits; a file over `cap` is dropped, as the runner does."""
    try:
        got = json.loads(raw)
    except ValueError:
        return None, True
    if not isinstance(got, dict) or not all(isinstance(v, str) for v in got.values()):
        return None, True
    kept: dict[str, str] = {}
    size, forged = 0, False
    for rel, text in got.items():
        try:
            ok = check_relpath(rel) == rel and not rel.startswith(_RESERVED)
        except ValueError:
            ok = False
        if not ok:
            forged = True
            continue
        nbytes = len(text.encode())
        if len(text) <= cap and len(kept) < _MAX_FILES and size + nbytes <= _MAX_WORKSPACE_BYTES:
            kept[rel] = text
            size += nbytes
    return kept, forged


def _flag(info: dict, name: str) -> None:
    if name not in info.setdefault("hack_flags", []):
        info["hack_flags"].append(name)


def _infra(head: str, res: ExecResult, info: dict) -> tuple[str, dict]:
    info["infra_error"] = True
    return (f"{head}: the sandbox failed to start (not your code's fault; try again): {res.error}",
            outcome("failed", "the sandbox failed to start"))


_STATUS = {"timeout": "killed: time limit", "memory_exceeded": "killed: memory limit",
           "output_truncated": "output over the limit"}
_KILLED = tuple(_STATUS)


def _status_label(res: ExecResult) -> str:
    return {"ok": "exit 0", "failed": f"exit {res.exit_code}", **_STATUS}.get(res.status,
                                                                              res.status)


def _describe(head: str, res: ExecResult) -> str:
    out = [f"{head} [{_status_label(res)}]"]
    if res.stdout.strip():
        out.append(res.stdout.rstrip())
    if res.stderr.strip():
        out.append("stderr:\n" + res.stderr.rstrip())
    return "\n".join(out)
