"""Task sources: where a run's tasks come from (`tasks.sources` of the run config), and the pool
they make together.

A source is a kind's own tasks (`kind: io`, with its options) or a task file (`file:`, any kind,
each record graded by its own `kind` unless the source names an environment to play it in, e.g.
`kind: agent`), with filters, a weight in the curriculum's draw and an optional re-split. Every
task in the pool carries its source's name, which the rows, the metrics and the tables use.
"""
from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envs.base import EnvError, Environment
from envs.registry import env_for_task, make_env
from tasks.record import Task


class SourceConfig(BaseModel):
    """One source of tasks."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                             description="label in rows, metrics and tables (default: the "
                             "kind, or the file's stem)")
    kind: str | None = Field(None, description="environment kind (`rollforge envs`), or "
                             "'module:Class'; with `file`, the environment that plays the "
                             "file's tasks (default: each task's own kind)")
    file: str | None = Field(None, description="a task file (.jsonl or .parquet)")
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="the kind's options (its Config)")
    weight: float = Field(1.0, gt=0, description="share of each iteration's training tasks "
                          "drawn from this source, relative to the others")
    families: list[str] | None = Field(None, description="keep only these families")
    difficulties: list[int] | None = Field(None, description="keep only these levels")
    heldout_fraction: float | None = Field(
        None, gt=0, lt=1, description="re-split the source's tasks: this share held out, by a "
        "hash of the task id (null: the split the tasks carry)")
    limit: int | None = Field(None, ge=1, description="at most this many tasks (in order)")

    @model_validator(mode="after")
    def _one_origin(self) -> "SourceConfig":
        if self.kind is None and self.file is None:
            raise ValueError("a source needs `kind` (its own tasks) or `file` (a task file)")
        return self

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.file and self.kind is None:
            from pathlib import Path  # noqa: PLC0415

            return Path(self.file).stem
        return self.kind.replace(":", ".") if self.kind else "tasks"

    def environment(self) -> Environment | None:
        """The environment that plays this source's tasks; None: each task's own kind."""
        return make_env(self.kind, self.options) if self.kind else None


def split_of(task_id: str, heldout_fraction: float, salt: str = "") -> str:
    h = int(hashlib.sha256(f"{salt}:{task_id}".encode()).hexdigest()[:12], 16) / 16 ** 12
    return "heldout" if h < heldout_fraction else "train"


def load_source(src: SourceConfig) -> list[Task]:
    """The source's tasks, validated by the kind that grades each, filtered, re-split and
    labelled. Bad input raises EnvError naming the source (and, for a file, the line)."""
    from tasks.files import TaskFileError, load_tasks  # noqa: PLC0415

    what = f"tasks.sources[{src.label}]"
    try:
        env = src.environment()
    except EnvError as exc:
        raise EnvError(f"{what}: {exc}") from None
    if src.file:
        def check(task: Task) -> Task:
            env_for_task(task).validate(task)  # the grading kind checks its payload
            return env.validate(task) if env is not None else task

        try:
            tasks = load_tasks(src.file, validate=check)
        except (TaskFileError, EnvError) as exc:
            raise EnvError(f"{what}: {exc}") from None
    else:
        try:
            tasks = env.generate()
        except (EnvError, ValueError) as exc:
            raise EnvError(f"{what}: {exc}") from None
    return _select(src, tasks)


def _select(src: SourceConfig, tasks: list[Task]) -> list[Task]:
    if src.families is not None:
        tasks = [t for t in tasks if t.family in src.families]
    if src.difficulties is not None:
        tasks = [t for t in tasks if t.difficulty in src.difficulties]
    if src.limit is not None:
        tasks = tasks[: src.limit]
    update: dict[str, Any] = {"source": src.label}
    out = []
    for t in tasks:
        if src.heldout_fraction is not None:
            update["split"] = split_of(t.task_id, src.heldout_fraction, src.label)
        out.append(t.model_copy(update=update))
    return out


def sft_tasks_of(src: SourceConfig) -> list[Task]:
    """The warm start's tasks of a source: training-split tasks with a reference. A kind's
    own `sft_tasks` (e.g. the procedural functions drawn with several seeds) where the source
    keeps the kind's split; the pool's training tasks where it is a file or re-split."""
    pool = build_pool([src])  # the cached pool, not a second load of the file or generator
    if src.file or src.heldout_fraction is not None:
        return [t for t in pool if t.split == "train" and t.reference is not None]
    held = {t.task_id for t in pool if t.split == "heldout"}
    return [t for t in _select(src.model_copy(update={"limit": None}), src.environment().sft_tasks())
            if t.task_id not in held and t.split == "train"]


@functools.lru_cache(maxsize=8)
def _pool(sources_json: str) -> tuple[Task, ...]:
    sources = [SourceConfig.model_validate(s) for s in json.loads(sources_json)]
    labels = [s.label for s in sources]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise EnvError(f"tasks.sources: two sources are named {dup[0]!r}; give each a `name`")
    out: list[Task] = []
    seen: dict[str, str] = {}
    for s in sources:
        for t in load_source(s):
            if t.task_id in seen:
                where = ("twice" if seen[t.task_id] == s.label
                         else f"and so does source {seen[t.task_id]!r}")
                raise EnvError(f"tasks.sources[{s.label}]: gives the task id {t.task_id!r} "
                               f"{where}")
            seen[t.task_id] = s.label
            out.append(t)
    return tuple(out)


def build_pool(sources: list[SourceConfig]) -> list[Task]:
    """Every source's tasks, in source order (cached per process and sources)."""
    return list(_pool(json.dumps([s.model_dump(mode="json") for s in sources], sort_keys=True)))


def allocate(n: int, weights: list[float]) -> list[int]:
    """`n` draws shared out by weight: floors, then the largest remainders (ties: first)."""
    total = sum(weights)
    exact = [n * w / total for w in weights]
    counts = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts
