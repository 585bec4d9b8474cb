"""Verified trajectories and evaluation samples of the store as an SFT dataset (rejection
sampling: the next round's data from this round's successes).

The rows are runs' trajectories, evaluations' graded samples (`rollforge eval --model`,
storage/evaluations.py), or both. A row is kept when it was verified: status ok, no infra
error, no hack or tamper flag, and `solved` (every hidden test passed; rewards/outcome.py) or,
with a threshold, reward >= it.
Then, per task: optionally one example per normalised answer (dedup) and at most N examples.
A task held out by any input run never reaches the train split (`heldout_task`), nor does a task
that an input evaluation held out (its rows' split), unless `train_on_evaluated_heldout` releases
those (the manifest lists them: a model trained on them has no held-out claim on them). The other
tasks are split by task (never by row, so a task's examples stay on one side) into train and
validation by a hash of (seed, task id).

Output: one folder with `<split>.jsonl` (chat messages, one example a line), `<split>.parquet`
(the same columns) and `manifest.json` (inputs, filters, counts kept and dropped by reason).
The folder is built under a temporary name and renamed into place, so a failed export leaves
no partial dataset. Local folders only for the output (the inputs may be any fsspec URI).
"""
from __future__ import annotations

import ast
import hashlib
import io
import json
import math
import os
import shutil
import textwrap
import tokenize
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rewards import pyast
from rewards.outcome import SOLVED_FACTS, fill_solved
from storage import evaluations, registry, trajectories
from storage.fs import locate

# Why a row was left out, in the order the checks run (a row counts under its first reason).
DROP_REASONS = ("status_not_ok", "infra_error", "unscored", "hack_flag", "below_threshold",
                "no_text", "multi_turn", "heldout_task", "duplicate", "task_cap")
SPLITS = ("train", "validation", "heldout")
PROVENANCE = ("run_id", "iteration", "policy_version", "task_id", "kind", "source", "family",
              "reward", "config_hash")
# An evaluation row's own provenance (its policy_version is the evaluated version; run_id and
# iteration are null), and every example's origin ("trajectory" or "evaluation") and task_split
# (the split its source gave the task: "heldout" on a train example means it was released).
EVAL_PROVENANCE = ("eval_id", "model", "mode")
EXAMPLE_FIELDS = PROVENANCE + EVAL_PROVENANCE + ("origin", "task_split")
_RUN_MARKS = ("run.json", "config.yaml", "trajectories")


@dataclass(frozen=True)
class ExportOptions:
    """What `rollforge data export` keeps. min_reward None: the row must be `solved`."""

    min_reward: float | None = None
    dedup: bool = False
    per_task_cap: int | None = None
    validation_fraction: float = 0.0
    keep_heldout: bool = False  # write held-out tasks' examples to heldout.* instead of dropping
    seed: int = 0
    # Tasks held out only by an input evaluation's rows go to train/validation like any other:
    # off by default, since an evaluation is usually on held-out tasks, the ones a later
    # held-out (transfer) figure is measured on. Tasks a run holds out stay held out.
    train_on_evaluated_heldout: bool = False

    def __post_init__(self) -> None:
        if self.min_reward is not None and not (isinstance(self.min_reward, (int, float))
                                                and math.isfinite(self.min_reward)):
            raise ValueError(f"min_reward={self.min_reward!r}: expected a finite number")
        if self.per_task_cap is not None and (isinstance(self.per_task_cap, bool)
                                              or not isinstance(self.per_task_cap, int)
                                              or self.per_task_cap < 1):
            raise ValueError(f"per_task_cap={self.per_task_cap!r}: expected an integer >= 1")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction={self.validation_fraction!r}: expected "
                             "0 <= fraction < 1")


@dataclass
class ExportResult:
    out_dir: str
    kept: dict[str, int] = field(default_factory=dict)       # per split
    dropped: dict[str, int] = field(default_factory=dict)    # per reason
    rows_read: int = 0
    released: list[str] = field(default_factory=list)  # held-out tasks let into train/validation
    notes: list[str] = field(default_factory=list)
    evaluations: int = 0  # evaluations read


