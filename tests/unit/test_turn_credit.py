"""Turn credit (rl.turn_credit: progress): each turn's advantage is the episode's minus
coef x Phi_t, Phi_t the best progress of the turns before it. The claim it rests on: the
expected update equals the episode-credit one whatever the turn counts. Checked exactly, by
enumerating every pair of episodes of a small two-state task with a tabular softmax policy
(episodes of one or two turns, groups of two, the flow's own estimators and row mask), against
variants that are biased, so the check can fail."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from flows.stages import informative_row_mask, train_row_mask
from rewards.advantages import advantages_for, progress_potentials, turn_advantages
from row_factory import make_row
from training.episodes import policy_runs, token_values

# Turn 1 (state 0): "test" runs the visible tests, which pass (progress 1.0), and the episode
# goes on; "wrong" and "right" submit at once (reward 0, 1). Turn 2 (state 1, after "test"):
# "right" submits a solution the hidden tests pass (1), "wrong" one they fail (0), "test" runs
# the tests again and the episode ends at its turn limit, graded as it stands (0).
ACTIONS = ("test", "wrong", "right")
EPISODES = [  # (the (state, action) of each turn, each turn's progress, reward)
    ([(0, 1)], [None], 0.0),
    ([(0, 2)], [None], 1.0),
    ([(0, 0), (1, 1)], [1.0, None], 0.0),
    ([(0, 0), (1, 2)], [1.0, None], 1.0),
    ([(0, 0), (1, 0)], [1.0, 1.0], 0.0),
]


def _softmax(theta):
    z = np.exp(theta - theta.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def _expected_update(theta, credit, mask_fn=None, scale=True):
    """E[sum over the group's turns of A_turn x grad log pi(turn)] over every pair of episodes,
    exactly. `credit(advantage, progress)` gives each turn's advantage; `mask_fn(rows)` which
    rows the update keeps (None: all)."""
    pi = _softmax(theta)
    grad = np.zeros_like(theta)
    for pair in itertools.product(EPISODES, repeat=2):
        p = math.prod(pi[s, a] for turns, _, _ in pair for s, a in turns)
        rewards = np.array([r for _, _, r in pair])
        adv = advantages_for("grpo", scale, rewards, np.array([0, 0]))
        rows = [make_row(reward=r, group_id="0:0", turn_advantages=credit(a, prog))
                for a, (_, prog, r) in zip(adv, pair)]
        keep = np.ones(2, bool) if mask_fn is None else mask_fn(rows)
        for (turns, _, _), row, k in zip(pair, rows, keep):
            if not k:
                continue
            for (s, a), at in zip(turns, row.turn_advantages):
                g = -pi[s].copy()
                g[a] += 1.0  # grad of log softmax at (s, a)
                grad[s] += p * at * g
    return grad


def _episode(a, prog):
    return [float(a)] * len(prog)


def _progress(a, prog):
    return turn_advantages(float(a), prog, coef=0.7)


THETAS = [np.zeros((2, 3)), np.array([[0.3, -1.0, 0.5], [1.2, -0.4, 0.0]]),
          np.array([[-2.0, 0.1, 0.0], [0.0, 2.0, -1.0]])]


@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize("scale", [True, False])
def test_progress_credit_leaves_the_expected_update_as_episode_credit_makes_it(theta, scale):
    base = _expected_update(theta, _episode, scale=scale)
    assert np.abs(base).max() > 1e-3  # the task has something to learn
    assert np.allclose(_expected_update(theta, _progress, scale=scale), base, atol=1e-12)
    # with dynamic sampling: the rows the flow keeps for the update (stages.train_row_mask)
    assert np.allclose(_expected_update(theta, _progress, train_row_mask, scale), base, atol=1e-12)
    assert np.allclose(_expected_update(theta, _episode, train_row_mask, scale), base, atol=1e-12)


@pytest.mark.parametrize("theta", THETAS[1:])
def test_the_check_fails_a_biased_credit(theta):
    base = _expected_update(theta, _episode)
    # a potential that counts the turn's own progress depends on the turn's action
    own = lambda a, prog: [a - 0.7 * (p or 0.0) for p in prog]  # noqa: E731
    assert not np.allclose(_expected_update(theta, own), base, atol=1e-6)
    # dropping the uninformative groups' turn terms (their rows' advantages are not all 0)
    assert not np.allclose(_expected_update(theta, _progress, informative_row_mask), base,
                           atol=1e-6)


def test_potentials_are_the_best_progress_before_each_turn_clipped_to_0_1():
    assert progress_potentials([]) == []
    assert progress_potentials([None, 0.5, None, 0.25, 1.0]) == [0.0, 0.0, 0.5, 0.5, 0.5]
    assert progress_potentials([2.0, float("nan"), None]) == [0.0, 1.0, 1.0]
    assert turn_advantages(0.8, [0.5, None, 1.0], coef=0.5) == [0.8, 0.55, 0.55]
    assert turn_advantages(float("nan"), [0.5, 1.0], coef=0.5) == [0.0, 0.0]
    # never above the episode's: reporting progress cannot raise a turn's credit
    assert all(t <= 0.3 for t in turn_advantages(0.3, [1.0, 0.2, None], coef=2.0))


def test_turn_values_land_on_their_runs_of_policy_tokens():
    mask = [1, 1, 0, 0, 1, 0, 1, 1]
    assert policy_runs(mask) == 3 and policy_runs([]) == 0 and policy_runs([0, 0]) == 0
    assert token_values(mask, [0.5, -1.0, 2.0]) == [0.5, 0.5, 0.0, 0.0, -1.0, 0.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="2 turn values for 3 runs"):
        token_values(mask, [0.5, 1.0])


def test_config_keeps_the_hash_of_episode_credit_and_refuses_rloo():
    from flows.config import ConfigError, load_config  # noqa: PLC0415

    base = load_config(None, [])
    assert load_config(None, ["rl.turn_credit=episode"]).hash() == base.hash()
    assert load_config(None, ["rl.turn_credit=progress"]).hash() != base.hash()
    with pytest.raises(ConfigError, match="turn_credit.*rloo"):
        load_config(None, ["rl.turn_credit=progress", "rl.algorithm=rloo"])
    with pytest.raises(ConfigError, match="turn_credit"):
        load_config(None, ["rl.turn_credit=per_token"])


def test_a_turns_progress_is_its_last_test_run_and_a_flagged_turn_shows_none():
    from flows.episodes import turn_progress  # noqa: PLC0415

    def run(status, passed=None, total=None):
        return {"status": status, "detail": "", "tests_passed": passed, "tests_total": total}

    assert turn_progress({"visible_passed": 1, "visible_total": 2}) == 0.5
    # the repo kind's pytest exits 1 while a test fails: its counts are progress all the same
    assert turn_progress({"outcomes": [run("failed", 3, 4), run("ran"), run("failed", 1, 4)]}) \
        == 0.25
    assert turn_progress({"calls": [run("ran", 2, 2), run("malformed")]}) == 1.0
    assert turn_progress({"outcomes": [run("ran"), run("not_run")]}) is None
    assert turn_progress({"visible_passed": 2, "visible_total": 2,
                          "hack_flags": ["forged_record"]}) is None
    assert turn_progress({"outcomes": [run("ran", 3, 2), run("ran", True, 2)]}) is None
