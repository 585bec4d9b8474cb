"""The training flow's parameters, which the Prefect UI shows as its run form: the typed run
config itself (a section per stage, every field with its description, enums as choices, bounds
checked by the server and again by the flow), or a YAML config file instead; `key=value`
overrides apply last either way.

A `config` given as a parameter must be whole (the form and `rollforge run` always send every
field): pydantic would fill the fields left out with the model's defaults, not the config
file's, and silently run something else. A few fields are changed with `overrides`.
"""
from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel

from flows.config import DEFAULT_CONFIG, ConfigError, RunConfig


def whole_config(path: str | Path = DEFAULT_CONFIG) -> RunConfig:
    """A config file's run config with every field set, as the form shows it (the model's
    defaults filled in). Checks the fields only; the run checks its tasks (`validate_config`)."""
    raw = yaml.safe_load(Path(path).read_text()) or {}
    return RunConfig.model_validate(RunConfig.model_validate(raw).model_dump(mode="json"))


def missing_fields(model: BaseModel, prefix: str = "") -> list[str]:
    """Dotted names of the fields of `model` (and of its sections) that were not given."""
    out = []
    for name, value in model:
        if name not in model.model_fields_set:
            out.append(prefix + name)
        elif isinstance(value, BaseModel):
            out += missing_fields(value, f"{prefix}{name}.")
    return out


def config_dict(config: RunConfig | dict) -> dict:
    """The `config` parameter as the dict `resolve_config` takes; refused when partial."""
    if isinstance(config, dict):
        config = RunConfig.model_validate(config)
    missing = missing_fields(config)
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise ConfigError(
            f"config: not given: {shown}. Give the whole config (the UI form and `rollforge run` "
            f"do), or change a few fields of the deployment's config with overrides, e.g. "
            f"overrides=[\"iterations=4\", \"rl.lr=1e-4\"], or use config_file")
    return config.model_dump(mode="json")
