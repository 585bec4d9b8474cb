"""What the kinds whose harness grades several answers in one sandbox run, each in a forked
process of its own, share: the host's reader of what the harness said about each answer
(humaneval, reasoning_gym, verifiers) and, for those that score with outside code
(reasoning_gym, verifiers), the in-sandbox capture of what the scorer compiles
(`CAPTURE_SOURCE`, put before the harness's own source). The harness writes one JSON object a
line, tagged with the answer's place `s`:

    {"s", "setup_error"} | {"s", <the kind's own key>: ...}, then {"s", "rec": <raw line>}...,
    {"s", "prints"}, {"s", "end", "code", "t"}

The `rec` lines are the guard's keyed records of the answer's process (read by the kind, which
knows their key); `end` closes the answer: nothing for it is read after. Lines that are not
JSON, or name no answer of the batch, are skipped (the candidate's output never reaches stdout:
the harness captures its prints).
"""
from __future__ import annotations

import json
from typing import Any, Callable

from sandbox.base import ExecResult

ENDS = ("ok", "failed", "timeout", "memory_exceeded", "output_truncated")

# In the sandbox: an audit hook that copies what is compiled while `_capture[0]` is a list (the
# harness sets it around a scorer's call), so the host can tell an answer the scorer ran as
# code from one it read as data (envs/reasoning_gym/grading.py `code_beyond`).
CAPTURE_SOURCE = r'''
_CAPTURE_MAX, _SOURCE_MAX = 16, 4096
_capture = [None]  # the list compile events go to while a scorer runs, else None


def _compile_hook(event, args):
    # Added before any guard: Python code can neither remove nor reach an audit hook. What it
    # sees is what the scorer compiles (the answer, as the scorer rewrote it).
    if event == "compile":
        into = _capture[0]
        if into is not None and len(into) < _CAPTURE_MAX:
            src = args[0]
            if type(src) is bytes:
                src = bytes.decode(src, "utf-8", "replace")
            if type(src) is str:
                into.append(str.__str__(src)[:_SOURCE_MAX])
'''


class Part:
    """What the harness's parent said about one answer; `extra` holds the kind's own keys."""

    def __init__(self) -> None:
        self.recs: list[str] = []
        self.prints = ""
        self.setup_error: str | None = None
        self.end: ExecResult | None = None
        self.extra: dict[str, Any] = {}


def warm_zygotes(sandbox, files: dict, argv: list[str], runs: int,
                 preload: tuple[str, ...] = ()) -> None:
    """Let `sandbox` start, in the background, the zygotes that `runs` concurrent batches of
    `argv` over `files` will fork from (the process backend's fork server, with `preload`
    imported); a no-op for other backends."""
    warm = getattr(getattr(sandbox, "fork_server", None), "warm", None)
    if warm is not None:
        warm(files, argv, runs, preload=preload)


def split_batch(res: ExecResult, n: int,
                extra: dict[str, Callable[[Any], Any]] | None = None) -> list[Part]:
    """The `n` answers' parts of a batch run's stdout. `extra` maps a kind's own key to a
    reader of its value, which returns what to keep or None to ignore the line."""
    parts = [Part() for _ in range(n)]
    for line in res.stdout.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        s = rec.get("s") if isinstance(rec, dict) else None
        if type(s) is not int or not 0 <= s < n or parts[s].end is not None:
            continue
        p = parts[s]
        if isinstance(rec.get("rec"), str):
            p.recs.append(rec["rec"])
        elif isinstance(rec.get("setup_error"), str):
            p.setup_error = rec["setup_error"]
        elif isinstance(rec.get("prints"), str):
            p.prints = rec["prints"]
        elif rec.get("end") in ENDS:
            code = rec.get("code") if type(rec.get("code")) is int else None
            t = float(rec["t"]) if type(rec.get("t")) in (int, float) else 0.0
            p.end = ExecResult(rec["end"], code, "".join(r + "\n" for r in p.recs), p.prints,
                               t, res.backend)
        else:
            for key, read in (extra or {}).items():
                if key in rec:
                    value = read(rec[key])
                    if value is not None:
                        p.extra[key] = value
                    break
    return parts
