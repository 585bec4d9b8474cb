"""The trajectory row record (storage/schema.py `TrajectoryRow`), from which the store's schema
is made: its fields are the columns in order, the writer's among them, and each annotation
agrees with the column its field declares (nullability, kind of value)."""
from __future__ import annotations

import dataclasses
import math
import typing

import pyarrow as pa
import pytest

from storage.schema import (TRAJECTORY_SCHEMA, WRITER_COLUMNS, TrajectoryRow, rows_to_table)

_KINDS = {int: pa.types.is_integer, float: pa.types.is_floating, str: pa.types.is_string,
          bool: pa.types.is_boolean, list: pa.types.is_list, dict: pa.types.is_map}


def _row(**change) -> TrajectoryRow:
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


def test_the_row_record_has_the_schemas_columns_in_its_order_less_the_writers():
    names = [f.name for f in dataclasses.fields(TrajectoryRow)]
    assert names == [n for n in TRAJECTORY_SCHEMA.names if n not in WRITER_COLUMNS]


def test_each_row_field_is_optional_exactly_where_its_column_is_and_holds_its_kind_of_value():
    hints = typing.get_type_hints(TrajectoryRow)
    for f in dataclasses.fields(TrajectoryRow):
        column = TRAJECTORY_SCHEMA.field(f.name)
        args = typing.get_args(hints[f.name])
        optional = type(None) in args
        assert optional == column.nullable, f.name
        base = next(a for a in args if a is not type(None)) if optional else hints[f.name]
        assert _KINDS[typing.get_origin(base) or base](column.type), (f.name, column.type)


def test_a_row_built_without_a_column_is_refused_where_it_is_built():
    values = {f.name: getattr(_row(), f.name) for f in dataclasses.fields(TrajectoryRow)}
    del values["solved"]
    with pytest.raises(TypeError, match="solved"):
        TrajectoryRow(**values)


def test_a_rows_dict_is_stored_as_it_is_with_nan_as_null():
    table = rows_to_table([_row().as_dict()], iteration=2, shard=0)
    got = table.to_pylist()[0]
    assert got["reward"] is None and got["shard"] == 0
    assert got["reward_components"] == [("tests", 1.0)]  # Arrow reads a map as its pairs
    skip = ("reward", "reward_components", "shard", "schema_version", "iteration")
    assert {k: v for k, v in got.items() if k not in skip} == \
        {k: v for k, v in _row().as_dict().items() if k not in skip}
