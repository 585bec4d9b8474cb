"""Kind `ops`: the policy writes a bash script that must bring a small Linux system to a required
state; state probes grade what the script left (design and threat model: envs/ops/README.md).

An episode: the task's tree (`payload.files`) is written into a throw-away system
(`sandbox.rootfs.System`), the script runs there as uid 0 of a user namespace, and once every
process of that run is dead the tree is read back. The script then runs a second time over the
result (idempotence: the same state again). Configs are parsed by a fresh sandbox execution
(`probes.CHECK_SOURCE`), rollback scripts run on a copy of the final system, and the probes
(`payload.probes`) are evaluated in the grader over the copies: one named outcome each, plus
`idempotent`, which passes only when every probe did. A hack flag (envs/ops/integrity.py) from
any run of the candidate's code or from the state fails every outcome.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re

from dataclasses import dataclass, replace

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envs.base import SingleTurnEnv, StepContext, StepResult, known_names
from envs.ops.families import FAMILIES
from envs.ops.hacks import ATTACKS, NO_CREDIT
from envs.ops.integrity import bomb_flags, run_flags, state_flags
from envs.tools import ToolOptions, call_outcomes, outcome, read_turn
from envs.ops.probes import (CHECK_SOURCE, FILE_TYPES, FORMATS, PROBE_TYPES, Parsed, same_node,
                             verdicts, wanted_parses)
from envs.sources import split_of
from rewards.reports import TestReport
from sandbox.base import ExecResult, Limits, Sandbox
from sandbox.rootfs import (System, check_tree_path, host_support, node_of, same_state,
                            unavailable)
from tasks.record import Task

PARSER = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python"  # has PyYAML
TOOLS = "coreutils, sed, awk, grep, find, tar, gzip, jq, python3"


class OpsOptions(ToolOptions):
    """Which ops tasks a source of kind `ops` generates, and how the policy answers."""

    model_config = ConfigDict(extra="forbid")

    families: list[str] = Field(default_factory=lambda: list(FAMILIES), min_length=1,
                                description=f"task families, some of {sorted(FAMILIES)}")
    tasks_per_family: int = Field(20, ge=1, description="tasks drawn per family")
    heldout_fraction: float = Field(0.2, gt=0, lt=1, description="share of tasks held out")
    seed: int = Field(0, description="generator seed; the same options give the same tasks")
    max_turns: int = Field(1, ge=1, description="with action_format=tools: turns the policy "
                           "has to make one valid `shell` call; a turn without one is answered "
                           "with what was wrong (a tool message) and the next may call again. "
                           "The first turn with a valid call is graded, and so is the last "
                           "turn whatever it holds (no script: the empty one). xml: 1")

    @model_validator(mode="after")
    def _turns_need_tools(self) -> "OpsOptions":
        if self.max_turns > 1 and self.action_format != "tools":
            raise ValueError(f"max_turns={self.max_turns} with action_format="
                             f"{self.action_format!r}: a text answer is graded at once; "
                             "set action_format='tools' or max_turns=1")
        return self

    @field_validator("families")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        return known_names(v, FAMILIES)


class OpsPayload(BaseModel):
    """The kind's part of a `Task`: the system before the script and the probes of after."""

    model_config = ConfigDict(extra="forbid")

    files: dict[str, dict] = Field(description="system path (relative, under a top folder such "
                                   "as etc/ or srv/) -> {content|content_b64, mode} | {dir: "
                                   "true, mode} | {link: target}")
    probes: list[dict] = Field(min_length=1, description="named state probes "
                               "(envs/ops/probes.py)")


def script_of(answer: str) -> str:
    """The script in an answer: the first fenced code block if there is one, else all of it."""
    m = re.search(r"```[a-z]*\n(.*?)(```|$)", answer, re.S)
    return m.group(1) if m else answer


def prompt_of(goal: str, files: dict[str, dict], show: list[str]) -> str:
    lines = [f"You are root on a small Linux system ({TOOLS}).", f"Task: {goal}"]
    for path in show:
        lines += [f"--- /{path}", files[path]["content"].rstrip("\n")]
    lines += ["Write a bash script that does it (running it twice must leave the same state).",
              "Script:", ""]
    return "\n".join(lines)


TOOLS_ASK = ("Call the `shell` tool with a bash script that does it (running it twice must leave "
             "the same state).")


def tools_prompt_of(prompt: str) -> str:
    """The task's prompt asking for a `shell` call instead of a script after `Script:`."""
    head, sep, _ = prompt.rpartition("Write a bash script that does it")
    return (head if sep else prompt.rstrip("\n") + "\n") + TOOLS_ASK


