"""A whole trajectory row (storage/schema.py `TrajectoryRow`) for tests of what reads rows:
every column filled with a plain value, the ones a test is about given by name."""
from __future__ import annotations

import math

from storage.schema import TrajectoryRow


def make_row(**change) -> TrajectoryRow:
    values = dict(
        run_id="r", iteration=2, policy_version=2, task_id="t", suite="procedural", family="f",
        difficulty=3, split="train", sample_index=1, group_id="2:0", prompt="p",
        completion="c", prompt_token_ids=[1, 2], completion_token_ids=[3],
        sampling_logprobs=[-0.5], reward=math.nan, reward_components={"tests": 1.0},
        advantage=0.0, pass_fraction=None, tests_passed=None, tests_total=None,
        test_outcomes=[], status="not_graded", error_type=None, hack_flags=[],
        infra_error=False, sandbox_backend="process", image_digest=None, gen_time_s=0.1,
        exec_time_s=0.2, score_time_s=0.3, config_hash="h", episode_id="2:0:1", turns=1,
        end_reason="submit", completion_mask=None, turn_seconds=None, turn_actions=None,
        turn_observations=None, shaping_reward=None, source="s", kind="io", test_names=[],
        solved=None, answer_executed=None, tool_calls=None, turn_progress=None,
        turn_advantages=None)
    return TrajectoryRow(**{**values, **change})
