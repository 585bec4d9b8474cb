"""Matching a pattern against strings inside the sandbox, and reading the result back.

Why the sandbox: the pattern is the policy's text, and a pattern like `(a+)+$` backtracks for
longer than the universe's age on "aaaa…!". Matching it in the grader's process would hang the
worker. Inside the sandbox each string gets a time limit of its own (an alarm; CPython's regex
engine checks for signals while it backtracks) and the sandbox's wall-clock limit kills the whole
run past `Limits.timeout_s` anyway, so a string that never answered reads as "timeout".

Threat model: the pattern is data, not code (it cannot print, open files or touch the checker),
and the sandbox only learns the strings, not which side they belong on; the grader compares the
booleans that come back with what it expected. The output is still read strictly: anything that
is not exactly what `CHECK_SOURCE` writes makes every test "failed" (never passed).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from rewards.reports import Outcome, TestReport
from sandbox.base import ExecResult

CHECK_SOURCE = r'''
import json, re, signal, sys


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _emit(rec):
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()  # a run killed later keeps the answers it gave


def _timed(seconds, fn, *args):
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main():
    per_string = float(sys.argv[1])
    with open("case.json", encoding="utf-8") as fh:
        case = json.load(fh)
    signal.signal(signal.SIGALRM, _alarm)
    try:
        rx = _timed(per_string, re.compile, case["pattern"])
    except _Timeout:
        _emit({"compile_error": "Timeout"})
        return
    except Exception as exc:  # re.error, OverflowError, RecursionError: not a usable pattern
        _emit({"compile_error": "PatternError" if isinstance(exc, re.error)
               else type(exc).__name__})
        return
    for i, s in enumerate(case["strings"]):
        try:
            _emit({"i": i, "match": _timed(per_string, rx.fullmatch, s) is not None})
        except _Timeout:
            _emit({"i": i, "error": "Timeout"})
        except Exception as exc:  # MemoryError and the like
            _emit({"i": i, "error": type(exc).__name__})
    _emit({"done": True})


main()
'''

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # an exception type name, nothing else


@dataclass(frozen=True)
class CheckOutput:
    """What the checker said: a compile error, or one answer per string (True/False for a
    match, else the error's name) and whether it got to the end."""

    compile_error: str | None
    answers: tuple[bool | str, ...]
    done: bool


def _error_name(v: object) -> str | None:
    return v if isinstance(v, str) and _NAME.fullmatch(v) else None


def read_check(stdout: str, n: int) -> CheckOutput | None:
    """The checker's records, or None if `stdout` is anything the checker does not write
    (bad JSON, an unknown shape, an answer out of order, a record after the end)."""
    compile_error: str | None = None
    answers: list[bool | str] = []
    done = False
    for line in stdout.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            return None
        if done or compile_error is not None or not isinstance(rec, dict):
            return None
        keys = set(rec)
        if keys == {"compile_error"} and not answers and _error_name(rec["compile_error"]):
            compile_error = rec["compile_error"]
        elif keys in ({"i", "match"}, {"i", "error"}) and type(rec["i"]) is int \
                and rec["i"] == len(answers) < n:
            value = rec["match"] if "match" in rec else _error_name(rec["error"])
            if type(value) is not bool and ("match" in rec or value is None):
                return None  # a match that is not a bool, an error that is not a name
            answers.append(value)
        elif rec == {"done": True} and type(rec["done"]) is bool and len(answers) == n:
            done = True
        else:
            return None
    return CheckOutput(compile_error, tuple(answers), done)


def report_of(res: ExecResult, expected: list[bool], names: tuple[str, ...]) -> TestReport:
    """Per-string outcomes of one checker run; `expected[i]`: string i should match."""
    n = len(expected)
    if res.status == "infra_error":  # the host failed: not the pattern's doing, not scored
        return TestReport(("missing",) * n, (), "infra_error", res, test_names=names)
    stdout = res.stdout
    if res.status != "ok" and not stdout.endswith("\n"):  # killed mid-line: not a forgery
        stdout = stdout[:stdout.rfind("\n") + 1]
    out = read_check(stdout, n)
    ended_early = out is not None and not out.done and out.compile_error is None
    if out is None or (ended_early and res.status == "ok"):  # an exit 0 without the end: forged
        return TestReport(("failed",) * n, (), res.status, res,
                          load_error="CheckerOutput: not what the checker writes",
                          test_names=names)
    if out.compile_error is not None:
        if out.compile_error == "Timeout":
            return TestReport(("timeout",) * n, ("Timeout",) * n, res.status, res,
                              load_error="Timeout: the pattern took too long to compile",
                              test_names=names)
        # The policy's failure, like a SyntaxError in code: every test errs, nothing is retried.
        return TestReport(("error",) * n, (out.compile_error,) * n, "syntax_error", res,
                          load_error=f"{out.compile_error}: the pattern does not compile",
                          test_names=names)
    outcomes: list[Outcome] = []
    error_types: list[str] = []
    for i, want in enumerate(expected):
        got = out.answers[i] if i < len(out.answers) else None
        if isinstance(got, bool):
            outcomes.append("passed" if got == want else "failed")
        elif got == "Timeout" or (got is None and res.status == "timeout"):
            outcomes.append("timeout")  # the alarm, or the sandbox's kill before an answer
            error_types.append("Timeout")
        else:  # an error on this string, or the run died before reaching it (e.g. memory)
            outcomes.append("error")
            error_types.append(got or res.status)
    return TestReport(tuple(outcomes), tuple(error_types), res.status, res, test_names=names)
