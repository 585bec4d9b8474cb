"""The evaluations table: one row per graded sample of `rollforge eval --model`.

Layout under a store (beside its run folders; the `_` keeps it out of `registry.list_runs`):

    _evaluations/<eval_id>/spec.json               what the evaluation is (model, sources, n, seed)
    _evaluations/<eval_id>/rows/chunk-<k>.parquet  the rows of chunk k, written once it finished

`eval_id` is a digest of the spec, so the same command finds its own folder again and a killed
evaluation resumes at the first chunk without a file. A chunk file appears by one rename of a
finished temporary file (storage.fs.atomic_write): a reader sees a chunk whole or not at all, and
a rerun never writes a chunk's rows twice (a chunk that is there is skipped, never appended to).

`kind`, `prompt` and `answer_executed` came later (for `rollforge data export --evaluations`),
and `tool_calls` after them: chunk files written before them are read with those columns null.
"""
from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq

from storage.fs import Location, atomic_write, atomic_write_bytes, locate
from storage.schema import TOOL_CALL_LIST

EVAL_DIR = "_evaluations"
_CHUNK = re.compile(r"^chunk-(\d{5})\.parquet$")

EVALUATION_SCHEMA = pa.schema([
    pa.field("eval_id", pa.string()),        # digest of spec.json: one evaluation
    pa.field("model", pa.string()),          # what --model named, resolved (path or known name)
    pa.field("version", pa.int64()),         # the checkpoint's policy version (0 for a base model)
    pa.field("config_hash", pa.string()),    # RunConfig.hash() of the evaluation's config
    pa.field("code_version", pa.string()),   # flows.staging.CODE_VERSION of the writing process
    pa.field("seed", pa.int64()),            # sampling seed
    pa.field("source", pa.string()),
    pa.field("kind", pa.string()),           # the environment that graded it (null in older chunks)
    pa.field("family", pa.string()),
    pa.field("difficulty", pa.int64()),
    pa.field("split", pa.string()),
    pa.field("task_id", pa.string()),
    pa.field("mode", pa.string()),           # "greedy" (1 per task) or "sampled" (n per task)
    pa.field("sample_index", pa.int64()),    # 0..n-1 within the task and mode
    pa.field("prompt", pa.string()),         # the first observation, as text (null in older chunks)
    pa.field("completion", pa.string()),
    pa.field("answer_executed", pa.string()),  # the last action as run, where it differs
    pa.field("reward", pa.float64()),        # null: not scored (infra_error)
    pa.field("passed", pa.bool_()),          # rewards/outcome.solved; null: not scored
    pa.field("tests_passed", pa.int64()),
    pa.field("tests_total", pa.int64()),
    pa.field("status", pa.string()),
    pa.field("hack_flags", pa.list_(pa.string())),
    pa.field("infra_error", pa.bool_()),
    pa.field("turns", pa.int64()),
    pa.field("gen_s", pa.float64()),
    # each tool call of an episode played with tools, as the trajectories' column; else null
    pa.field("tool_calls", TOOL_CALL_LIST),
    pa.field("chunk", pa.int64()),
    pa.field("written_at", pa.string()),     # UTC ISO time the chunk was written
])


def eval_dir(store: str, eval_id: str) -> Location:
    return locate(store).join(EVAL_DIR).join(eval_id)


def write_spec(store: str, eval_id: str, spec: dict) -> None:
    """spec.json of an evaluation (rewritten identically on a resume)."""
    data = json.dumps(spec, indent=2, sort_keys=True).encode()
    atomic_write_bytes(eval_dir(store, eval_id).join("spec.json"), data)


def read_spec(store: str, eval_id: str) -> dict:
    return json.loads(eval_dir(store, eval_id).join("spec.json").read_bytes())


def _chunk_loc(store: str, eval_id: str, chunk: int) -> Location:
    return eval_dir(store, eval_id).join("rows").join(f"chunk-{chunk:05d}.parquet")


def chunks_written(store: str, eval_id: str) -> set[int]:
    rows = eval_dir(store, eval_id).join("rows")
    if not rows.is_dir():
        return set()
    return {int(m.group(1)) for n in rows.names() if (m := _CHUNK.match(n))}


def write_chunk(store: str, eval_id: str, chunk: int, rows: list[dict]) -> Location:
    """Write chunk `chunk`'s rows in one atomic rename; refuses to replace a written chunk
    (its samples were generated and graded once; a second copy would be a different draw)."""
    if chunk in chunks_written(store, eval_id):
        raise FileExistsError(f"evaluation {eval_id}: chunk {chunk} is already written")
    missing = [f.name for f in EVALUATION_SCHEMA if any(f.name not in r for r in rows)]
    if missing:
        raise ValueError(f"evaluation rows lack the columns {missing}")
    table = pa.Table.from_pylist([{f.name: r[f.name] for f in EVALUATION_SCHEMA} for r in rows],
                                 schema=EVALUATION_SCHEMA)

    def write(target) -> None:
        pq.write_table(table, target, compression="zstd")

    return atomic_write(_chunk_loc(store, eval_id, chunk), write)


def live_files(store: str) -> list[str]:
    """Every chunk file of every evaluation in the store (temporaries never match)."""
    root = locate(store).join(EVAL_DIR)
    if not root.is_dir():
        return []
    out = []
    for eid in sorted(root.names()):
        rows = root.join(eid).join("rows")
        if rows.is_dir():
            out += [rows.join(n).path for n in sorted(rows.names()) if _CHUNK.match(n)]
    return out


def read_evaluation(store: str, eval_id: str) -> pa.Table:
    """All rows of one evaluation, in chunk order."""
    files = [_chunk_loc(store, eval_id, c) for c in sorted(chunks_written(store, eval_id))]
    tables = [pq.read_table(f.path, filesystem=None if f.is_local else f.fs,
                            schema=EVALUATION_SCHEMA) for f in files]
    return pa.concat_tables(tables) if tables else EVALUATION_SCHEMA.empty_table()


def has_evaluations(store: str) -> bool:
    root = locate(store).join(EVAL_DIR)
    return root.is_dir() and bool(root.names())


def resolve_evaluations(paths: list[str]) -> list[tuple[str, str]]:
    """(store, eval_id) of every evaluation that the inputs name: an evaluation's folder
    (`<store>/_evaluations/<eval_id>`, holding spec.json), a store's `_evaluations` folder, or
    a store that holds one. FileNotFoundError names an input that is missing or holds none."""
    found: list[tuple[str, str]] = []
    for p in paths:
        loc = locate(p)
        if not loc.is_dir():
            raise FileNotFoundError(f"evaluations {p!r} do not exist (expected a store holding "
                                    f"{EVAL_DIR}/, that folder, or one evaluation's folder)")
        if "spec.json" in loc.names():
            evals = [(loc.parent().parent().uri, loc.name)]
        else:
            root = loc if loc.name == EVAL_DIR else loc.join(EVAL_DIR)
            store = loc.parent().uri if loc.name == EVAL_DIR else loc.uri
            evals = ([(store, e) for e in sorted(root.names()) if root.join(e).is_dir()
                      and "spec.json" in root.join(e).names()] if root.is_dir() else [])
        if not evals:
            raise FileNotFoundError(f"evaluations {p!r} hold no evaluation (no {EVAL_DIR}/"
                                    "<eval_id>/spec.json; `rollforge eval --model` writes them)")
        found += [e for e in evals if e not in found]
    return found
