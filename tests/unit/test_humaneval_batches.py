"""Samples graded together in one sandbox run (how `rollforge eval` batches them) stay apart:
what one sample does to its process (builtins, the harness, signals, exiting) reaches neither
another sample's verdict nor its flags; and how samples are cut into runs."""
from __future__ import annotations

import textwrap
from typing import ClassVar

import pytest

from envs.base import SingleTurnEnv
from envs.humaneval.grading import run_humaneval_batch
from envs.humaneval.problems import humaneval_by_id
from envs.registry import kind_class
from envs.score import batches, evaluate_samples
from rewards.aggregate import RewardConfig
from rewards.reports import TestReport
from sandbox.base import Limits
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox
from tasks.record import Task


@pytest.fixture(scope="module")
def sandbox():
    sbx = make_sandbox(SandboxConfig())
    yield sbx
    sbx.close()


def _body(src: str) -> str:
    return textwrap.indent(textwrap.dedent(src).strip("\n"), "    ") + "\n"


HONEST = _body("return number % 1.0")
HOSTILE = {
    "builtins_tampering": _body("""
        import builtins
        builtins.abs = lambda x: 0
        builtins.len = lambda x: 0
        return number % 1.0
    """),
    "harness_tampering": _body("""
        import sys
        g = sys._getframe(1).f_globals
        g["_dumps"] = lambda rec: '{"i": 0, "value": 0.5}'
        return number % 1.0
    """),
    "timeout_evasion": _body("""
        s = __import__("sig" + "nal")
        s.signal(s.SIGALRM, s.SIG_IGN)
        while True:
            pass
    """),
    "early_exit": _body("return 0.0") + "import os\nos._exit(0)\n",
}


def test_a_hostile_sample_changes_nothing_for_the_samples_graded_with_it(sandbox):
    task = humaneval_by_id()["HumanEval/2"]
    items = [(task, HONEST)]
    for src in HOSTILE.values():
        items += [(task, src), (task, HONEST)]
    reports = run_humaneval_batch(items, sandbox, Limits(timeout_s=2.0, memory_mb=512), 0.3)
    assert len(reports) == len(items)
    honest = [r for (_, src), r in zip(items, reports) if src == HONEST]
    for r in honest:  # before, between and after the hostile ones: all passed, none flagged
        assert r.status == "ok" and set(r.outcomes) == {"passed"}, r
        assert r.hack_flags == () and r.load_error is None, r
    hostile = [r for (_, src), r in zip(items, reports) if src != HONEST]
    flagged = dict(zip(HOSTILE, hostile))
    for name in ("builtins_tampering", "timeout_evasion", "early_exit"):
        assert name in flagged[name].hack_flags, (name, flagged[name])
    # its forged records are caught, whichever flag names them first
    assert flagged["harness_tampering"].hack_flags, flagged["harness_tampering"]
    assert flagged["timeout_evasion"].status == "timeout"
    assert set(flagged["early_exit"].outcomes) == {"missing"}  # it answered nothing


def test_batches_keep_every_sample_once_in_order_and_shrink_towards_the_end():
    items = list(range(164))
    cut = batches(items, workers=2)
    assert [i for b in cut for i in b] == items
    sizes = [len(b) for b in cut]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > 4 * sizes[-1], sizes
    assert max(sizes) <= 48 and min(sizes) >= 1


@pytest.mark.parametrize("n,workers", [(0, 2), (1, 2), (3, 8), (500, 4)])
def test_batches_cover_any_number_of_samples_and_workers(n, workers):
    cut = batches(list(range(n)), workers)
    assert [i for b in cut for i in b] == list(range(n))
    assert all(b for b in cut) and max(map(len, cut), default=0) <= 48


def test_a_given_batch_size_is_kept():
    assert [len(b) for b in batches(list(range(10)), 2, batch_size=4)] == [4, 4, 2]
    assert [len(b) for b in batches(list(range(3)), 2, batch_size=1)] == [1, 1, 1]


class BatchedProbe(SingleTurnEnv):
    """A kind that grades in batches and records how it was asked to grade."""

    name = "batched_probe"
    verify_in_batches = True
    seen: ClassVar[list[str]] = []

    def verify(self, task, answer, sandbox, limits, per_test_timeout_s):
        self.seen.append("one")
        return TestReport(("passed",), (), "ok", None)

    def verify_batch(self, items, sandbox, limits, per_test_timeout_s):
        self.seen.append(f"batch of {len(items)}")
        return [TestReport(("passed",) if a == "good" else ("failed",), (), "ok", None)
                for _, a in items]

    def warm(self, sandbox, runs):
        self.seen.append(f"warm {runs}")


def test_any_kind_that_grades_in_batches_gets_its_samples_in_batches():
    path = f"{__name__}:BatchedProbe"
    kind_class(path)  # the user named it: its tasks may name it too
    task = Task(task_id="p/0", suite="probe", family="probe", difficulty=1, split="train",
                prompt="answer", kind=path)
    samples = [(task, "good" if i % 2 == 0 else "bad") for i in range(10)]
    BatchedProbe.seen.clear()
    results = evaluate_samples(samples, sandbox=None, limits=None, cfg=RewardConfig(), workers=2,
                               batch_size=4)
    assert sorted(BatchedProbe.seen) == ["batch of 2", "batch of 4", "batch of 4", "warm 2"]
    assert [r.breakdown.solved for r in results] == [i % 2 == 0 for i in range(10)]
