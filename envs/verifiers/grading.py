"""Grading a `verifiers` answer: the environment's own rubric, run in the sandbox by
envs/verifiers/harness.py, each reward function's value read back from the guard's keyed
records and nowhere else.

The report has one outcome per reward function of non-zero weight, named after it: `passed` at
a value of 1 or more, else `failed` (`error` when it raised past the rubric or gave no number,
`timeout`), and `score`: the rubric's reward (the weighted sum of the values, as verifiers adds
them) over the sum of the positive weights, clipped to [0, 1]. A solve is every function at 1.

`answer_code`: a rubric that evaluates the answer (a math rubric's sympy `parse_expr`) runs
what the answer spells. Code that the rubric compiled from the answer (it shares a name or
number with it) and that does more than arithmetic on names and numbers (an attribute, a
subscript, a call other than the `Symbol`/`Integer`/... that parse_expr writes, a lambda, a
comprehension, a dunder name, ...) is flagged, and the answer earns nothing.
"""
from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from dataclasses import dataclass, replace
from typing import Sequence

from envs.base import TestReport
from envs.batch_harness import Part, split_batch
from envs.verifiers import venv
from rewards import pyast
from sandbox.base import ExecResult, Limits
from tasks.record import Task

_TOKENS = re.compile(r"[A-Za-z_]\w*|\d+")
_ARITHMETIC = (ast.Module, ast.Expr, ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare,
               ast.Constant, ast.Name, ast.Load, ast.operator, ast.unaryop, ast.cmpop, ast.Call,
               ast.keyword, ast.Tuple)
_PARSE_EXPR_CALLS = {"Symbol", "Integer", "Float", "Rational", "Function"}


def prompt_sha(prompt) -> str:
    """The digest the harness checks the rebuilt row's prompt against (same JSON rendering)."""
    return hashlib.sha256(json.dumps(prompt, sort_keys=True).encode()).hexdigest()


def run_batch(items: Sequence[tuple[Task, str]], limits: Limits,
              per_answer_timeout_s: float) -> list[TestReport]:
    """Score each (task, answer) in one sandbox run; every task names the same environment."""
    if not items:
        return []
    p = items[0][0].payload
    groups: dict[str, list[int]] = {}
    for i, (t, _) in enumerate(items):
        key = json.dumps([t.payload["env_id"], t.payload.get("env_args", {})], sort_keys=True)
        groups.setdefault(key, []).append(i)
    if len(groups) > 1:  # one environment loaded per sandbox run
        out: list[TestReport | None] = [None] * len(items)
        for idx in groups.values():
            for i, r in zip(idx, run_batch([items[i] for i in idx], limits,
                                           per_answer_timeout_s)):
                out[i] = r
        return out  # type: ignore[return-value]
    job = {"env_id": p["env_id"], "env_args": p.get("env_args", {}),
           "items": [{"split": t.payload["split"], "index": t.payload["index"],
                      "prompt_sha": t.payload["prompt_sha"], "answer": a} for t, a in items]}
    run_limits = venv.limits_for(limits, venv.LOAD_BUDGET_S
                                 + (8 * per_answer_timeout_s + 2.0) * len(items),
                                 limits.output_bytes * len(items))
    return reports_from([a for _, a in items],
                        _run("score", job, run_limits, per_answer_timeout_s))


def _run(mode: str, job: dict, limits: Limits, per_answer_timeout_s: float) -> ExecResult:
    """The harness's run; a run that could not start is an infrastructure error."""
    try:
        return venv.run_harness(mode, job, limits, per_answer_timeout_s)
    except Exception as exc:  # noqa: BLE001 -- the venv missing, the sandbox not starting
        return ExecResult("infra_error", None, "", "", 0.0, "process",
                          error=f"{type(exc).__name__}: {exc}")


def content_text(content) -> str:
    """A message's content as text: a string as is, content parts by their text."""
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return "" if content is None else str(content)


@dataclass(frozen=True)
class Turn:
    """One step of a multi-turn episode: the environment's next messages (None: the rollout
    ended and `report` is its rubric's), and the outcomes of the reply's tool calls."""

    messages: list[dict] | None
    calls: list[dict]
    report: TestReport | None = None