def resolve_runs(paths: list[str]) -> list[str]:
    """Each input is a run folder (it holds run.json, config.yaml or trajectories/) or a store
    of runs (as `rollforge query --store` takes it). FileNotFoundError names a missing input or
    one without runs."""
    runs: list[str] = []
    for p in paths:
        loc = locate(p)
        if not loc.is_dir():
            raise FileNotFoundError(f"store {p!r} does not exist (expected a run folder or a "
                                    "folder of runs)")
        if any(m in loc.names() for m in _RUN_MARKS):
            found = [loc.uri]
        else:
            found = registry.list_runs(p)
        if not found:
            hint = (f"; it holds evaluations: pass --evaluations {p} to export them"
                    if evaluations.has_evaluations(p) else "")
            raise FileNotFoundError(f"store {p!r} holds no run (no run.json, config.yaml or "
                                    f"trajectories/ in it or in its sub-folders){hint}")
        runs += [r for r in found if r not in runs]
    return runs


# What the selection and the examples read: never the token ids and log-probs, which are most
# of a store's bytes.
COLUMNS = sorted(set(PROVENANCE) | set(SOLVED_FACTS) | {
    "shard", "sample_index", "split", "status", "solved", "prompt", "completion", "turns",
    "answer_executed"})


def _read_run(run: str) -> pd.DataFrame:
    table = trajectories.retrying(lambda: trajectories.open_dataset(run).to_table(columns=COLUMNS),
                                  f"reading {run}")
    return fill_solved(table.to_pandas())


def read_runs(runs: list[str]) -> pd.DataFrame:
    """The trajectory rows of the runs (the columns of COLUMNS), in run order."""
    return _concat([_read_run(r).assign(origin="trajectory") for r in runs])


_INTS = ("iteration", "policy_version", "shard", "sample_index", "turns")


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    cols = COLUMNS + list(EVAL_PROVENANCE) + ["origin", "code_version"]
    frames = [f.reindex(columns=cols) for f in frames if len(f)]
    out = (pd.concat(frames, ignore_index=True) if frames
           else pd.DataFrame({c: pd.Series(dtype=object) for c in cols}))
    return out.astype({c: "Int64" for c in _INTS})  # a run's ints beside an evaluation's nulls


def _read_evaluation(store: str, eval_id: str) -> pd.DataFrame:
    """An evaluation's rows in the columns of a trajectory row (chunk as shard, passed as
    solved, version as policy_version)."""
    rows = evaluations.read_evaluation(store, eval_id).to_pandas()
    rows = rows.rename(columns={"chunk": "shard", "passed": "solved",
                                "version": "policy_version"})
    return rows.assign(origin="evaluation", run_id=None, iteration=None)


def read_evaluations(evals: list[tuple[str, str]]) -> pd.DataFrame:
    """The rows of the evaluations ((store, eval_id) pairs), in the columns read_runs gives."""
    return _concat([_read_evaluation(s, e) for s, e in evals])


