"""Plain stage logic the flow's Prefect tasks call: no Prefect here, so tests can call it directly."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import math
import os
import pickle
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from envs.base import Environment
from envs.io.procedural import GENERIC_NAMES
from envs.registry import env_for_task
from envs.sources import SourceConfig, allocate, build_pool, sft_tasks_of
from flows.config import RunConfig, task_sources
from flows.episode_exec import Stepped
from rewards import outcome
from rewards.outcome import SOLVED_FACTS, fill_solved
from storage.schema import TrajectoryRow
from tasks.curriculum import (TRAJECTORY_COLUMNS, CurriculumConfig, DifficultyLedger,
                              informative_groups, sample_batch)
from tasks.record import Task

_CODE_FILES = ("envs", "flows", "tasks", "sandbox", "rewards", "storage", "training")


def code_version(root: Path | None = None) -> str:
    """Hash of the package's source: a stage's cached result is reused only by the same code.
    Each file counts by its path from the repository root and its bytes (length-prefixed, so
    no two trees hash alike): a file moved, or two of one name in two folders, is other code."""
    root = root or Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for d in _CODE_FILES:
        for p in sorted((root / d).rglob("*.py")):
            rel, data = p.relative_to(root).as_posix().encode(), p.read_bytes()
            h.update(b"%d:%s%d:" % (len(rel), rel, len(data)))
            h.update(data)
    return h.hexdigest()[:12]


def task_pool(cfg: RunConfig) -> list[Task]:
    """Every task of the run's sources, each labelled with its source (envs/sources.py)."""
    return build_pool(task_sources(cfg))


def env_of(cfg: RunConfig):
    """task -> the environment that plays it: its source's kind, else the task's own."""
    by_source = {s.label: s.environment() for s in task_sources(cfg)}

    def env(task: Task) -> Environment:
        return by_source.get(task.source) or env_for_task(task)
    return env


def sft_data(cfg: RunConfig) -> list[tuple[SourceConfig, list[Task]]]:
    """The warm start's tasks per source: training-split tasks with a reference (for the
    procedural functions, drawn with `sft_variants` seeds; never a held-out task)."""
    return [(s, sft_tasks_of(s)) for s in task_sources(cfg)]


def probe_split(tasks: list[Task], n: int,
                generic_names: bool = True) -> tuple[list[Task], list[Task]]:
    """(probe, rest) of the warm start's tasks with a reference: the `n` distinct prompts first
    by a hash of (task id, prompt) are the probe (`sft.until_pass`), and no task with a probe
    prompt is trained on. The same tasks on every machine and in every process.
    `generic_names=False`: no task shown under a name of `envs.io.procedural.GENERIC_NAMES` is
    a probe task (it is trained on)."""
    with_ref = [t for t in tasks if t.reference is not None]
    eligible = with_ref if generic_names else [
        t for t in with_ref if t.entry_point not in GENERIC_NAMES]
    order = sorted(eligible, key=lambda t: hashlib.sha256(
        f"{t.task_id}\0{t.prompt}".encode()).hexdigest())
    probe, seen = [], set()
    for t in order:
        if len(probe) == n:
            break
        if t.prompt not in seen:
            seen.add(t.prompt)
            probe.append(t)
    return probe, [t for t in with_ref if t.prompt not in seen]


def replay_pairs(cfg: RunConfig) -> tuple[tuple[str, str], ...]:
    """(prompt, reference) of the single-turn warm start's data, for `rl.replay_coef`: built
    once per process and sources (about a second for the default mix)."""
    return _replay_pairs(json.dumps([s.model_dump(mode="json") for s in task_sources(cfg)],
                                    sort_keys=True))


@functools.lru_cache(maxsize=4)
def _replay_pairs(sources_json: str) -> tuple[tuple[str, str], ...]:
    out = []
    for raw in json.loads(sources_json):
        src = SourceConfig.model_validate(raw)
        env = src.environment()
        if env is not None and env.max_turns > 1:
            continue  # an agent source's warm start is demonstrations, not pairs
        out += [(t.prompt, t.reference) for t in sft_tasks_of(src) if t.reference]
    return tuple(out)


def curriculum_config(cfg: RunConfig) -> CurriculumConfig:
    """The sampler's settings: its defaults, the run's switch and the run's group size."""
    return CurriculumConfig(strategy=cfg.tasks.sampler, group_size=cfg.sampling.group_size,
                            balance_families=cfg.tasks.balance_families)


