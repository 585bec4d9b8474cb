"""Episode mode without Prefect or Dask: the edge families, the turn loop (`play`) with a
scripted policy, the rows it writes and the demonstrations, through the real process sandbox
and the hidden-test grader (each step runs `step_episode`, the function Dask workers run)."""
from __future__ import annotations

import pickle

import pytest

from envs.io.families.edges import EDGES
from envs.io.procedural import first_attempts, generate_suite
from envs.registry import make_env
from flows.config import load_config
from flows.episode_exec import step_local
from flows.episodes import play
from flows.scoring import episode_rows
from flows.scripted import build_demos, full_function, scripted_policy, write_action
from storage.schema import rows_to_table
from training.tokenizer import ByteTokenizer

TOK = ByteTokenizer()
EDGE_NAMES = [f.name for f in EDGES]


@pytest.fixture(scope="module")
def cfg():
    return load_config(None, ["episodes.enabled=true", "episodes.max_turns=3",
                              "policy.max_len=640", "sampling.group_size=2", "episodes.obs_tokens=160",
                              f"tasks.families={EDGE_NAMES}", "tasks.difficulties=[1]"])


@pytest.fixture(scope="module")
def tasks():
    ts = generate_suite(EDGE_NAMES, [1], 3)
    return [next(t for t in ts if t.family == f) for f in EDGE_NAMES]


@pytest.fixture(scope="module")
def naive():
    return first_attempts(EDGE_NAMES, [1], 3)


def _env(cfg, max_turns, **options):
    """The agent kind with the run's episode settings (what the flow's implicit source is)."""
    return make_env("agent", {**cfg.episodes.model_dump(mode="json"), "max_turns": max_turns,
                              **options})


def _local_step(cfg):
    def step(turn, items):  # what a Dask worker does, in this process, pickled both ways
        items = pickle.loads(pickle.dumps(items))
        out = step_local(items, cfg.sandbox, cfg.rewards)
        return pickle.loads(pickle.dumps(out))
    return step


def _play(cfg, tasks, group, max_turns, policy, max_len=None, **options):
    env = _env(cfg, max_turns, **options)
    return play(tasks, [env] * len(tasks), group, max_len or cfg.policy.max_len, TOK,
                cfg.sampling.max_new_tokens, policy, _local_step(cfg))


def _scripted(naive, fix_on_fail=True):
    return scripted_policy(naive, TOK, fix_on_fail)


def _mixed(naive):
    """In each group of 2 the first episode fixes, the second submits the naive attempt."""
    policies = [_scripted(naive, True), _scripted(naive, False)]

    def mixed(turn, contexts, episodes, max_new, k):
        return [policies[e.index](turn, [c], [e], max_new, k)[0][0]
                for c, e in zip(contexts, episodes)], 0.0
    return mixed


def test_edge_task_shows_the_edge_in_a_visible_test_not_in_the_docstring(tasks):
    for t in tasks:
        assert len(t.examples) == 2
        edge = t.examples[1]
        call = f"{t.entry_point}({', '.join(repr(a) for a in edge.args)})"
        assert call not in t.prompt and f">>> {t.entry_point}(" in t.prompt
        assert any(c.args == edge.args for c in t.tests), t.task_id  # the hidden tests hold it


def test_scripted_policy_fails_turn_one_reads_the_failure_and_passes_on_turn_two(cfg, tasks, naive):
    eps = _play(cfg, tasks, 1, 3, _scripted(naive))
    for e in eps:
        assert "FAIL" in e.observations[0], e.observations[0]
        assert e.final["end_reason"] == "submit" and e.state.turn == 2
        assert e.grade.solved, (e.task.task_id, e.grade)
        assert len(e.turn_seconds) == 2 and all(s > 0 for s in e.turn_seconds)
    # the same policy with one turn: graded on the naive attempt, never solved
    one = _play(cfg, tasks, 1, 1, _scripted(naive))
    assert all(e.final["end_reason"] == "max_turns" and not e.grade.solved for e in one)


def test_rows_carry_turns_masks_and_one_advantage_per_episode(cfg, tasks, naive):
    eps = _play(cfg, tasks[:2], 2, 3, _mixed(naive))
    rows = episode_rows(cfg, 0, 0, eps, 2, cfg.hash())
    table = rows_to_table(rows, 0, 0)  # the store's schema accepts them
    assert table.num_rows == 4
    for r in rows:
        assert len(r.completion_token_ids) == len(r.completion_mask) == len(r.sampling_logprobs)
        env = [lp for lp, m in zip(r.sampling_logprobs, r.completion_mask) if m == 0]
        assert env and all(lp == 0.0 for lp in env)
        assert r.turns == 2 and len(r.turn_seconds) == 2 and r.end_reason == "submit"
        assert r.completion.startswith(r.turn_actions[0])
        assert TOK.decode(r.completion_token_ids) == r.completion
        assert r.episode_id == f"0:{r.group_id.split(':')[1]}:{r.sample_index}"
        assert r.kind == "agent" and r.test_names == []
    assert [r.reward > 0.99 for r in rows] == [True, False, True, False]
    assert rows[0].advantage > 0 > rows[1].advantage
    assert rows[0].group_id == rows[1].group_id != rows[2].group_id