def describe_evaluations(evals: list[tuple[str, str]], rows: pd.DataFrame
                         ) -> tuple[list[dict], list[str]]:
    """(each evaluation's provenance for the manifest, notes on unfinished ones and on rows
    written before evaluation rows carried their prompt)."""
    info, notes = [], []
    for store, eid in evals:
        spec = evaluations.read_spec(store, eid)
        mine = rows[rows["eval_id"] == eid] if len(rows) else rows
        written = len(evaluations.chunks_written(store, eid))
        expected = -(-int(spec.get("tasks", 0)) // max(int(spec.get("chunk_size", 1)), 1))
        info.append({"eval_id": eid, "store": store, "model": spec.get("model"),
                     "version": spec.get("version"), "config_hash": spec.get("config_hash"),
                     # a resumed evaluation's chunks may come from several versions of the code
                     "code_versions": sorted(set(mine["code_version"].dropna())),
                     "seed": spec.get("seed"), "split": spec.get("split"), "n": spec.get("n"),
                     "sources": spec.get("sources"), "chunks_written": written,
                     "chunks": expected, "rows": len(mine)})
        if written < expected:
            notes.append(f"evaluation {eid} ({spec.get('model')}): {written} of {expected} "
                         "chunks written (unfinished); its written rows are read")
        no_prompt = int(mine["prompt"].isna().sum()) if len(mine) else 0
        if no_prompt:
            notes.append(f"evaluation {eid}: {no_prompt} rows were written before evaluation "
                         "rows carried their prompt; they are dropped as no_text")
    return info, notes


def heldout_from_rows(rows: pd.DataFrame) -> set[str]:
    """Task ids that any row records as held out (split = heldout)."""
    if not len(rows):
        return set()
    return set(rows.loc[rows["split"] == "heldout", "task_id"].astype(str))


def normalise_answer(text: str) -> str:
    """The answer less what does not change it: for Python, comments, blank lines and layout
    (through the AST where the text parses, else through its tokens); for anything else,
    runs of whitespace. Two answers that differ only there count as one in dedup."""
    src = textwrap.dedent(text or "")
    try:
        return ast.unparse(pyast.parse(src))
    except (SyntaxError, ValueError):
        pass
    try:  # a fragment (a function body cut mid-way): drop comments, keep the tokens
        skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                tokenize.DEDENT, tokenize.ENDMARKER}
        toks = [t.string for t in tokenize.generate_tokens(io.StringIO(src).readline)
                if t.type not in skip]
        return " ".join(toks)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return " ".join(src.split())


def _flag(v) -> bool | None:  # noqa: ANN001 - a nullable bool as pandas gives it back
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else bool(v)


def _first_reason(r, opts: ExportOptions) -> str | None:  # noqa: ANN001 - a namedtuple row
    if r.status != "ok":
        return "status_not_ok"
    if _flag(r.infra_error):
        return "infra_error"
    reward, solved = _py(r.reward), _flag(r.solved)
    if reward is None or (opts.min_reward is None and solved is None):
        return "unscored"
    if r.hack_flags is not None and len(r.hack_flags):
        return "hack_flag"
    if (opts.min_reward is None and not solved) or (
            opts.min_reward is not None and reward < opts.min_reward):
        return "below_threshold"
    if not isinstance(r.prompt, str) or not isinstance(r.completion, str) or not r.completion.strip():
        return "no_text"
    if _py(r.turns) is not None and int(r.turns) > 1:
        return "multi_turn"  # tool/observation turns: not exported as messages yet
    return None


def _split_of(task_id: str, heldout: set[str], opts: ExportOptions) -> str:
    if task_id in heldout:
        return "heldout"
    h = int(hashlib.sha256(f"{opts.seed}:{task_id}".encode()).hexdigest()[:12], 16) / 16 ** 12
    return "validation" if h < opts.validation_fraction else "train"


def select(rows: pd.DataFrame, heldout: set[str], opts: ExportOptions
           ) -> tuple[pd.DataFrame, dict[str, int]]:
    """(kept rows with a `split` column, dropped count per reason)."""
    dropped = dict.fromkeys(DROP_REASONS, 0)
    if not len(rows):
        return rows.assign(split=pd.Series(dtype=str)), dropped
    reasons = [_first_reason(r, opts) for r in rows.itertuples(index=False)]
    for reason in reasons:
        if reason:
            dropped[reason] += 1
    kept = rows[[r is None for r in reasons]].copy()
    kept["task_split"] = kept["split"]
    kept["split"] = [_split_of(str(t), heldout, opts) for t in kept["task_id"]]
    if not opts.keep_heldout:
        dropped["heldout_task"] += int((kept["split"] == "heldout").sum())
        kept = kept[kept["split"] != "heldout"]
    # Best first, then the store's order: dedup and the cap keep the highest rewards.
    keys = ["task_id", "reward", "origin", "run_id", "eval_id", "iteration", "shard", "mode",
            "sample_index"]
    kept = kept.sort_values(keys, ascending=[k != "reward" for k in keys], kind="stable")
    if opts.dedup:
        answers = [normalise_answer(a if isinstance(a, str) else c)
                   for a, c in zip(kept["answer_executed"], kept["completion"])]
        dup = pd.Series(list(zip(kept["task_id"], answers)), index=kept.index).duplicated()
        dropped["duplicate"] = int(dup.sum())
        kept = kept[~dup.to_numpy()]
    if opts.per_task_cap is not None:
        rank = kept.groupby("task_id").cumcount()
        dropped["task_cap"] = int((rank >= opts.per_task_cap).sum())
        kept = kept[(rank < opts.per_task_cap).to_numpy()]
    return kept.reset_index(drop=True), dropped