# run dir -> (the (iteration, its files) folded in, in order; the ledger of them): an
# iteration's files never change (a rewrite or compaction names new ones), so each iteration's
# rows are read and folded in once per process, and an iteration costs its own rows, not all
# the run's so far.
_LEDGERS: dict[str, tuple[tuple, DifficultyLedger]] = {}
_LEDGERS_LOCK = threading.Lock()


def ledger_frame(run_dir: str, before_iteration: int) -> pd.DataFrame:
    """The difficulty ledger of this run from its stored trajectories of earlier iterations
    (dropped groups included: they say which tasks are always or never solved)."""
    from storage import trajectories  # noqa: PLC0415

    columns = list(dict.fromkeys(TRAJECTORY_COLUMNS + SOLVED_FACTS))
    want = tuple((it, tuple(trajectories.live_files(run_dir, it)))
                 for it in trajectories.iterations_written(run_dir) if it < before_iteration)
    with _LEDGERS_LOCK:
        done, ledger = _LEDGERS.get(run_dir, ((), DifficultyLedger()))
        if want[:len(done)] != done:  # not an extension (rewritten files, an earlier point)
            done, ledger = (), DifficultyLedger()
        for it, _files in want[len(done):]:
            rows = trajectories.retrying(
                lambda: trajectories.open_dataset(run_dir, it).to_table(columns=columns)
                .to_pandas(), f"reading {run_dir}")
            ledger = ledger.update(fill_solved(rows))
        _LEDGERS[run_dir] = (want, ledger)
    return ledger.to_frame()


def pick_tasks(cfg: RunConfig, iteration: int, round_: int, n: int, ledger: pd.DataFrame,
               exclude: list[str]) -> list[Task]:
    """`n` distinct training tasks for round `round_` of `iteration` (round 0: the batch; later
    rounds refill dropped groups), shared out over the sources by weight, each source's drawn
    by the curriculum sampler from the ledger, never one in `exclude`. Seeded by (run seed,
    iteration, round[, source]), so a resumed run draws the same."""
    ccfg = curriculum_config(cfg)
    pool = task_pool(cfg)
    sources = [s for s in task_sources(cfg)
               if any(t.source == s.label and t.split == "train" for t in pool)]
    if not sources:
        raise ValueError("the task pool has no training tasks")
    ledger_ = DifficultyLedger.from_frame(ledger, ccfg)
    out: list[Task] = []
    for src, k in zip(sources, allocate(n, [s.weight for s in sources])):
        if k == 0:
            continue
        salt = "" if len(sources) == 1 else f":{src.label}"
        seed = int(hashlib.sha256(f"{cfg.seed}:{iteration}:{round_}:tasks{salt}".encode())
                   .hexdigest()[:12], 16)
        out += sample_batch([t for t in pool if t.source == src.label], ledger_, k,
                            np.random.default_rng(seed), ccfg, exclude=exclude)
    return out


def informative_row_mask(rows: list[TrajectoryRow]) -> np.ndarray:
    """Per row: whether its group's scored rewards are not all equal (DAPO keeps these)."""
    if not rows:
        return np.zeros(0, dtype=bool)
    return informative_groups(np.array([r.reward for r in rows], dtype=np.float64),
                              np.array([r.group_id for r in rows]))


def train_row_mask(rows: list[TrajectoryRow]) -> np.ndarray:
    """Per row: whether dynamic sampling gives it to the update: its group is informative, or
    a turn of it has a non-zero advantage (rl.turn_credit). The second keeps turn credit
    unbiased: whether a group is informative depends on the episode's own outcome, so dropping
    the turn terms of the others would leave E[grad log pi x Phi_t] non-zero."""
    keep = informative_row_mask(rows)
    return keep | np.array([any(a != 0.0 for a in (r.turn_advantages or ()))
                            for r in rows], dtype=bool)


def heldout_tasks(cfg: RunConfig) -> list[Task]:
    return [t for t in task_pool(cfg) if t.split == "heldout"]


def sampling_seed(seed: int, iteration: int, salt: str) -> int:
    return int(hashlib.sha256(f"{seed}:{iteration}:{salt}".encode()).hexdigest()[:12], 16)


def sampling_generator(seed: int, iteration: int, salt: str) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(sampling_seed(seed, iteration, salt))
    return g


