"""A scripted agent for the repo kind (tests, benchmarks and the warm start's tool-call
demonstrations, not a model): it knows the fix (the task's gold patch) and plays it through the
episode's own actions, as a person would: turn 1 runs the first failing test and reads the buggy
lines, turn 2 edits them with search/replace blocks (one per hunk, every file of the patch) and
submits. `scripted_turn` writes the turns in the text verbs, `scripted_calls` as tool calls."""
from __future__ import annotations

import re
import shlex

from tasks.record import Task

_HUNK = re.compile(r"^@@ -(\d+)")


def gold_hunks(task: Task) -> list[tuple[str, int, str, str]]:
    """(path, first line, old text, new text) of each hunk of the gold patch."""
    out = []
    path, start, old, new = "", 0, [], []

    def flush():
        if old or new:
            out.append((path, start, "\n".join(old), "\n".join(new)))

    for line in (task.reference or "").splitlines():
        if line.startswith("+++ "):
            flush()
            old, new = [], []
            path = line[4:].strip()
            path = path[2:] if path.startswith("b/") else path
        elif line.startswith("--- "):
            continue
        elif _HUNK.match(line):
            flush()
            old, new = [], []
            start = int(_HUNK.match(line).group(1))
        elif line[:1] in (" ", "-"):
            old.append(line[1:])
            if line[:1] == " ":
                new.append(line[1:])
        elif line[:1] == "+":
            new.append(line[1:])
    flush()
    return out


def scripted_calls(task: Task) -> list[list[tuple[str, dict]]]:
    """The same two turns as tool calls (envs/tools.py REPO_TOOLS), as (name, arguments)."""
    hunks = gold_hunks(task)
    look = [("run", {"command": "pytest -x " + shlex.quote(task.payload["fail_to_pass"][0])})]
    look += [("read", {"path": p, "start": s, "end": s + 6}) for p, s, _, _ in hunks]
    fix = [("edit", {"path": p, "search": o, "replace": n}) for p, _, o, n in hunks]
    return [look, fix + [("submit", {})]]


def scripted_turn(task: Task, turn: int) -> str:
    """The agent's text at `turn` (1-based)."""
    hunks = gold_hunks(task)
    if turn == 1:
        failing = shlex.quote(task.payload["fail_to_pass"][0])
        reads = "".join(f'<read path="{p}" start="{s}" end="{s + 6}"/>' for p, s, _, _ in hunks)
        return f"<run>pytest -x {failing}</run>{reads}"
    edits = "".join(f'<edit path="{p}">\n<<<<<<< SEARCH\n{o}\n=======\n{n}\n>>>>>>> REPLACE\n'
                    f'</edit>' for p, _, o, n in hunks)
    return edits + "<submit/>"
