"""The trajectory schema (one row per rollout: a one-shot completion, or a whole multi-turn
agent episode), the row record a builder fills (`TrajectoryRow`, the same columns) and the
conversion of rows into the schema, refusing anything that does not fit with a message that
names the column.

Version history (bump SCHEMA_VERSION when a column is added, as a field of TrajectoryRow;
never remove or retype a column, readers fill columns that an older file lacks with null):
  1: first version.
  2: multi-turn agent episodes, one row per episode: episode_id, turns, end_reason,
     completion_mask (1 = policy token, 0 = environment token, over completion_token_ids),
     turn_seconds, turn_actions, turn_observations, shaping_reward. Null on single-turn rows.
  3: one environment API: source (the run config's task source), kind (the environment that
     played the episode), test_names (what each of test_outcomes checked, where the kind
     names its checks). episode_id, turns and end_reason are filled on single-turn rows too.
  4: solved (rewards/outcome.py: scored, every hidden test passed, no hack flag; null = not
     scored). Readers fill it for older rows from tests_passed, tests_total, hack_flags and
     infra_error.
  5: answer_executed (the code that ran when it differs from the completion: an instruct
     model's answer less its fences, prose and demo calls, envs/answers.py; null = as is).
  6: tool_calls (episodes played as a chat with tools: each call's turn, name, status, detail
     and test counts, envs/tools.py; null on rows played without tools).
  7: turn_progress (the share of tests each turn's own test run passed, null where it ran
     none) and turn_advantages (each turn's advantage under rl.turn_credit progress; null: every
     policy token has `advantage`). Null on single-turn rows.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

SCHEMA_VERSION = 7

# Partition columns live in the folder names (`iteration=<n>/`), never inside the files: pandas
# (and pyarrow.dataset with inferred partitioning) refuse a dataset in which a hive key also
# exists as a file column ("Unable to merge: Field iteration has incompatible types").
PARTITION_SCHEMA = pa.schema([pa.field("iteration", pa.int64(), nullable=False)])


# One struct per call rather than parallel lists: DuckDB reads it with `UNNEST(tool_calls)`
# and `t.status`, pandas as a list of dicts a row (`df.explode("tool_calls")`), and the fields
# of one call cannot drift apart.
TOOL_CALL = pa.struct([("turn", pa.int32()), ("name", pa.string()), ("status", pa.string()),
                       ("detail", pa.string()), ("tests_passed", pa.int32()),
                       ("tests_total", pa.int32())])
TOOL_CALL_LIST = pa.list_(TOOL_CALL)


def _f(name: str, type_: pa.DataType, doc: str, required: bool = False) -> pa.Field:
    return pa.field(name, type_, nullable=not required, metadata={"doc": doc})


def column(type_: pa.DataType, doc: str, required: bool = False):
    """A field of `TrajectoryRow` that is a column of the store's schema: its Arrow type, its
    meaning (the column's `doc`) and whether it may be null. The row record and the schema are
    this one list of fields; the schema is made from it (`_schema_fields`)."""
    return dataclasses.field(metadata={"column": (type_, doc, required)})


@dataclass(frozen=True)
class TrajectoryRow:
    """One row as a builder (flows/scoring.py `episode_rows`) makes it: every column of
    TRAJECTORY_SCHEMA but WRITER_COLUMNS, in the schema's order, each by name and none left
    out (a column the builder forgets or misspells is a TypeError where the row is built, not
    a silent null). Each field declares its column (`column`): the schema is derived from this
    record, and a test holds each annotation to its column's nullability and kind of value.
    The record itself is what the loop passes on (a stage's inputs and results, the update's
    samples); `rows_to_table` takes it as it is, `from_record` makes one of a row read back
    from the store. NaN in a float column: could not be scored."""

    run_id: str = column(pa.string(), "run that produced the rollout", True)
    iteration: int = column(pa.int64(),
        "training iteration (hive partition, from the folder name)", True)
    policy_version: int = column(pa.int64(),
        "version of the policy that sampled the completion", True)
    task_id: str = column(pa.string(), "task identifier", True)
    suite: str = column(pa.string(), "task suite (procedural, humaneval, ...)", True)
    family: str = column(pa.string(), "task family inside the suite", True)
    difficulty: int = column(pa.int32(), "difficulty level 0..10", True)
    split: str = column(pa.string(), "train or heldout", True)
    sample_index: int = column(pa.int32(), "index of the sample within its group", True)
    group_id: str = column(pa.string(), "GRPO group (samples of one prompt)", True)
    prompt: str | None = column(pa.string(), "text the policy continued")
    completion: str | None = column(pa.string(), "text the policy produced")
    prompt_token_ids: list[int] | None = column(pa.list_(pa.int32()), "token ids of the prompt")
    completion_token_ids: list[int] | None = column(pa.list_(pa.int32()),
        "token ids of the completion")
    sampling_logprobs: list[float] | None = column(pa.list_(pa.float32()),
        "log-prob of each completion token under the sampling policy (float32, as computed)")
    reward: float | None = column(pa.float64(),
        "scalar reward; null (NaN on input) = could not be scored")
    reward_components: dict[str, float] | None = column(pa.map_(pa.string(), pa.float64()),
        "named components the reward was aggregated from, beyond the columns below")
    advantage: float | None = column(pa.float64(), "advantage used by the policy update")
    pass_fraction: float | None = column(pa.float64(),
        "fraction of hidden tests passed; null = not scored")
    tests_passed: int | None = column(pa.int32(), "hidden tests passed")
    tests_total: int | None = column(pa.int32(), "hidden tests run")
    test_outcomes: list[str] | None = column(pa.list_(pa.string()),
        "outcome of each hidden test (pass, fail, error, ...)")
    status: str = column(pa.string(), "outcome of the execution (ok, timeout, error, ...)", True)
    error_type: str | None = column(pa.string(), "first error type, if any")
    hack_flags: list[str] | None = column(pa.list_(pa.string()), "reward-hacking checks that fired")
    infra_error: bool | None = column(pa.bool_(), "the sandbox failed, not the model")
    sandbox_backend: str | None = column(pa.string(), "sandbox backend (process, docker, ...)")
    image_digest: str | None = column(pa.string(), "container image digest, if any")
    gen_time_s: float | None = column(pa.float64(), "seconds spent generating")
    exec_time_s: float | None = column(pa.float64(), "seconds spent executing in the sandbox")
    score_time_s: float | None = column(pa.float64(), "seconds spent scoring")
    config_hash: str | None = column(pa.string(),
        "RunConfig.hash() of the run (what it computes); the same value as the runs view's "
        "config_hash")
    # -- version 2: multi-turn episodes (null on single-turn rows) --------------------------
    episode_id: str | None = column(pa.string(),
        "agent episode (<iteration>:<group>:<sample>); null = one-shot")
    turns: int | None = column(pa.int32(), "policy turns the episode took")
    end_reason: str | None = column(pa.string(),
        "why the episode ended: submit, max_turns, time_budget, context_full")
    completion_mask: list[int] | None = column(pa.list_(pa.int16()),
        "per completion token: 1 = generated by the policy (in the loss), 0 = an observation from "
        "the environment (masked out)")
    turn_seconds: list[float] | None = column(pa.list_(pa.float64()),
        "environment seconds of each turn")
    turn_actions: list[str] | None = column(pa.list_(pa.string()), "the policy's text of each turn")
    turn_observations: list[str] | None = column(pa.list_(pa.string()),
        "the environment's reply to each turn, as the policy saw it (after the token budget)")
    shaping_reward: float | None = column(pa.float64(),
        "per-turn shaping included in `reward` (0 when off)")
    # -- version 3: one environment API ---------------------------------------------------------
    source: str | None = column(pa.string(),
        "task source of the run config the task was drawn from")
    kind: str | None = column(pa.string(),
        "environment kind that played the episode (`rollforge envs`)")
    test_names: list[str] | None = column(pa.list_(pa.string()),
        "what each entry of test_outcomes checked, where the kind names its checks; empty "
        "otherwise")
    # -- version 4: one definition of solved ------------------------------------------------
    solved: bool | None = column(pa.bool_(),
        "every hidden test passed and no hack flag fired (rewards/outcome.py); null = not scored")
    # -- version 5: instruct answers ---------------------------------------------------------
    answer_executed: str | None = column(pa.string(),
        "what was run after the prompt when it differs from `completion` (an instruct model's "
        "answer: its code without fences, prose or demo calls; envs/answers.py); null = the "
        "completion ran as is")
    # -- version 6: tool calls ------------------------------------------------------------------
    tool_calls: list[dict] | None = column(TOOL_CALL_LIST,
        "each tool call of the episode in order (action_format: tools): turn (1-based), name (as "
        "the policy wrote it; empty when unreadable), status (ran, failed, malformed, not_run: "
        "envs/tools.py CALL_STATUSES), detail (why it failed or was malformed), "
        "tests_passed/tests_total (the verb's test run, else null); null = played without tools")
    # -- version 7: turn credit ------------------------------------------------------------------
    turn_progress: list[float | None] | None = column(pa.list_(pa.float64()),
        "per turn: the share of the tests its own test run passed (the agent kind's visible tests,"
        " the repo kind's pytest; flows/episodes.py `turn_progress`), null where the turn ran "
        "none; null on single-turn rows")
    turn_advantages: list[float] | None = column(pa.list_(pa.float64()),
        "per turn: the advantage of its policy tokens under rl.turn_credit progress "
        "(rewards/advantages.py `turn_advantages`); null: every policy token has `advantage`")

    def as_dict(self) -> dict[str, Any]:
        """Column -> value, the values themselves (`dataclasses.asdict` would copy every token
        list element by element)."""
        return {name: getattr(self, name) for name in _ROW_COLUMNS}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "TrajectoryRow":
        """The row of a record read back from the store as Arrow gives it (storage/
        trajectories.py `read_rows`): the writer's columns dropped, a map from its (key,
        value) pairs, a null reward or advantage as NaN (could not be scored, as the builder
        wrote it). A column the record lacks is a TypeError naming it."""
        out = {}
        for f in dataclasses.fields(cls):
            if f.name in record:
                v = record[f.name]
                if v is None and f.name in _NAN_WHEN_NULL:
                    v = math.nan
                elif isinstance(v, list) and pa.types.is_map(f.metadata["column"][0]):
                    v = dict(v)
                out[f.name] = v
        return cls(**out)

    def replace(self, **columns: Any) -> "TrajectoryRow":
        """A copy with `columns` changed (an unknown name is a TypeError)."""
        return dataclasses.replace(self, **columns)


_ROW_COLUMNS = tuple(f.name for f in dataclasses.fields(TrajectoryRow))
_NAN_WHEN_NULL = ("reward", "advantage")  # the store keeps NaN (not scored) as null

# The columns the writer fills (rows_to_table), never a row's builder, each with the column it
# comes after (None: first).
_WRITER_FIELDS = (
    (None, _f("schema_version", pa.int16(), "schema version of the writer of this row", True)),
    ("iteration", _f("shard", pa.int32(), "shard of the iteration the row was written in", True)),
)


def _schema_fields() -> list[pa.Field]:
    """The schema's columns in order: the row record's fields, the writer's columns among them."""
    after = {a: f for a, f in _WRITER_FIELDS}
    out = [after[None]] if None in after else []
    for f in dataclasses.fields(TrajectoryRow):
        out.append(_f(f.name, *f.metadata["column"]))
        if f.name in after:
            out.append(after[f.name])
    return out