def _py(v):  # noqa: ANN001, ANN202 - numpy scalars, NaN and NA -> what JSON writes
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def examples(kept: pd.DataFrame) -> list[dict]:
    """One chat example per kept row: the recorded prompt (the environment's first observation,
    as text, before the policy's chat template) as the user turn, the completion as the
    assistant's, and the row's provenance."""
    out = []
    for r in kept.to_dict("records"):
        ex = {"messages": [{"role": "user", "content": r["prompt"]},
                           {"role": "assistant", "content": r["completion"]}]}
        ex.update({k: _py(r.get(k)) for k in PROVENANCE + EVAL_PROVENANCE})
        ex.update(origin=r["origin"], task_split=_py(r.get("task_split")), split=r["split"])
        out.append(ex)
    return out


_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
EXAMPLE_SCHEMA = pa.schema([
    ("messages", pa.list_(_MESSAGE)), ("run_id", pa.string()), ("iteration", pa.int64()),
    ("policy_version", pa.int64()), ("task_id", pa.string()), ("kind", pa.string()),
    ("source", pa.string()), ("family", pa.string()), ("reward", pa.float64()),
    ("config_hash", pa.string()), ("eval_id", pa.string()), ("model", pa.string()),
    ("mode", pa.string()), ("origin", pa.string()), ("task_split", pa.string()),
    ("split", pa.string())])


