"""Task files: JSONL (one `Task.model_dump(mode="json")` per line) and Parquet, validated on load.

A bad record is refused with the file and the line (JSONL, 1-based) or row (Parquet, 0-based)
where it is, and which field is wrong: the common fields here, the kind's own (its payload, a
function's entry point) through the `validate` callback that the caller passes
(`envs.registry.validate_by_kind`, or a source's own check in `envs.sources`). Export then
import gives back equal `Task`s.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable

from pydantic import ValidationError

from tasks.record import Task

# Parquet holds the nested, heterogeneous JSON values of tests/examples as JSON text columns.
_JSON_COLUMNS = ("tests", "examples", "payload")
_FORMAT_KEY = b"rollforge.tasks"
_FORMAT_VERSION = b"1"


class TaskFileError(ValueError):
    """A task file that cannot be used; `where` is 'FILE:LINE' or 'FILE: row N'."""

    def __init__(self, path: str | os.PathLike, where: str, message: str) -> None:
        self.path, self.where, self.message = str(path), where, message
        super().__init__(f"{where}: {message}")


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "record"
        value = err.get("input")
        shown = repr(value) if not isinstance(value, dict) else "{...}"
        if len(shown) > 60:
            shown = shown[:57] + "..."
        parts.append(f"field {loc!r}: {err['msg']} (got {shown})")
    return "; ".join(parts)


Validate = Callable[[Task], Any]  # raises ValueError naming the field


def parse_record(record: Any, path: str | os.PathLike, where: str,
                 validate: Validate | None = None) -> Task:
    """Validate one record (a dict) into a Task, or raise TaskFileError naming `where`."""
    if not isinstance(record, dict):
        raise TaskFileError(path, where, f"expected a JSON object, got {type(record).__name__}")
    if "verifier" in record:
        raise TaskFileError(path, where, "field 'verifier' is the old name of 'kind': rename it "
                                         "(the kind that grades the task, `rollforge envs`)")
    try:
        task = Task.model_validate(record)
    except ValidationError as exc:
        raise TaskFileError(path, where, _describe(exc)) from None
    if validate is not None:
        try:
            validate(task)
        except ValueError as exc:
            raise TaskFileError(path, where, str(exc)) from None
    return task


def _check_unique(tasks_where: list[tuple[Task, str]], path: str | os.PathLike) -> list[Task]:
    first: dict[str, str] = {}
    for task, where in tasks_where:
        if task.task_id in first:
            raise TaskFileError(path, where, f"duplicate task_id {task.task_id!r} "
                                             f"(first at {first[task.task_id]})")
        first[task.task_id] = where
    return [t for t, _ in tasks_where]


def _load_jsonl(path: Path, validate: Validate | None) -> list[Task]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            where = f"{path}:{n}"
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise TaskFileError(path, where, f"not valid JSON ({exc.msg} at column "
                                                 f"{exc.colno})") from None
            out.append((parse_record(record, path, where, validate), where))
    return _check_unique(out, path)


def _load_parquet(path: Path, validate: Validate | None) -> list[Task]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
        raise TaskFileError(path, str(path), f"not a readable Parquet file ({exc})") from None
    missing = sorted({"task_id", "prompt"} - set(table.column_names))
    if missing:
        raise TaskFileError(path, str(path), f"missing columns {missing}; "
                                             f"expected the Task fields {list(Task.model_fields)}")
    out = []
    for i, row in enumerate(table.to_pylist()):
        where = f"{path}: row {i}"
        record = {k: v for k, v in row.items() if not (k in _OPTIONAL_NULLABLE and v is None)}
        for col in _JSON_COLUMNS:
            if isinstance(record.get(col), str):
                try:
                    record[col] = json.loads(record[col])
                except ValueError as exc:
                    raise TaskFileError(path, where, f"field {col!r}: not valid JSON "
                                                     f"({exc.msg})") from None
        out.append((parse_record(record, path, where, validate), where))
    return _check_unique(out, path)


# Columns a Parquet writer may leave null to mean "the default".
_OPTIONAL_NULLABLE = {"examples", "kind", "payload", "entry_point", "tests", "source"}


def load_tasks(path: str | os.PathLike, validate: Validate | None) -> list[Task]:
    """Read a .jsonl or .parquet task file; raise TaskFileError at the first bad record
    (`validate(task)` raising ValueError makes a record bad too). The caller names the check,
    None for none: the kinds live above this layer, and `envs.registry.validate_by_kind` is
    the check of each record's own kind."""
    p = Path(path)
    if not p.is_file():
        raise TaskFileError(p, str(p), "no such file")
    if p.suffix == ".parquet":
        return _load_parquet(p, validate)
    if p.suffix in (".jsonl", ".json", ".ndjson"):
        return _load_jsonl(p, validate)
    raise TaskFileError(p, str(p), f"unknown extension {p.suffix!r}; expected .jsonl or .parquet")


def _records(tasks: Iterable[Task]) -> list[dict]:
    return [t.model_dump(mode="json") for t in tasks]


def save_tasks(tasks: Iterable[Task], path: str | os.PathLike) -> Path:
    """Write tasks to .jsonl or .parquet (by extension), atomically (temp file, then rename)."""
    p = Path(path)
    records = _records(tasks)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        fields = list(Task.model_fields)
        cols = {f: [r[f] for r in records] for f in fields}
        for c in _JSON_COLUMNS:
            cols[c] = [json.dumps(v) for v in cols[c]]
        schema = pa.schema([(f, pa.int64() if f == "difficulty" else pa.string()) for f in fields],
                           metadata={_FORMAT_KEY: _FORMAT_VERSION})
        pq.write_table(pa.table(cols, schema=schema), tmp)
    elif p.suffix in (".jsonl", ".ndjson"):
        with open(tmp, "w", encoding="utf-8") as fh:
            for r in records:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    else:
        raise ValueError(f"task file {str(p)!r}: unknown extension {p.suffix!r}; "
                         f"expected .jsonl or .parquet")
    os.replace(tmp, p)
    return p