_FIELDS = _schema_fields()

TRAJECTORY_SCHEMA = pa.schema(_FIELDS, metadata={"rollforge.schema_version": str(SCHEMA_VERSION)})
"""The logical schema: what readers, the `trajectories` view and `read_trajectories` return."""

FILE_SCHEMA = pa.schema([f for f in _FIELDS if f.name not in PARTITION_SCHEMA.names],
                        metadata=TRAJECTORY_SCHEMA.metadata)
"""What is stored inside each Parquet file: the logical schema less the partition columns."""

WRITER_COLUMNS = tuple(f.name for _, f in _WRITER_FIELDS)
"""Columns the writer fills (rows_to_table), never a row's builder."""

def _kind(t: pa.DataType) -> str:
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list"
    if pa.types.is_map(t):
        return "map"
    if pa.types.is_struct(t):
        return "struct"
    return str(t)


def _compatible(given: pa.DataType, wanted: pa.DataType) -> bool:
    """Strict: no float->int truncation, no number<->string, no string->list-of-chars."""
    if pa.types.is_null(given):
        return True
    g, w = _kind(given), _kind(wanted)
    if w == "float":
        return g in ("float", "int")
    if w == "list":
        return g == "list" and _compatible(given.value_type, wanted.value_type)
    if w == "map":
        return g == "map" or (g == "list" and pa.types.is_null(given.value_type))
    if w == "struct":  # the given fields (any order) a subset of the wanted, each compatible
        names = [wanted.field(i).name for i in range(wanted.num_fields)]
        return g == "struct" and all(
            given.field(i).name in names and _compatible(
                given.field(i).type, wanted.field(names.index(given.field(i).name)).type)
            for i in range(given.num_fields))
    return g == w


