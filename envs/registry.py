"""Kinds of environment by name: the built-ins, the plug-ins of the entry-point group
`rollforge.environments`, and any `module:Class` import path that the user names.

A plug-in package declares, in its pyproject.toml,

    [project.entry-points."rollforge.environments"]
    regex = "rollforge_regex:RegexEnv"

and is then a kind like any built-in, in the flow and in every Dask worker where it is
installed. A name that is none of these, or a plug-in that fails to import, raises `EnvError`
naming it and what went wrong.

An import path runs the module's code, so only the user's own choice may name one (a source's
`kind` in the run config, `--kind` on the command line: `kind_class`). A task's `kind` is data
(task files come from outside): `env_for_task` takes a registered kind, or a kind the user
already loaded by its path in this process, and refuses any other import path unimported.
"""
from __future__ import annotations

import functools
import importlib
import json
from importlib.metadata import entry_points
from typing import Any, Mapping

from envs.base import EnvError, Environment
from tasks.record import Task

GROUP = "rollforge.environments"

BUILTIN: dict[str, str] = {
    "io": "envs.io:FunctionsEnv",
    "dataframe": "envs.dataframe:DataFrameEnv",
    "humaneval": "envs.humaneval:HumanEvalEnv",
    "testfile": "envs.testfile:TestFileEnv",
    "agent": "envs.agent:AgentEnv",
    "ops": "envs.ops:OpsEnv",
    "logic": "envs.logic:LogicEnv",
    "repo": "envs.repo:RepoEnv",
    "reasoning_gym": "envs.reasoning_gym:ReasoningGymEnv",
    "verifiers": "envs.verifiers:VerifiersEnv",
    "openenv": "envs.openenv:OpenEnvEnv",
}


def _load(path: str, what: str) -> type[Environment]:
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise EnvError(f"{what}: {path!r} is not an import path of the form 'module:Class'")
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # a plug-in's own import error, whatever it is
        raise EnvError(f"{what}: importing {module!r} failed: {type(exc).__name__}: {exc}") from None
    try:
        cls = functools.reduce(getattr, attr.split("."), mod)
    except AttributeError:
        raise EnvError(f"{what}: module {module!r} has no {attr!r}") from None
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        raise EnvError(f"{what}: {path} is not a subclass of envs.base.Environment")
    return cls


def plugins() -> dict[str, str]:
    """Entry points of the group `rollforge.environments`: name -> 'module:Class'."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def known() -> dict[str, str]:
    """Every kind by name (built-ins first; a plug-in may not shadow a built-in)."""
    return {**{k: v for k, v in plugins().items() if k not in BUILTIN}, **BUILTIN}


# Kinds loaded by import path in this process, by their `name`: the tasks such a kind makes
# carry that name, and must find their grader again without an entry point.
_BY_PATH: dict[str, type[Environment]] = {}
# The import paths the user named (`kind_class`) and what they loaded: a task may name those too.
_PATHS: dict[str, type[Environment]] = {}


@functools.lru_cache(maxsize=None)
def kind_class(name: str) -> type[Environment]:
    """The class of a kind: a registered name, or an import path 'module:Class'."""
    if name in BUILTIN:
        return _load(BUILTIN[name], f"kind {name!r}")
    found = plugins()
    if name in found:
        return _load(found[name], f"kind {name!r} (plug-in, entry point group {GROUP!r})")
    if ":" in name:
        cls = _load(name, f"kind {name!r}")
        if cls.name and cls.name not in BUILTIN:
            _BY_PATH.setdefault(cls.name, cls)
        _PATHS[name] = cls
        return cls
    if name in _BY_PATH:
        return _BY_PATH[name]
    raise EnvError(f"unknown kind {name!r}; known: {', '.join(sorted(known()))} "
                   f"(or a 'module:Class' import path)")


@functools.lru_cache(maxsize=256)
def _make(name: str, options_json: str) -> Environment:
    return kind_class(name)(json.loads(options_json))


def make_env(name: str, options: Mapping[str, Any] | None = None) -> Environment:
    """An environment of kind `name` with `options` (validated by its Config); the same
    (name, options) gives the same instance in a process."""
    return _make(name, json.dumps(dict(options or {}), sort_keys=True, default=str))


def check_task_kind(name: str) -> None:
    """Raise EnvError, naming the field, if a task's `kind` is an import path the user has not
    loaded in this process. Nothing is imported here: a path that a record names would run
    whatever its author wrote. (A plain name is only ever looked up among the registered
    kinds and those the user loaded by path: `kind_class` refuses an unknown one.)"""
    if ":" not in name or name in _PATHS:
        return
    raise EnvError(f"field 'kind': {name!r} is an import path, and a task's kind is never "
                   "imported (its code would run on loading); expected a registered kind: "
                   f"{', '.join(repr(k) for k in sorted(known()))} (a plug-in registers one "
                   f"by the entry-point group {GROUP!r}), or name the import path yourself: "
                   "--kind on the command line, or the source's `kind` in the run config")


def env_for_task(task: Task) -> Environment:
    """The environment that grades `task` (its `kind`, checked by `check_task_kind`), with
    default options."""
    check_task_kind(task.kind)
    return make_env(task.kind)


def validate_by_kind(task: Task) -> Task:
    """The check of the kind that grades the task (`tasks.files.load_tasks(path, validate)`):
    its payload, a function's entry point; an unknown kind is a bad record too, and so is a
    `module:Class` kind, refused without importing it (`check_task_kind`: a file must not run
    code)."""
    return env_for_task(task).validate(task)