def run_turn(task: Task, replies: Sequence[str], final: bool, limits: Limits,
             per_answer_timeout_s: float) -> Turn:
    """One step of a multi-turn episode (harness.py `turn`): the messages the environment
    answers the policy's `replies` with, or, when its rollout ended (or `final`: the policy
    has no turn left), the report of its rubric on the whole rollout."""
    p = task.payload
    job = {"env_id": p["env_id"], "env_args": p.get("env_args", {}),
           "items": [{"split": p["split"], "index": p["index"], "prompt_sha": p["prompt_sha"],
                      "replies": list(replies), "final": final}]}
    run_limits = venv.limits_for(limits, venv.LOAD_BUDGET_S + 8 * per_answer_timeout_s + 2.0
                                 + 2.0 * len(replies), limits.output_bytes)
    res = _run("turn", job, run_limits, per_answer_timeout_s)
    part = split_batch(res, 1, {"funcs": _funcs})[0]
    got, load = _records(part.recs), venv.load_error(res)
    asked = _asked(got)
    if asked is not None and load is None and part.setup_error is None:
        return Turn(asked, _calls(got))
    return Turn(None, _calls(got), _report("\n".join(replies), part, res, load))


def _records(recs: list[str]) -> list:
    """The records as JSON values; none when one is not JSON (the report flags that)."""
    try:
        return [json.loads(line) for line in recs]
    except ValueError:
        return []


def _calls(got: list) -> list[dict]:
    """The outcomes of the last reply's tool calls (the `calls` record), as the loop's rows
    keep a tool call's: name, status (ran, or malformed with why), detail."""
    for rec in got:
        if isinstance(rec, dict) and set(rec) == {"calls"} and isinstance(rec["calls"], list):
            return [{"name": str(c.get("name", ""))[:80], "status": c.get("status"),
                     "detail": str(c.get("detail", ""))[:200], "tests_passed": None,
                     "tests_total": None}
                    for c in rec["calls"][:64] if isinstance(c, dict)
                    and c.get("status") in ("ran", "malformed")]
    return []


def _asked(got: list) -> list[dict] | None:
    """The messages of a rollout that asks for another reply: its `next` record (after the
    calls' record, if any), then the guard's `done`; None when it ended (or wrote anything
    else)."""
    if got and isinstance(got[0], dict) and set(got[0]) == {"calls"}:
        got = got[1:]
    if got and len(got) == 2 and isinstance(got[0], dict) and set(got[0]) == {"next"} \
            and got[1] == {"done": True}:
        return _next(got[0]["next"])
    return None


def _next(value) -> list[dict] | None:
    """The environment's messages after a reply (the `next` record): role and text content."""
    if not isinstance(value, list):
        return None
    out = []
    for m in value:
        if not isinstance(m, dict) or m.get("role") not in ("user", "tool", "system"):
            return None  # an environment's reply is never the policy's own turn
        out.append({"role": m["role"], "content": content_text(m.get("content"))})
    return out


def reports_from(answers: Sequence[str], res: ExecResult) -> list[TestReport]:
    """Each answer's report from the scoring run `res` of them all, in order."""
    load = venv.load_error(res)
    parts = split_batch(res, len(answers), {"funcs": _funcs})
    return [_report(a, part, res, load) for a, part in zip(answers, parts)]


def _funcs(value) -> list[tuple[str, float]] | None:
    """The rubric's reward functions as (name, weight), from the harness's `funcs` line."""
    if not isinstance(value, list):
        return None
    return [(str(f[0]), float(f[1])) for f in value if isinstance(f, list) and len(f) == 2
            and type(f[1]) in (int, float) and math.isfinite(f[1])]