def _expected(t: pa.DataType) -> str:
    return {"int": "an integer", "float": "a number", "string": "a string", "bool": "a bool"}.get(
        _kind(t), f"a value of Arrow type {t}")


def _first_bad_row(values: list[Any], field: pa.Field) -> str:
    for i, v in enumerate(values):
        try:
            one = pa.array([v]) if not isinstance(v, Mapping) else pa.array([v], field.type)
            if not _compatible(one.type, field.type):
                raise TypeError
            one.cast(field.type, safe=True)
        except Exception:  # noqa: BLE001 - we are only locating the culprit for the message
            return f" (row {i}: {v!r:.80})"
    return ""


def _struct_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) and pa.types.is_struct(t.value_type)


def _check_struct_keys(name: str, values: list[Any], struct: pa.StructType) -> None:
    """Arrow drops a key its struct does not have; refuse it instead, naming it."""
    known = {struct.field(i).name for i in range(struct.num_fields)}
    for i, v in enumerate(values):
        for item in v or []:
            extra = sorted(set(item) - known) if isinstance(item, Mapping) else []
            if extra:
                raise ValueError(f"column {name!r}: row {i} has key(s) {extra}; its items "
                                 f"have {sorted(known)}")


def _column(name: str, values: list[Any], field: pa.Field) -> pa.Array:
    if _struct_list(field.type):
        _check_struct_keys(name, values, field.type.value_type)
    try:
        if _struct_list(field.type):  # built with its type, after the inferred one is checked:
            inferred = pa.array(values).type  # Arrow would truncate 1.5 into an int32 field
            if not _compatible(inferred, field.type):
                raise TypeError(f"got {inferred}")
            arr = pa.array(values, field.type)
        elif pa.types.is_map(field.type):
            arr = pa.array(values, field.type)
        else:
            arr = pa.array(values)
        if not _compatible(arr.type, field.type):
            raise TypeError(f"got {arr.type}")
        return arr.cast(field.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError) as exc:
        raise ValueError(f"column {name!r}: expected {_expected(field.type)} ({field.type}) in "
                         f"every row{_first_bad_row(values, field)}: {exc}") from None