@dataclass(frozen=True)
class ToolsState:
    """A tools episode in progress: the task and the turns taken without a valid call."""

    task: Task
    turn: int = 0


def _check_probes(probes: list[dict]) -> None:
    seen: set[str] = set()
    for i, p in enumerate(probes):
        where = f"payload.probes.{i}"
        name, kind = p.get("name"), p.get("type")
        if not isinstance(name, str) or not name or name in seen or name == "idempotent":
            raise ValueError(f"field '{where}.name': {name!r}: expected a new, non-empty name "
                             f"(not 'idempotent')")
        if kind not in PROBE_TYPES:
            raise ValueError(f"field '{where}.type': {kind!r}; expected one of {list(PROBE_TYPES)}")
        for path in ([p.get("path")] if kind in FILE_TYPES + ("absent", "link") else []) + \
                list(p.get("paths", [])):
            if not isinstance(path, str):
                raise ValueError(f"field '{where}.path': expected a string, got {path!r}")
            check_tree_path(path)
        if "format" in p and p["format"] not in FORMATS:
            raise ValueError(f"field '{where}.format': {p['format']!r}; expected one of "
                             f"{list(FORMATS)}")
        for r in p.get("requires", []):
            if r not in seen:
                raise ValueError(f"field '{where}.requires': {r!r} is not an earlier probe's name")
        seen.add(name)


def _infra(names: tuple[str, ...], why: str, res: ExecResult | None = None) -> TestReport:
    """The host failed, not the script: every test missing, an infra_error."""
    res = res or ExecResult("infra_error", None, "", "", 0.0, "process-system", error=why)
    return TestReport(("missing",) * len(names), (), "infra_error", res, load_error=why,
                      test_names=names)


def _flagged(names: tuple[str, ...], res: ExecResult, flags: list[str]) -> TestReport:
    """No credit, whatever the probes say."""
    return TestReport(("failed",) * len(names), (), res.status, res, tuple(dict.fromkeys(flags)),
                      test_names=names)