def _report(answer: str, part: Part, batch: ExecResult, load: str | None) -> TestReport:
    every = part.extra.get("funcs")  # the rubric's functions, zero-weight ones included
    if batch.status == "infra_error" or load is not None or part.setup_error is not None \
            or every is None:
        # the environment or its row could not be had here: not the answer's failure
        why = (f"environment load: {load}" if load else f"task setup: {part.setup_error}"
               if part.setup_error else batch.error or f"harness: {batch.status}, "
               f"{batch.stderr.strip()[-300:]}")
        return TestReport(("missing",), (), "infra_error", replace(batch, status="infra_error",
                                                                  error=why),
                          load_error=load or part.setup_error)
    funcs = [(n, w) for n, w in every if w != 0.0]
    names = tuple(n for n, _ in funcs)
    sample = part.end or replace(batch, status="failed" if batch.status == "ok" else batch.status,
                                 stdout="", stderr="")
    values, errors, flags, compiled, done = _read(part.recs, {n for n, _ in every})
    if code_from_answer(answer, compiled):
        flags.append("answer_code")
    outcomes, error_types = [], []
    for n in names:
        if n in values and done:
            outcomes.append("passed" if values[n] >= 1.0 else "failed")
        else:
            why = errors.get(n) or errors.get("") or sample.status
            outcomes.append("timeout" if why == "Timeout" or sample.status == "timeout"
                            else "error")
            error_types.append(why)
    positive = sum(w for _, w in funcs if w > 0)
    reward = sum(w * values.get(n, 0.0) for n, w in funcs) if done else 0.0
    score = min(1.0, max(0.0, reward / positive)) if positive > 0 else 0.0
    return TestReport(tuple(outcomes) or ("failed",), tuple(error_types), sample.status, sample,
                      tuple(dict.fromkeys(flags)), test_names=names or ("rubric",), score=score)


def _read(recs: list[str], known: set[str]
          ) -> tuple[dict[str, float], dict[str, str], list[str], list[str], bool]:
    """(values, errors, flags, compiled sources, done) from the guard's records, trusting none:
    a shape the harness never writes, an unknown or repeated function is `forged_record`."""
    values: dict[str, float] = {}
    errors: dict[str, str] = {}
    flags: list[str] = []
    compiled: list[str] = []
    done = False
    for line in recs:
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        keys = set(rec) if isinstance(rec, dict) else set()
        name = rec.get("reward") if keys and "reward" in keys else None
        fresh = isinstance(name, str) and name in known and name not in values \
            and name not in errors
        if done or not keys:
            flags.append("forged_record")
        elif keys == {"flag"} and isinstance(rec["flag"], str):
            flags.append(rec["flag"][:64])
        elif keys == {"compiled"} and isinstance(rec["compiled"], str):
            compiled.append(rec["compiled"])
        elif keys == {"reward", "value"} and fresh and type(rec["value"]) in (int, float) \
                and math.isfinite(rec["value"]):
            values[name] = float(rec["value"])
        elif keys == {"reward", "error"} and fresh and isinstance(rec["error"], str):
            errors[name] = rec["error"][:64]
        elif keys == {"done"} and rec["done"] is True:
            done = True
        elif keys == {"calls"} and isinstance(rec["calls"], list) and not values:
            pass  # the reply's tool calls' outcomes (`_calls`), before any value
        elif keys == {"rollout_error"} and isinstance(rec["rollout_error"], str) \
                and "" not in errors:  # the multi-turn rollout raised: no function ran
            errors[""] = "rollout: " + rec["rollout_error"][:64]
        else:
            flags.append("forged_record")
    return values, errors, flags, compiled, done


def code_from_answer(answer: str, compiled: Sequence[str]) -> bool:
    """Whether the rubric compiled, from `answer`, code beyond arithmetic on names and numbers
    (see the module docstring)."""
    tokens = set(_TOKENS.findall(answer))
    for src in compiled:
        if not tokens & set(_TOKENS.findall(src)):
            continue  # the library's own code, the same whatever the answer
        try:
            tree = pyast.parse(src)
        except (SyntaxError, ValueError):
            continue  # it never ran
        if tree.body and all(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in tree.body):
            continue  # definitions only: nothing ran
        for node in ast.walk(tree):
            if not isinstance(node, _ARITHMETIC):
                return True
            if isinstance(node, ast.Name) and node.id.startswith("__"):
                return True
            if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                                   and node.func.id in _PARSE_EXPR_CALLS):
                return True
    return False
