"""Writes envs/testfile/data/basics.jsonl from its source, basics.yaml: small Python
functions, each graded by its own test file (kind `testfile`), one in four held out. The .jsonl
is what a run reads (`file:` of a task source).

    .venv/bin/python envs/testfile/data/build_basics.py
"""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from tasks.files import save_tasks  # noqa: E402
from tasks.record import Task  # noqa: E402

SOURCE = Path(__file__).with_name("basics.yaml")
OUT = Path(__file__).with_name("basics.jsonl")
# Every fourth task held out, so each family has some (a run may re-split them with the
# source's `heldout_fraction`).
HELDOUT_EVERY = 4


def _task(i: int, spec: dict) -> Task:
    sig = spec["signature"]
    name = sig[len("def "):sig.index("(")]
    # the docstring's first line follows the quotes; the rest, and the closing quotes, indented
    doc = textwrap.indent(spec["docstring"], "    ")[4:] + "    "
    tests = spec["tests"]
    if spec["format"] == "pytest":
        tests = f"from solution import {name}\n\n\n{tests}"
    return Task(task_id=f"testfile-basics/{name}", suite="testfile-basics", family=spec["family"],
                difficulty=spec["level"],
                split="heldout" if i % HELDOUT_EVERY == HELDOUT_EVERY - 1 else "train",
                prompt=f'{sig}\n    """{doc}"""\n', kind="testfile", entry_point=name,
                reference=textwrap.indent(spec["body"], "    "),
                payload={"test_file": tests, "format": spec["format"]})


def tasks() -> list[Task]:
    return [_task(i, spec) for i, spec in enumerate(yaml.safe_load(SOURCE.read_text()))]


if __name__ == "__main__":
    print(save_tasks(tasks(), OUT))
