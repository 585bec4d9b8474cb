"""The trajectory row record (storage/schema.py `TrajectoryRow`), from which the store's schema
is made: its fields are the columns in order, the writer's among them, and each annotation
agrees with the column its field declares (nullability, kind of value)."""
from __future__ import annotations

import dataclasses
import math
import typing

import pyarrow as pa
import pytest

from row_factory import make_row
from storage import trajectories
from storage.schema import (TRAJECTORY_SCHEMA, WRITER_COLUMNS, TrajectoryRow, rows_to_table)

_KINDS = {int: pa.types.is_integer, float: pa.types.is_floating, str: pa.types.is_string,
          bool: pa.types.is_boolean, list: pa.types.is_list, dict: pa.types.is_map}


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
    values = {f.name: getattr(make_row(), f.name) for f in dataclasses.fields(TrajectoryRow)}
    del values["solved"]
    with pytest.raises(TypeError, match="solved"):
        TrajectoryRow(**values)


def test_a_rows_dict_is_stored_as_it_is_with_nan_as_null():
    table = rows_to_table([make_row().as_dict()], iteration=2, shard=0)
    got = table.to_pylist()[0]
    assert got["reward"] is None and got["shard"] == 0
    assert got["reward_components"] == [("tests", 1.0)]  # Arrow reads a map as its pairs
    skip = ("reward", "reward_components", "shard", "schema_version", "iteration")
    assert {k: v for k, v in got.items() if k not in skip} == \
        {k: v for k, v in make_row().as_dict().items() if k not in skip}


def test_a_row_read_back_from_the_store_is_the_row_written(tmp_path):
    multi = make_row(
        reward=0.5, tests_passed=None, completion_mask=[1, 0, 1], turns=2,
        turn_seconds=[0.1, 0.2], turn_actions=["a", "b"], turn_observations=["o", "p"],
        tool_calls=[{"turn": 1, "name": "shell", "status": "ran", "detail": "d",
                     "tests_passed": 1, "tests_total": 2}],
        turn_progress=[0.5, None], turn_advantages=[0.25, -0.5])
    unscored = make_row(sample_index=2, episode_id="2:0:2")  # reward NaN
    trajectories.write_shard(str(tmp_path), 2, 0, [multi, unscored])
    back = trajectories.read_rows(str(tmp_path), 2)
    assert back[0] == multi
    assert math.isnan(back[1].reward) and back[1].replace(reward=0.0) == unscored.replace(
        reward=0.0)
    assert type(back[0].prompt_token_ids) is list and type(back[0].prompt_token_ids[0]) is int
