"""reasoning-gym's datasets as rollforge tasks, on the grader's side: the package's registry, a
dataset built from a recipe (envs/reasoning_gym/recipe.py, which the sandbox runs too), its
entries, and one generator seed per dataset and level.

A task's `difficulty` is its curriculum level and its `family` the dataset, so the curriculum
sampler (tasks/curriculum.py) ramps each dataset's levels as it does every kind's.
"""
from __future__ import annotations

import difflib
import functools
import hashlib
from typing import Any

from envs.reasoning_gym import recipe

MAX_LEVEL = 10  # Task.difficulty's range


class DatasetError(ValueError):
    """A dataset, option or level reasoning-gym does not have (the message names it)."""


def registry() -> tuple[dict, dict]:
    """reasoning-gym's (DATASETS, CURRICULA); imports the package (about 1.5 s, once)."""
    try:
        from reasoning_gym.factory import CURRICULA, DATASETS  # noqa: PLC0415 (1.5 s import)
    except ImportError as exc:
        raise DatasetError(f"the reasoning_gym kind needs the `reasoning-gym` package "
                           f"(pip install reasoning-gym; pinned in requirements.txt): {exc}"
                           ) from None
    return DATASETS, CURRICULA


def names() -> list[str]:
    return sorted(registry()[0])


def check(name: str, options: dict[str, Any], level: int | None) -> None:
    """Raise DatasetError naming what is wrong with a dataset, its options or its level."""
    known = registry()[0]
    if name not in known:
        close = difflib.get_close_matches(name.lower().replace("-", "_"), known, n=3)
        raise DatasetError(f"unknown reasoning-gym dataset {name!r}"
                           + (f" (did you mean {close}?)" if close else "")
                           + f"; the {len(known)} known: {', '.join(sorted(known))}")
    build(name, options, level, 0, 1)


def build(name: str, options: dict[str, Any], level: int | None, seed: int, size: int):
    try:
        return recipe.build(name, options, level, seed, size)
    except ValueError as exc:
        raise DatasetError(str(exc)) from None


@functools.lru_cache(maxsize=64)
def _entries(name: str, options_key: str, level: int | None, seed: int, size: int) -> tuple:
    import json  # noqa: PLC0415

    ds = build(name, json.loads(options_key), level, seed, size)
    return tuple(ds[i] for i in range(size))


def entries(name: str, options: dict[str, Any], level: int | None, seed: int,
            size: int) -> tuple[dict[str, Any], ...]:
    """Every entry (question, answer, metadata) of the dataset the recipe builds."""
    import json  # noqa: PLC0415

    return _entries(name, json.dumps(options, sort_keys=True), level, seed, size)


def seed_of(seed: int, name: str, level: int | None) -> int:
    """One generator seed per (run seed, dataset, level): adding a dataset changes no other."""
    digest = hashlib.sha256(f"reasoning_gym:{seed}:{name}:{level}".encode()).hexdigest()
    return int(digest[:8], 16)