def _write_folder(tmp: str, by_split: dict[str, list[dict]], manifest: dict) -> None:
    os.makedirs(tmp)
    for split, exs in by_split.items():
        with open(os.path.join(tmp, f"{split}.jsonl"), "w", encoding="utf-8") as f:
            for ex in exs:
                f.write(json.dumps(ex, ensure_ascii=False) + "\n")
        pq.write_table(pa.Table.from_pylist(exs, schema=EXAMPLE_SCHEMA),
                       os.path.join(tmp, f"{split}.parquet"), compression="zstd")
    with open(os.path.join(tmp, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
    for name in os.listdir(tmp):  # durable before the rename makes the folder visible
        fd = os.open(os.path.join(tmp, name), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def check_out_dir(out_dir: str, overwrite: bool) -> None:
    """Refuse an `--out` that is remote, a file, or a non-empty folder without `overwrite`
    (the CLI calls it before minutes of reading)."""
    if "://" in out_dir and not out_dir.startswith("file://"):
        raise ValueError(f"--out {out_dir!r}: the dataset is written to a local folder")
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise FileExistsError(f"--out {out_dir!r} is a file; expected a folder (absent or empty)")
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not overwrite:
        raise FileExistsError(f"--out {out_dir!r} is not empty; pass --overwrite to replace it")


def write_dataset(out_dir: str, kept: pd.DataFrame, manifest: dict, overwrite: bool = False) -> None:
    """Write every split's JSONL and Parquet and the manifest into a temporary sibling folder,
    then rename it to `out_dir` (a replaced folder is moved aside first and deleted after): a
    reader sees the old dataset or the new one, and an error leaves no partial one."""
    check_out_dir(out_dir, overwrite)
    out_dir = os.path.abspath(out_dir.removeprefix("file://"))
    exs = examples(kept)
    by_split = {s: [e for e in exs if e["split"] == s] for s in SPLITS}
    by_split = {s: e for s, e in by_split.items() if e or s == "train"}
    parent, name = os.path.split(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{name}.tmp-{uuid.uuid4().hex[:12]}")
    old = None
    try:
        _write_folder(tmp, by_split, manifest)
        if os.path.isdir(out_dir):
            old = os.path.join(parent, f".{name}.old-{uuid.uuid4().hex[:12]}")
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old and not os.path.exists(out_dir):
            os.replace(old, out_dir)  # put the previous dataset back
            old = None
        raise
    if old:
        shutil.rmtree(old, ignore_errors=True)


def export(inputs: list[str], out_dir: str, opts: ExportOptions, heldout: set[str] | None = None,
           runs: list[str] | None = None, overwrite: bool = False,
           eval_inputs: list[str] = ()) -> ExportResult:
    """Read the runs of `inputs` and the evaluations of `eval_inputs`, select (see `select`),
    write the dataset. `heldout`: task ids held out by the runs' configs (the caller rebuilds
    them; this layer reads no config); the runs' rows' held-out tasks are added, and the
    evaluations' rows' held-out tasks unless `opts.train_on_evaluated_heldout`."""
    runs = runs if runs is not None else resolve_runs(inputs)
    evals = evaluations.resolve_evaluations(list(eval_inputs)) if eval_inputs else []
    run_rows, eval_rows = read_runs(runs), read_evaluations(evals)
    info, notes = describe_evaluations(evals, eval_rows)
    rows = _concat([run_rows, eval_rows])
    held = set(heldout or ()) | heldout_from_rows(run_rows)
    evaluated = heldout_from_rows(eval_rows) - held  # held out by an evaluation only
    if not opts.train_on_evaluated_heldout:
        held |= evaluated
    kept, dropped = select(rows, held, opts)
    counts = {s: int((kept["split"] == s).sum()) for s in SPLITS} if len(kept) else dict.fromkeys(SPLITS, 0)
    released = (sorted(evaluated & set(kept["task_id"])) if opts.train_on_evaluated_heldout
                else [])  # the evaluated held-out tasks that now have train/validation examples
    manifest = {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "inputs": list(inputs), "runs": runs, "evaluation_inputs": list(eval_inputs),
        "evaluations": info,
        "filters": {**asdict(opts), "verified": "status ok, no infra error, no hack flag, "
                    + ("solved" if opts.min_reward is None else f"reward >= {opts.min_reward}")},
        "heldout_tasks": len(held), "heldout_tasks_released": released,
        "rows_read": len(rows), "rows_read_from_evaluations": len(eval_rows),
        "kept": counts, "dropped": dropped,
        "format": {"jsonl": "one {messages: [user, assistant], provenance...} per line",
                   "provenance": list(EXAMPLE_FIELDS)},
    }
    write_dataset(out_dir, kept, manifest, overwrite=overwrite)
    return ExportResult(out_dir, counts, dropped, len(rows), released, notes, len(evals))


def read_examples(path: str, split: str = "train") -> list[dict]:
    """The examples of an exported dataset: `path` is its folder (its `<split>.parquet`) or one
    .parquet / .jsonl file of examples. Each must hold `messages` = [user, assistant] and a
    `task_id`; ValueError names the file and the example that does not."""
    if os.path.isdir(path):
        path = os.path.join(path, f"{split}.parquet")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no SFT dataset at {path!r} (expected a folder written by "
                                "`rollforge data export`, or its .parquet / .jsonl file)")
    if path.endswith(".parquet"):
        exs = pq.read_table(path).to_pylist()
    elif path.endswith(".jsonl"):
        with open(path, encoding="utf-8") as f:
            exs = [json.loads(line) for line in f if line.strip()]
    else:
        raise ValueError(f"{path!r}: expected a .parquet or .jsonl file of examples")
    for i, ex in enumerate(exs):
        msgs = ex.get("messages") if isinstance(ex, dict) else None
        roles = [m.get("role") for m in msgs] if isinstance(msgs, list) else None
        if roles != ["user", "assistant"] or not all(isinstance(m.get("content"), str) for m in msgs):
            raise ValueError(f"{path}: example {i}: expected messages = [user, assistant] with "
                             f"text content, got roles {roles}")
        if not isinstance(ex.get("task_id"), str):
            raise ValueError(f"{path}: example {i}: no task_id (the warm start keeps the run's "
                             "held-out tasks out by it)")
    return exs
