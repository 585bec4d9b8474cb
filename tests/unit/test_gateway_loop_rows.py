"""The loop's take of the gateway's rows (rl.gateway_rows, gateway/train.py `loop_rows`): an
iteration takes the episodes of its window of policy versions that no earlier iteration took,
records which before its update, and a second call (a retried or resumed iteration) returns the
same rows however many a client added since; the rows are the loop's own shape, with GRPO
advantages per task over what was taken. The rows are written to a real store as the gateway
writes them (`append_shard`, an episode a shard)."""
from __future__ import annotations

import math
import uuid
from pathlib import Path

import numpy as np
import pytest

from flows.config import load_config
from flows.pipeline import rl_samples
from gateway.play import store_dir
from gateway.train import gateway_samples, graded_rows, loop_rows
from rewards.advantages import advantages_for
from storage import registry
from storage.synthetic import example_row
from storage.trajectories import append_shard

ROOT = Path(__file__).resolve().parents[2]


def _cfg(tmp_path, *over):
    return load_config(ROOT / "configs/tiny.yaml",
                       [f"out_dir={tmp_path}", "rl.gateway_rows=true", *over])


def _episode(cfg, version: int, task: str, reward: float, rows: int = 1) -> str:
    """One graded gateway episode of `task` sampled by `version` (`rows`: a split conversation
    makes several), stored as the gateway stores it; its id."""
    ep = uuid.uuid4().hex
    append_shard(store_dir(cfg), version, [example_row(
        f"{cfg.run_id}-gateway", version, i, policy_version=version, task_id=task,
        group_id=f"gateway:{task}", episode_id=ep, sample_index=i, reward=reward,
        pass_fraction=reward, status="ok", infra_error=False, error_type=None, hack_flags=[],
        advantage=None, completion_mask=[1, 1]) for i in range(rows)])
    return ep


def _episodes(rows) -> set[str]:
    return {r.episode_id for r in rows}


def test_an_iteration_takes_its_window_once_and_keeps_its_take(tmp_path):
    cfg = _cfg(tmp_path)  # gateway_max_lag 1
    old = _episode(cfg, 0, "a", 0.0)
    v0 = {_episode(cfg, 0, "a", 1.0)}
    v1 = {_episode(cfg, 1, "a", 1.0), _episode(cfg, 1, "b", 0.5, rows=2)}
    later = _episode(cfg, 3, "a", 1.0)

    first = loop_rows(cfg, 0, 0)  # iteration 0 samples with v0: versions 0 only
    assert _episodes(first) == v0 | {old}
    taken = loop_rows(cfg, 1, 1)  # versions 0, 1; v0's episodes were iteration 0's
    assert _episodes(taken) == v1 and len(taken) == 3  # the split episode is two rows

    added = _episode(cfg, 1, "b", 0.0)  # a client plays on after iteration 1 took its rows
    again = loop_rows(cfg, 1, 1)  # iteration 1 retried or resumed: the same rows, no more
    assert _episodes(again) == v1
    assert [r.sample_index for r in again] == [r.sample_index for r in taken]
    assert _episodes(loop_rows(cfg, 2, 2)) == {added}  # versions 1, 2, less what 1 took
    assert _episodes(loop_rows(cfg, 3, 3)) == {later}
    takes = registry.gateway_takes(cfg.run_dir)
    assert sorted(takes) == [0, 1, 2, 3]
    assert takes[1]["versions"] == [0, 1] and set(takes[1]["episodes"]) == v1
    every = [e for t in takes.values() for e in t["episodes"]]
    assert len(every) == len(set(every)) == 6  # each episode trained once


def test_a_lag_of_zero_takes_only_the_version_sampled_with(tmp_path):
    cfg = _cfg(tmp_path, "rl.gateway_max_lag=0")
    _episode(cfg, 0, "a", 1.0)
    mine = _episode(cfg, 1, "a", 0.0)
    assert _episodes(loop_rows(cfg, 1, 1)) == {mine}


def test_the_rows_take_group_advantages_per_task_over_what_was_taken(tmp_path):
    cfg = _cfg(tmp_path)
    for reward in (0.0, 1.0, 1.0):
        _episode(cfg, 0, "a", reward)
    _episode(cfg, 0, "b", math.nan)  # not scored: advantage 0, as in the loop
    _episode(cfg, 0, "c", 1.0)  # a group of one: advantage 0
    rows = loop_rows(cfg, 0, 0)
    rewards = np.array([r.reward for r in rows], dtype=np.float64)
    groups = np.array([r.group_id for r in rows])
    want = advantages_for(cfg.rl.algorithm, cfg.rl.scale_advantages, rewards, groups)
    assert [r.advantage for r in rows] == pytest.approx(list(want))
    by_group = {g: sorted(r.advantage for r in rows if r.group_id == g) for g in groups}
    assert by_group["gateway:a"][0] < 0 < by_group["gateway:a"][-1]
    assert by_group["gateway:b"] == [0.0] and by_group["gateway:c"] == [0.0]
    samples = rl_samples(cfg, rows)  # the loop's update takes them as it takes its own
    assert [s.completion_ids for s in samples] == [r.completion_token_ids for r in rows]
    assert all(isinstance(r.prompt_token_ids, list) and r.turn_advantages is None
               for r in rows)


def test_without_a_gateway_store_an_iteration_takes_nothing_and_says_so(tmp_path):
    cfg = _cfg(tmp_path)
    assert loop_rows(cfg, 0, 0) == []
    assert registry.gateway_takes(cfg.run_dir)[0]["episodes"] == []
    with pytest.raises(ValueError, match="no gateway episodes of policy version 0"):
        gateway_samples(cfg, 0)
    assert graded_rows(cfg, [0, 1]) == []


def test_the_option_is_off_by_default_and_leaves_the_runs_hash_alone(tmp_path):
    plain = load_config(ROOT / "configs/tiny.yaml", [f"out_dir={tmp_path}"])
    assert plain.rl.gateway_rows is False
    assert _cfg(tmp_path).hash() != plain.hash()
    at_default = load_config(ROOT / "configs/tiny.yaml",
                             [f"out_dir={tmp_path}", "rl.gateway_max_lag=1"])
    assert at_default.hash() == plain.hash()
