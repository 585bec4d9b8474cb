"""The per-row work of an iteration stays linear in its rows: comparisons counted at two batch
sizes, no clock (bench/bench_scale.py measures the seconds). Each of these was a scan of every
row per group or per episode, quadratic in the batch."""
from __future__ import annotations

import numpy as np

from envs.base import SingleTurnEnv, StepResult
from flows import episodes
from flows.episode_exec import Stepped
from rewards.advantages import ADVANTAGES
from rewards.outcome import informative_groups
from tasks.record import Task
from training.generate import Sample
from training.tokenizer import ByteTokenizer


class Label:
    """A group id that counts how often it is compared for equality."""

    eqs = 0

    def __init__(self, v: int) -> None:
        self.v = v

    def __eq__(self, other):
        Label.eqs += 1
        return isinstance(other, Label) and other.v == self.v

    def __hash__(self) -> int:
        return hash(self.v)


def _comparisons(fn, rows: int, group: int) -> int:
    rng = np.random.default_rng(rows)
    rewards = rng.choice([0.0, 1.0, np.nan], size=rows)
    labels = np.empty(rows, dtype=object)
    labels[:] = [Label(i // group) for i in range(rows)]  # a new object per row, as read back
    Label.eqs = 0
    fn(rewards, labels)
    return Label.eqs


def test_group_statistics_compare_each_row_a_bounded_number_of_times():
    for fn in (informative_groups, *ADVANTAGES.values()):
        for rows in (64, 2048):  # 8 and 256 groups: a scan per group compares rows x groups
            n = _comparisons(fn, rows, 8)
            assert n <= 2 * rows, f"{fn.__qualname__}: {n} label comparisons for {rows} rows"


def test_group_statistics_unchanged_by_label_objects():
    rewards = np.array([1.0, 0.0, np.nan, 1.0, 1.0, 0.5, 0.5, np.nan])
    plain = np.array([0, 0, 0, 1, 1, 2, 2, 3])
    wrapped = np.empty(len(plain), dtype=object)
    wrapped[:] = [Label(int(v)) for v in plain]
    # group 0: 1 vs 0 (NaN left out) is informative; 1 and 2 are all equal; 3 has none scored
    assert informative_groups(rewards, plain).tolist() == [True] * 3 + [False] * 5
    assert informative_groups(rewards, wrapped).tolist() == [True] * 3 + [False] * 5
    for fn in ADVANTAGES.values():
        np.testing.assert_array_equal(fn(rewards, plain), fn(rewards, wrapped))


class Instant(SingleTurnEnv):
    """Ends every episode at its first step, ungraded: only the loop's own work remains."""

    name = "instant"

    def reset(self, task):
        return task.task_id, task.prompt

    def step(self, state, action, ctx):
        return StepResult(state, "", True, {})


def _episode_comparisons(monkeypatch, n_tasks: int, group: int) -> int:
    tok = ByteTokenizer()
    tasks = [Task(task_id=f"t{i}", suite="s", family="f", difficulty=1, split="train",
                  prompt=f"task {i}") for i in range(n_tasks)]
    env = Instant()

    def sample(turn, contexts, eps, max_new_tokens, k):
        return [Sample(list(c), [65, tok.eos_token_id], [0.0, 0.0], "A", True)
                for c in contexts], 0.0

    def step(turn, items):
        return [Stepped(s, "", True, {}, 0.0) for _, s, _ in items]

    calls = {"n": 0}
    eq = episodes.Episode.__eq__

    def counting(a, b):
        calls["n"] += 1
        return eq(a, b)

    monkeypatch.setattr(episodes.Episode, "__eq__", counting)
    eps = episodes.play(tasks, [env] * n_tasks, group, 10_000, tok, 8, sample, step)
    assert len(eps) == n_tasks * group and all(e.done for e in eps)
    return calls["n"]


def test_play_compares_episodes_a_bounded_number_of_times(monkeypatch):
    for n_tasks in (4, 64):  # 32 and 512 episodes: a membership scan is 16x more per episode
        n = _episode_comparisons(monkeypatch, n_tasks, 8)
        assert n <= n_tasks * 8, f"{n} Episode comparisons for {n_tasks * 8} episodes"