def test_an_episode_whose_context_is_full_is_graded_as_it_stands(cfg, tasks, naive):
    eps = _play(cfg, tasks[:1], 1, 3, _scripted(naive), max_len=300)
    e = eps[0]
    assert e.final["end_reason"] == "context_full" and e.state.turn == 1
    assert e.grade is not None and not e.grade.solved


def test_visible_progress_shaping_is_off_by_default_and_adds_the_best_visible_fraction(cfg, tasks,
                                                                                         naive):
    eps = _play(cfg, tasks[:1], 1, 3, _scripted(naive, False))
    plain = episode_rows(cfg, 0, 0, eps, 1, cfg.hash())[0]
    assert plain.shaping_reward == 0.0
    shaped_eps = _play(cfg, tasks[:1], 1, 3, _scripted(naive, False),
                       shaping="visible_progress", shaping_coef=0.5)
    shaped = episode_rows(cfg, 0, 0, shaped_eps, 1, cfg.hash())[0]
    visible = shaped_eps[0].state.history[0]
    assert visible["visible_total"] == 2 and visible["visible_passed"] in (0, 1)
    assert shaped.shaping_reward == pytest.approx(0.5 * visible["visible_passed"] / 2)
    assert shaped.reward == pytest.approx(plain.reward + shaped.shaping_reward)


def test_demonstrations_hold_the_real_observation_and_mark_the_first_try_share(cfg, tasks, naive):
    demos = build_demos(tasks, naive, _env(cfg, 3, demo_first_try_share=0.0), TOK,
                        _local_step(cfg))
    assert len(demos) == len(tasks)
    for (intro, segs), t in zip(demos, tasks):
        assert intro == t.prompt and [b for _, b in segs] == [True, False, True]
        assert "FAIL" in segs[1][0] and segs[1][0].startswith("<obs>")
        assert segs[2][0].endswith("<submit/>") and t.reference in segs[2][0]
    right = build_demos(tasks, naive, _env(cfg, 3, demo_first_try_share=1.0), TOK,
                        _local_step(cfg))
    assert all(segs[2][0] == "<submit/>" and "FAIL" not in segs[1][0] for _, segs in right)


def test_a_one_shot_family_gets_a_single_turn_demonstration(cfg):
    t = generate_suite(["add"], [1], 1)[0]
    (intro, segs), = build_demos([t], {}, _env(cfg, 3), TOK, _local_step(cfg))
    assert intro == t.prompt and len(segs) == 1 and segs[0][1]
    assert segs[0][0] == write_action(full_function(t, t.reference), "<submit/>")


def test_episode_state_is_small_and_survives_pickling(tasks):
    state, obs = _env(load_config(None), 3).reset(tasks[0])
    assert obs == tasks[0].prompt
    assert len(pickle.dumps(state)) < 8000
    assert pickle.loads(pickle.dumps(state)) == state


def test_episodes_section_is_off_by_default_keeps_the_hash_and_refuses_bad_values():
    from flows.config import ConfigError

    off = load_config(None)
    assert not off.episodes.enabled and off.episodes.shaping == "none"
    assert off.hash() == load_config(None, ["episodes.max_turns=5"]).hash()  # off: no effect
    assert off.hash() != load_config(None, ["episodes.enabled=true"]).hash()
    with pytest.raises(ConfigError, match="episodes.max_turns"):
        load_config(None, ["episodes.max_turns=0"])
    with pytest.raises(ConfigError, match="action_tokens=400 leaves no room"):
        load_config(None, ["episodes.enabled=true", "episodes.action_tokens=400"])
    with pytest.raises(ConfigError, match="shaping_coef=0 does nothing"):
        load_config(None, ["episodes.shaping=visible_progress", "episodes.shaping_coef=0"])


def test_turn_credit_splits_the_advantage_by_the_progress_of_earlier_turns(cfg, tasks, naive):
    from flows.pipeline import rl_samples  # noqa: PLC0415

    eps = _play(cfg, tasks[:2], 2, 3, _mixed(naive))
    plain = episode_rows(cfg, 0, 0, eps, 2, cfg.hash())
    credited = cfg.model_copy(update={"rl": cfg.rl.model_copy(
        update={"turn_credit": "progress", "turn_credit_coef": 0.5})})
    rows = episode_rows(credited, 0, 0, eps, 2, cfg.hash())
    rows_to_table(rows, 0, 0)  # the store's schema takes the new columns
    for r, p, e in zip(rows, plain, eps):
        assert r.advantage == p.advantage and p.turn_advantages is None
        seen = e.state.history[0]  # turn 1 ran the visible tests; turn 2 submitted
        frac = seen["visible_passed"] / seen["visible_total"]
        assert r.turn_progress == p.turn_progress == [frac, None]
        assert r.turn_advantages == pytest.approx([r.advantage,
                                                      r.advantage - 0.5 * frac])
        s = rl_samples(credited, [r])[0]
        policy = [a for a, m in zip(s.token_advantages, r.completion_mask) if m]
        first = r.completion_mask.index(0)  # turn 1's tokens, then the observation
        assert set(policy[:first]) == {r.turn_advantages[0]}
        assert set(policy[first:]) == {r.turn_advantages[1]}
        assert rl_samples(cfg, [p])[0].token_advantages is None
    assert any(r.turn_progress[0] > 0 for r in rows)  # some turn 2 inherits less