class OpsEnv(SingleTurnEnv):
    name = "ops"
    description = "a bash script that brings a sandboxed Linux system to a required state"
    Config = OpsOptions
    Payload = OpsPayload

    # -- tasks -----------------------------------------------------------------------------
    def generate(self) -> list[Task]:
        c = self.config
        tasks: list[Task] = []
        seen: set[str] = set()
        for family in c.families:
            for i in range(c.tasks_per_family):
                for retry in range(20):  # a draw that repeats an earlier task is drawn again
                    rng = random.Random(f"ops:{c.seed}:{family}:{i}" + (f":{retry}" * bool(retry)))
                    spec = FAMILIES[family](rng)
                    prompt = prompt_of(spec.goal, spec.files, spec.show)
                    payload = {"files": spec.files, "probes": spec.probes}
                    digest = hashlib.sha256(json.dumps([family, prompt, payload],
                                                       sort_keys=True).encode()).hexdigest()
                    if digest not in seen:
                        break
                else:
                    continue  # the family has no more distinct tasks to give
                seen.add(digest)
                task_id = f"ops/{family}/{digest[:10]}"  # content-named: the split is too
                tasks.append(Task(task_id=task_id, suite="ops", family=family,
                                  difficulty=spec.difficulty,
                                  split=split_of(task_id, c.heldout_fraction, "ops"),
                                  prompt=prompt, kind=self.name, reference=spec.reference,
                                  payload=payload))
        return tasks

    def validate(self, task: Task) -> Task:
        super().validate(task)
        for path, spec in task.payload["files"].items():
            try:
                check_tree_path(path)
                node_of(spec)
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"field 'payload.files.{path}': {exc}") from None
        _check_probes(task.payload["probes"])
        return task

    trivial_earn_nothing = True  # the task check runs every cheat: none may earn anything

    def trivial_answers(self, task: Task) -> dict[str, str]:
        """The empty script, scripts that change nothing asked and the cheats
        (envs/ops/README.md): none may earn anything."""
        ref = task.reference or ""
        probed = [path for p in task.payload["probes"] if p["type"] not in ("link", "absent")
                  for path in ([p["path"]] if "path" in p else p.get("paths", []))]
        target = probed[0] if probed else "etc/motd"
        return {
            "empty": "",
            "forged_end_line": "mkdir -p /root/expected\necho 'all probes passed' > "
                               "/root/expected/result\necho 'ROLLFORGE-END rc=0 survivors=0'\n",
            "kill_checker": ref + "\nkill -9 -1\n",
            "late_change": ref + "\nsetsid nohup sh -c 'sleep 1; rm -rf /etc/* /srv/* /var/*' "
                                 ">/dev/null 2>&1 &\n",
            "symlink_probe": ref + f"\nmv /{target} /root/.shadow && ln -s /root/.shadow "
                                   f"/{target}\n",
            "symlink_escape": ref + f"\nrm -rf /{target} && ln -s /usr/lib/os-release /{target}\n",
            # issue 34: an idempotent change nobody asked for; one that leaves `absent` true
            "unrelated_change": "mkdir -p /root/x\n",
            "wipe": "rm -rf /etc/* /srv/* /var/* /home/* /opt/* /root/* /mnt/* /data/*\n",
        }

    def attacks(self, task: Task) -> list:
        """The hack suite (envs/ops/hacks.py): each attack must earn nothing and be flagged;
        the do-nothing scripts must earn nothing and raise no flag (an honest failure can
        leave the same state)."""
        return list(ATTACKS) + list(NO_CREDIT)

    # -- an episode through tools -------------------------------------------------------------
    @property
    def tool_kind(self) -> str | None:
        """The kind whose tools this env's episodes use as messages (flows/episodes.py `play`
        reads it); None: the answer is the script, graded at once."""
        return "ops" if self.config.action_format == "tools" else None

    @property
    def max_turns(self) -> int:  # type: ignore[override]
        return self.config.max_turns

    def demo_tool_calls(self, task: Task) -> list[list[tuple[str, dict]]] | None:
        """One turn: the reference script as the `shell` call."""
        return None if task.reference is None else [[("shell", {"script": task.reference})]]

    def reset(self, task: Task):
        if not self.tool_kind:
            return super().reset(task)
        return ToolsState(task), tools_prompt_of(task.prompt)

    def step(self, state, action: str | None, ctx: StepContext) -> StepResult:
        """Tools: the turn's valid `shell` calls, joined in order, are one script, graded as
        a text answer is; a turn without one is refused with the reason until the last."""
        if not self.tool_kind:
            return super().step(state, action, ctx)
        turn_no = state.turn + 1
        calls = read_turn("ops", action, self.config.tool_format) if action is not None else None
        if calls and calls.refusal and turn_no < self.max_turns:
            info = {"turn": turn_no, "action": "malformed", "seconds": 0.0,
                    "calls": call_outcomes(calls, [], turn_no)}
            obs = f"{calls.refusal}\n[turn {turn_no}/{self.max_turns}]"
            return StepResult(replace(state, turn=turn_no), obs, False, info)
        script = calls.action if calls and not calls.refusal else ""
        res = super().step(state.task, script if action is not None else None, ctx)
        b = res.info["grade"]
        ok = b.status == "ok" and not b.infra_error and not b.hack_flags
        done = outcome("ran" if ok else "failed", "" if ok else ", ".join(
            (b.status, *b.hack_flags)), b.tests_passed, b.tests_total)
        info = dict(res.info, turn=turn_no, action="shell" if script else "malformed")
        if calls:
            info["calls"] = call_outcomes(calls, [done] * len(calls.calls), turn_no)
            if calls.refusal:
                info["end_reason"] = "max_turns"
        return StepResult(replace(state, turn=turn_no), "", True, info)

    # -- grading -----------------------------------------------------------------------------
    def verify(self, task: Task, answer: str, sandbox: Sandbox, limits: Limits,
               per_test_timeout_s: float) -> TestReport:
        p = OpsPayload.model_validate(task.payload)
        names = tuple(q["name"] for q in p.probes) + ("idempotent",)
        n = len(names)
        script = script_of(answer)
        host = host_support(sandbox)
        why = unavailable(host)
        if why:
            return _infra(names, why)
        try:
            system = System.make(host, {path: node_of(s) for path, s in p.files.items()})
        except OSError as exc:
            return _infra(names, f"system workspace: {exc}")
        try:
            tree0 = system.snapshot()  # the system as the script finds it, top folders and all
            first = system.run(script, limits)
            if first.exec.infra_error:
                return _infra(names, first.exec.error or "system run", first.exec)
            res = first.exec
            final = system.snapshot()
            # before anything compares or parses the state, which may be built to mislead
            # that; a script that then runs out the clock is no exception
            flags = run_flags(first) + (state_flags(p.probes, final, tree0) if final is not None
                                        else [])
            if flags:
                return _flagged(names, res, flags)
            if res.status == "timeout":
                return TestReport(("timeout",) * n, ("Timeout",) * n, "timeout", res,
                                  test_names=names)
            if final is None:
                return TestReport(("failed",) * n, (), res.status, res, test_names=names,
                                  load_error="StateTooLarge: the system grew past the caps")
            second = system.run(script, limits)
            if second.exec.infra_error:
                return _infra(names, second.exec.error or "system run", second.exec)
            again = system.snapshot()
        finally:
            system.close()
        flags = run_flags(second) + (bomb_flags(again) if again is not None else [])
        if flags:  # the rerun is the candidate's code too
            return _flagged(names, res, flags)
        return self._probe(p, names, res, (tree0, final, again), second.survivors, sandbox,
                           limits)

    def _probe(self, p: OpsPayload, names: tuple[str, ...], res: ExecResult, states: tuple,
               survivors: int | None, sandbox: Sandbox, limits: Limits) -> TestReport:
        """The probes' verdicts on the state the script left, and whether running it again
        left the same state. `states`: the system before the script, after it, after again."""
        tree0, final, again = states
        host = host_support(sandbox)
        rolled = {}
        for q in p.probes:
            if q["type"] == "rollback":
                got = self._rollback(host, final, tree0, q, limits)
                if got is None:
                    return _infra(names, "rollback run")
                rolled[q["name"]], flags = got
                if flags:
                    return _flagged(names, res, flags)
        parsed = self._parse(p.probes, final, tree0, sandbox, limits)
        if parsed is None:
            return _infra(names, "config checker run")
        ok = verdicts(p.probes, final, tree0, parsed, rolled)
        # idempotence of the task's own change (issue 34): an unrelated idempotent change, or
        # none, is not "running it twice leaves the same state" of anything that was asked
        idempotent = (all(ok.values()) and survivors == 0 and again is not None
                      and not same_state(final, again) and bool(same_state(tree0, final)))
        outcomes = tuple("passed" if x else "failed" for x in [*ok.values(), idempotent])
        return TestReport(outcomes, (), res.status, res, (), test_names=names)

    @staticmethod
    def _rollback(host, final, tree0, q: dict, limits: Limits
                  ) -> tuple[bool, list[str]] | None:
        """Run the rollback script on a copy of the final system: (paths back as they were, the
        run's flags); None: the host failed."""
        try:
            system = System.make(host, final)
        except OSError:
            return None
        try:
            run = system.run(f"bash {q['script']}\n", limits)
            if run.exec.infra_error:
                return None
            after = system.snapshot()
        finally:
            system.close()
        flags = run_flags(run) + (bomb_flags(after, q["paths"]) if after is not None else [])
        if after is None or flags or run.survivors != 0:
            return False, flags
        return all(same_node(after.get(x), tree0.get(x), after, tree0, x)
                   for x in q["paths"]), []

    @staticmethod
    def _parse(probes, final, tree0, sandbox: Sandbox, limits: Limits) -> Parsed | None:
        """Parse the configs the probes read, in the sandbox (the parsers meet the candidate's
        bytes there, not in the grader); None: the sandbox failed."""
        wanted = [w for w in wanted_parses(probes)
                  if (final if w[0] == "final" else tree0).get(w[1]) is not None
                  and (final if w[0] == "final" else tree0)[w[1]].kind == "file"]
        if not wanted:
            return Parsed({})
        files: dict[str, str | bytes] = {"check.py": CHECK_SOURCE, "case.json": json.dumps(
            [[f"f{i}", fmt] for i, (_, _, fmt) in enumerate(wanted)])}
        for i, (state, path, _) in enumerate(wanted):
            files[f"f{i}"] = (final if state == "final" else tree0)[path].data
        res = sandbox.run(files, [PARSER, "-I", "-B", "check.py"],
                          Limits(timeout_s=limits.timeout_s, memory_mb=limits.memory_mb,
                                 pids=limits.pids, output_bytes=4 << 20))
        if res.status == "infra_error":
            return None
        values = {}
        for line in res.stdout.splitlines():  # strict: record i, in order, else nothing after
            try:
                rec = json.loads(line)
            except ValueError:
                break
            if not isinstance(rec, dict) or rec.get("i") != len(values) \
                    or len(values) >= len(wanted):
                break
            values[wanted[len(values)]] = (rec.get("ok") is True, rec.get("data"))
        return Parsed(values)