def rollout_metrics(rows: list[TrajectoryRow]) -> dict:
    rewards = np.array([r.reward for r in rows], dtype=np.float64)
    solved = [r.solved for r in rows if r.solved is not None]
    by_group: dict[str, list[float]] = {}
    for r in rows:
        if not math.isnan(r.reward):
            by_group.setdefault(r.group_id, []).append(r.reward)
    informative = [outcome.informative(v) for v in by_group.values()]
    return {
        "rollout/count": len(rows),
        "rollout/mean_reward": float(np.nanmean(rewards)) if len(rows) and not np.isnan(rewards).all() else math.nan,
        "rollout/pass_rate": float(np.mean(solved)) if solved else math.nan,
        "rollout/infra_errors": int(sum(r.infra_error for r in rows)),
        "rollout/hack_flags": int(sum(bool(r.hack_flags) for r in rows)),
        "rollout/informative_groups": float(np.mean(informative)) if informative else math.nan,
    }


# -- cache keys ---------------------------------------------------------------------------
_LEAVES = frozenset({str, int, bool, type(None)})
_FIELDS: dict[type, tuple[str, ...]] = {}  # a dataclass type's field names; () for other types


def _fields_of(kind: type) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        names = (tuple(f.name for f in dataclasses.fields(kind))
                 if dataclasses.is_dataclass(kind) and not issubclass(kind, Environment) else ())
        _FIELDS[kind] = names
    return names


def _canonical(obj, seen: dict | None = None):
    """A JSON-able form of a stage input that is the same in every process (no set order, no
    object ids): dataclasses and pydantic models by their fields, frames and arrays by their
    values. Anything else is refused (TypeError naming its type): a repr() could hold a memory
    address, which would make a new cache key in each process, or elide values ("...").
    `seen`: the forms of the objects done in this call, by id, so an object many inputs share
    (a task and its environment, in each of its group's episodes) is walked once; the form is
    the same, so is the key."""
    # Exact plain types first, flat lists of them at once, and a dataclass's field names
    # looked up once per type: an iteration's 64 episodes are thousands of token ids,
    # log-probs and fields, and each general check costs microseconds per element.
    kind = type(obj)
    if kind in _LEAVES:
        return obj
    if kind is float:
        return "NaN" if obj != obj else obj
    if kind is list or kind is tuple:
        if all(type(v) in _LEAVES for v in obj):
            return list(obj)
        if all(type(v) is float for v in obj):  # log-probs, times
            return [v if v == v else "NaN" for v in obj]
        return [v if type(v) in _LEAVES else _canonical(v, seen) for v in obj]
    if kind is dict:
        return _canonical_dict(obj, seen)
    if seen is not None and id(obj) in seen:
        return seen[id(obj)][1]
    names = _fields_of(kind)
    if names:
        out = [kind.__name__, {n: v if type(v) in _LEAVES else _canonical(v, seen)
                               for n, v in zip(names, map(obj.__getattribute__, names))}]
    elif isinstance(obj, Environment):  # by what it is, not where it lives in memory
        out = ["env", f"{kind.__module__}:{kind.__qualname__}", _canonical(obj.config, seen)]
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):  # one without fields
        out = [kind.__name__, {}]
    elif hasattr(obj, "model_dump"):
        out = _canonical(obj.model_dump(mode="json"), seen)
    elif hasattr(obj, "cache_form"):  # an object that says what it is (envs/chat.py ChatEpisode)
        out = [kind.__name__, _canonical(obj.cache_form(), seen)]
    else:
        return _canonical_value(obj, seen)
    if seen is not None:  # the object is kept too: its id is not reused while `seen` lives
        seen[id(obj)] = (obj, out)
    return out


