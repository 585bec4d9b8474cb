"""The start of a run, or of its resumption: what is recorded next to what the run produces,
and the refusal to resume a run under a config that computes something else."""
from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from flows.config import ConfigError, RunConfig
from storage import registry


class ConfigChanged(ConfigError):
    """Resuming a run whose config changes what it computes (exit 2 at the CLI)."""


def changed_fields(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted paths whose values differ between two nested dicts (a key on one side only too)."""
    out = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += changed_fields(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


def check_resume(cfg: RunConfig) -> None:
    """Refuse to go on with a run whose recorded config computes something else than `cfg`
    (its v0 and finished iterations would be reused under the new one): ConfigChanged naming
    the fields, unless `cfg.resume_changed`. What `RunConfig.computed()` leaves out
    (`iterations`, `out_dir`, `eval_every`, `keep_checkpoints`, `cluster`, ...) may change."""
    try:
        stored = registry.read_run_config(cfg.run_dir)
    except FileNotFoundError:
        return  # a new run
    if cfg.resume_changed:
        return
    try:
        old = RunConfig.model_validate(stored).computed()
    except ValidationError as exc:
        raise ConfigChanged(f"run {cfg.run_id!r}: its recorded config ({cfg.run_dir}/"
                            f"config.yaml) no longer validates ({exc.error_count()} error(s), first: "
                            f"{exc.errors()[0]['msg']}); {_way_out(cfg)}") from None
    diff = changed_fields(old, cfg.computed())
    if diff:
        shown = ", ".join(diff[:12]) + (f" (and {len(diff) - 12} more)" if len(diff) > 12 else "")
        raise ConfigChanged(f"run {cfg.run_id!r} was started with another config: changed "
                            f"{shown}; {_way_out(cfg)}")


def _way_out(cfg: RunConfig) -> str:
    return (f"start a new run with another run id (--set run_id={cfg.run_id}-2), or resume "
            f"this one under the new config anyway with --set resume_changed=true")


def begin_run(cfg: RunConfig) -> None:
    """Check the resume (`check_resume`), then record the resolved config and its hash in the
    run's folder (config.yaml, run.json). The hash is `cfg.hash()`, the one every trajectory
    row of the run carries, so the `runs` view joins the rows on it."""
    check_resume(cfg)
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
    registry.write_run_config(cfg.run_dir, cfg.model_dump(mode="json"), cfg.hash())
