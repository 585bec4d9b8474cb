"""Grading a `reasoning_gym` answer: the dataset's own `score_answer`, run in the sandbox by
envs/reasoning_gym/harness.py, its score read back from the guard's keyed records and nowhere
else, and the code the scorer compiled from the answer judged here.

The report has one outcome, `score_answer`: `passed` when the score is 1, else `failed` (`error`
when the scorer raised, `timeout` when it ran out of time), and `score`, the dataset's fraction
in [0, 1], which is the pass fraction the reward is built from (rewards/aggregate.py).

`answer_code`: some scorers evaluate the answer as Python (countdown's sympy `parse_expr`,
n_queens' `eval`), so an answer can be code that computes what the check compares (countdown
credits `(6, 61, 94, 4) and ord('ĵ')` with 1.0: the numbers are "used" and the value is the
target). What the scorer compiles while it scores the answer is compared with what it compiles
while it scores the dataset's own answer: a compiled source that shares a name or number with
the answer and holds a construct the dataset's answer never needs (a call of a name it never
calls, an attribute, a subscript, a lambda, a comprehension, a boolean or conditional
expression, a walrus, a star, an f-string, a dunder name) is flagged, and the answer earns
nothing. The calls sympy's `parse_expr` writes for any name or number (`Symbol`, `Integer`, ...) and
sympy's mathematical functions (`cos`, `sqrt`, ...) are allowed: an honest `x` becomes
`Symbol('x')` where the dataset's answer named no symbol, an honest integral may need `cos`
where the dataset's answer had `sqrt`. A compiled source of definitions only (sympy's generated
helpers) ran nothing and is skipped.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import re
from dataclasses import replace
from typing import Sequence

from envs.base import TestReport
from envs.batch_harness import Part, split_batch, warm_zygotes
from envs.reasoning_gym.harness import HARNESS_SOURCE
from rewards import pyast
from sandbox.base import ExecResult, Limits, Sandbox
from tasks.record import Task

TEST_NAME = "score_answer"
# Imported once by the fork server's zygotes of this kind's runs (about 0.8 s of CPU and 1200
# modules each time otherwise): the harness imports it before it reads any answer, and its
# answers are data, never run as a program (sandbox/FORK_SERVER.md, a kind's own preload).
PRELOAD = ("reasoning_gym",)
_CODE_NODES = (ast.Call, ast.Attribute, ast.Subscript, ast.Lambda, ast.ListComp, ast.SetComp,
               ast.DictComp, ast.GeneratorExp, ast.BoolOp, ast.IfExp, ast.NamedExpr,
               ast.Starred, ast.JoinedStr, ast.Await, ast.Yield, ast.YieldFrom)
_TOKENS = re.compile(r"[A-Za-z_]\w*|\d+")
# what sympy's parse_expr writes for any name and number of the text it parses (auto_symbol,
# auto_number): an honest `x` becomes `Symbol('x')` even where the dataset's answer has none
_PARSE_EXPR_CALLS = {"Symbol", "Integer", "Float", "Rational", "Function"}


@functools.lru_cache(maxsize=1)
def _math_calls() -> frozenset[str]:
    """Calls an honest symbolic answer makes whatever the dataset's answer made: parse_expr's
    own, and sympy's mathematical functions (`cos` where the dataset's answer had `sqrt`; none
    of them evaluates a string or reaches the process)."""
    try:
        import sympy.functions  # noqa: PLC0415 (reasoning_gym's dependency, loaded by it)
    except ImportError:
        return frozenset(_PARSE_EXPR_CALLS)
    return frozenset(_PARSE_EXPR_CALLS | {n for n in dir(sympy.functions)
                                          if not n.startswith("_")})


def question_sha(question: str) -> str:
    return hashlib.sha256(question.encode()).hexdigest()


def job_item(task: Task, answer: str) -> dict:
    p = task.payload
    return {"recipe": [p["dataset"], p.get("options", {}), p.get("level"), p["seed"], p["size"]],
            "index": p["index"], "question_sha": question_sha(task.prompt), "answer": answer}


def run_batch(items: Sequence[tuple[Task, str]], sandbox: Sandbox, limits: Limits,
              per_answer_timeout_s: float) -> list[TestReport]:
    """Score each (task, answer) in one sandbox run; `limits.timeout_s` bounds each answer."""
    if not items:
        return []
    job = [job_item(t, a) for t, a in items]
    run_limits = replace(limits, timeout_s=limits.timeout_s * len(job) + 10.0,
                         output_bytes=limits.output_bytes * len(job))
    res = sandbox.run({"harness.py": HARNESS_SOURCE, "job.json": json.dumps(job)},
                      ["python", "harness.py", str(per_answer_timeout_s)], run_limits,
                      preload=PRELOAD)
    parts = split_batch(res, len(job), {"ref_compiled": _strings})
    return [_report(answer, part, res) for (_, answer), part in zip(items, parts)]


def warm_sandbox(sandbox: Sandbox, runs: int) -> None:
    """Let `sandbox` start what `runs` concurrent batches will run in (the process backend's
    zygotes, reasoning_gym imported) in the background; a no-op for other backends."""
    warm_zygotes(sandbox, {"harness.py": HARNESS_SOURCE}, ["python", "harness.py", "1.0"], runs,
                 PRELOAD)


def _strings(value) -> list[str] | None:
    return [x for x in value if isinstance(x, str)] if isinstance(value, list) else None


def _report(answer: str, part: Part, batch: ExecResult) -> TestReport:
    names = (TEST_NAME,)
    if batch.status == "infra_error":
        return TestReport(("missing",), (), "infra_error", batch, test_names=names)
    if part.setup_error is not None:
        # the task cannot be rebuilt here: not the answer's failure, so not scored
        bad = replace(batch, status="infra_error", error=f"task setup: {part.setup_error}")
        return TestReport(("missing",), (), "infra_error", bad, load_error=part.setup_error,
                          test_names=names)
    sample = part.end or replace(batch, status="failed" if batch.status == "ok" else batch.status,
                                 stdout="", stderr="")
    score, error, flags, compiled = _read(part.recs)
    if code_beyond(answer, compiled, part.extra.get("ref_compiled", [])):
        flags.append("answer_code")
    if score is None:
        outcome = "timeout" if error == "Timeout" or sample.status == "timeout" else "error"
        return TestReport((outcome,), (error or sample.status,), sample.status, sample,
                          tuple(dict.fromkeys(flags)), test_names=names, score=0.0)
    return TestReport(("passed" if score == 1.0 else "failed",), (), sample.status, sample,
                      tuple(dict.fromkeys(flags)), test_names=names, score=score)


def _read(recs: list[str]) -> tuple[float | None, str | None, list[str], list[str]]:
    """(score, error, flags, compiled sources) from the guard's records, trusting none of
    them: a shape the harness never writes, a second score, or a score outside [0, 1] is
    dropped and flagged `forged_record`."""
    score = error = None
    flags: list[str] = []
    compiled: list[str] = []
    done = False
    for line in recs:
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        keys = set(rec) if isinstance(rec, dict) else set()
        if done or not keys:
            flags.append("forged_record")
        elif keys == {"flag"} and isinstance(rec["flag"], str):
            flags.append(rec["flag"][:64])
        elif keys == {"compiled"} and isinstance(rec["compiled"], str):
            compiled.append(rec["compiled"])
        elif keys == {"score"} and type(rec["score"]) in (int, float) and score is None \
                and error is None and 0.0 <= rec["score"] <= 1.0:
            score = float(rec["score"])
        elif keys == {"error"} and isinstance(rec["error"], str) and score is None:
            error = rec["error"][:64]
        elif keys == {"done"} and rec["done"] is True:
            done = True
        else:
            flags.append("forged_record")
    if not done:
        score = None  # a score the harness did not finish with is not the harness's
    return score, error, flags, compiled


def _shape(source: str) -> tuple[set[str], set[str], bool] | None:
    """(construct kinds, names called, dunder seen) of compiled source, None if it does not
    parse (then it never ran)."""
    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return None
    if tree.body and all(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in tree.body):
        return set(), set(), False  # definitions only (sympy's generated helpers): nothing ran
    kinds, called, dunder = set(), set(), False
    for node in ast.walk(tree):
        if isinstance(node, _CODE_NODES):
            kinds.add(type(node).__name__)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called.add(node.func.id)
        name = node.id if isinstance(node, ast.Name) else (
            node.attr if isinstance(node, ast.Attribute) else "")
        dunder = dunder or name.startswith("__")
    return kinds - {"Call"}, called, dunder


def code_beyond(answer: str, compiled: Sequence[str], ref_compiled: Sequence[str]) -> bool:
    """Whether the scorer compiled, from `answer`, code with constructs that the dataset's own
    answer never needed (see the module docstring)."""
    ref_kinds: set[str] = set()
    ref_called: set[str] = set()
    for src in ref_compiled:
        shape = _shape(src)
        if shape:
            ref_kinds |= shape[0]
            ref_called |= shape[1]
    tokens = set(_TOKENS.findall(answer))
    for src in compiled:
        if src in ref_compiled or not tokens & set(_TOKENS.findall(src)):
            continue  # the library's own code, the same whatever the answer
        shape = _shape(src)
        if shape and (shape[2] or shape[0] - ref_kinds
                      or shape[1] - ref_called - _math_calls()):
            return True
    return False