def _canonical_value(obj, seen: dict | None):
    """`_canonical` of what is not an object with fields: containers, frames, arrays, scalars.
    A subclass of a plain type (numpy's float64, a str enum) becomes the plain value."""
    if isinstance(obj, pd.DataFrame):
        return [list(map(str, obj.columns)),
                [_column(obj.iloc[:, i], seen) for i in range(obj.shape[1])]]
    if isinstance(obj, dict):
        return _canonical_dict(obj, seen)
    if isinstance(obj, (list, tuple)):
        return [_canonical(v, seen) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted(_canonical(v, seen) for v in obj)
    if isinstance(obj, np.generic):
        return _canonical(obj.item(), seen)
    if isinstance(obj, bool):
        return bool(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return _canonical(float(obj), seen)
    if isinstance(obj, str):
        return str.__str__(obj)
    if isinstance(obj, bytes):
        return hashlib.sha256(obj).hexdigest()
    if isinstance(obj, np.ndarray):
        return [str(obj.dtype), list(obj.shape), _canonical(obj.tolist(), seen)]
    raise TypeError(f"a stage input of type {type(obj).__module__}.{type(obj).__qualname__} "
                    f"cannot be hashed into a cache key: pass plain values (str, numbers, "
                    f"lists, dicts), dataclasses, pydantic models, frames or arrays")


def _canonical_dict(obj: dict, seen: dict | None) -> dict:
    """A dict's form: its keys as text, in order."""
    keys = sorted(obj) if all(type(k) is str for k in obj) else sorted(obj, key=str)
    return {str(k): v if type(v) in _LEAVES else _canonical(v, seen)
            for k, v in zip(keys, map(obj.__getitem__, keys))}


def _column(col: pd.Series, seen: dict | None):
    """A frame's column by its values (ints, floats, texts: a ledger's), or, holding what has no
    canonical form (timestamps, missing-value markers, objects), by pandas' hash of each value's
    text."""
    try:
        return ["values", _canonical(col.tolist(), seen)]
    except TypeError:
        return ["text hashes", pd.util.hash_pandas_object(col.astype(str), index=False).tolist()]


def inputs_digest(*inputs) -> str:
    """Content hash of a stage's inputs: part of its cache key, so a stage handed different
    inputs (another batch, other completions) never reuses a stored result.
    The canonical form holds only dicts, lists and plain scalars, and is pickled without a
    memo (`fast`): the bytes are then a function of the values alone, not of which objects
    happen to be shared (a memo writes a shared string once, then a reference to it). The
    canonical form of an iteration's 64 episodes pickles in 0.4 ms, against 3 ms to write it as
    JSON (each float's shortest repr)."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=5)
    pickler.fast = True
    pickler.dump(_canonical(list(inputs), {}))
    return hashlib.sha256(buf.getbuffer()).hexdigest()[:12]


# -- the stage journal ----------------------------------------------------------------------
JOURNAL = "stages.jsonl"


def journal(run_dir: str, stage: str, event: str, **fields) -> None:
    """Append one line to `<run_dir>/stages.jsonl`: which process ran (not reused from the
    cache) which stage, when, and how long. One `write` of a short line in append mode, so
    lines of concurrent shards never interleave. It is how an operator (and a test) sees that
    a resumed run skipped what had finished."""
    rec = {"t": round(time.time(), 3), "pid": os.getpid(), "stage": stage, "event": event, **fields}
    line = (json.dumps(rec, default=str) + "\n").encode()
    path = os.path.join(run_dir, JOURNAL)
    os.makedirs(run_dir, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_journal(run_dir: str | os.PathLike) -> list[dict]:
    """The journal's records, in order. Only whole lines: a last line without its newline is one
    being written as this reads (or cut short by a crash) and is left out."""
    path = os.path.join(run_dir, JOURNAL)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.endswith("\n") and line.strip()]


# -- observability ----------------------------------------------------------------------------
def execution_metrics(stepped: list[Stepped], wall_s: float, threads: int,
                      queue_samples: list[dict]) -> dict:
    """Throughput and load of a rollout stage: rollouts/s, sandbox utilisation (busy sandbox
    seconds over the slots the cluster offered) and the scheduler's queue lengths. `stepped`
    are the steps the stage executed (a shard answered from the cache took no sandbox time:
    counting it would push utilisation past 1); the slots are the most threads the cluster had
    during the stage (a worker that joined midway offered its thread too). NaN when the stage
    executed nothing."""
    threads = max([threads, *(q.get("threads", 0) for q in queue_samples)])
    busy = sum(e.seconds for e in stepped)
    ran = bool(stepped) and wall_s > 0
    out = {"rollout/per_s": len(stepped) / wall_s if ran else math.nan,
           "cluster/threads": threads,
           "sandbox/busy_s": busy,
           "sandbox/utilisation": busy / (wall_s * max(1, threads)) if ran else math.nan}
    if queue_samples:
        for key in ("queued", "processing", "unrunnable"):
            vals = [q[key] for q in queue_samples]
            out[f"cluster/{key}_max"] = max(vals)
            out[f"cluster/{key}_mean"] = float(np.mean(vals))
        out["cluster/workers_min"] = min(q["workers"] for q in queue_samples)
    return out