def _nan_to_null(arr: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """NaN means 'could not be scored'; stored as null so SQL aggregates and filters skip it
    (in DuckDB NaN sorts above every number, so `reward > 0.5` would otherwise match it)."""
    if pa.types.is_floating(arr.type) and len(arr) and pc.any(pc.is_nan(arr)).as_py():
        return pc.if_else(pc.is_nan(arr), pa.scalar(None, arr.type), arr)
    return arr


def _check_required(name: str, arr: pa.Array | pa.ChunkedArray, field: pa.Field) -> None:
    if not field.nullable and arr.null_count:
        first = pc.index(pc.is_null(arr), True).as_py()
        raise ValueError(f"column {name!r} is required but is missing/None in row {first}")


def rows_to_table(rows: Iterable[TrajectoryRow | Mapping[str, Any]], iteration: int,
                  shard: int) -> pa.Table:
    """Rows (`TrajectoryRow`s, or dicts keyed by column name) -> a table in FILE_SCHEMA. A
    dict's missing optional keys are null; an unknown key, a missing required key or a value
    of the wrong type raises ValueError naming the column."""
    rows = [r.as_dict() if isinstance(r, TrajectoryRow) else r for r in rows]
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise ValueError(f"row {i}: expected a TrajectoryRow or a dict of column -> value, "
                             f"got {type(r).__name__}")
    keys: set[str] = set().union(*(r.keys() for r in rows)) if rows else set()
    columns = {k: [r.get(k) for r in rows] for k in keys}
    return _conform(columns, len(rows), iteration, shard)


def table_to_file_table(table: pa.Table, iteration: int, shard: int) -> pa.Table:
    """An Arrow table -> FILE_SCHEMA, with the same checks as rows_to_table (no row copying)."""
    columns = {name: table.column(name) for name in table.column_names}  # no copy
    return _conform(columns, table.num_rows, iteration, shard)


def _conform(columns: dict[str, Any], n: int, iteration: int, shard: int) -> pa.Table:
    unknown = sorted(set(columns) - set(TRAJECTORY_SCHEMA.names))
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; the trajectory schema (version "
                         f"{SCHEMA_VERSION}) has: {', '.join(TRAJECTORY_SCHEMA.names)}")
    for name, value in (("iteration", iteration), ("shard", shard), ("schema_version", SCHEMA_VERSION)):
        if name in columns:
            given = columns[name]
            given = given.to_pylist() if isinstance(given, (pa.Array, pa.ChunkedArray)) else given
            wrong = [v for v in given if v != value]
            if wrong:
                raise ValueError(f"column {name!r}: rows say {wrong[0]!r} but the shard is written "
                                 f"as {name}={value}")
    arrays = []
    for field in FILE_SCHEMA:
        name = field.name
        if name == "schema_version":
            arr = pa.repeat(pa.scalar(SCHEMA_VERSION, pa.int16()), n)
        elif name == "shard":
            arr = pa.repeat(pa.scalar(shard, pa.int32()), n)
        elif name not in columns:
            arr = pa.nulls(n, field.type)
        else:
            given = columns[name]
            if isinstance(given, (pa.Array, pa.ChunkedArray)):
                if not _compatible(given.type, field.type):
                    raise ValueError(f"column {name!r}: expected {_expected(field.type)} "
                                     f"({field.type}), got Arrow type {given.type}")
                try:
                    arr = given.cast(field.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                    raise ValueError(f"column {name!r}: cannot store as {field.type}: {exc}") from None
            else:
                arr = _column(name, given, field)
        arr = _nan_to_null(arr)
        _check_required(name, arr, field)
        arrays.append(arr if isinstance(arr, pa.ChunkedArray) else pa.chunked_array([arr], field.type))
    return pa.Table.from_arrays(arrays, schema=FILE_SCHEMA)
