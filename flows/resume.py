"""The start of a run, or of its resumption: what is recorded next to what the run produces."""
from __future__ import annotations

from pathlib import Path

from flows.config import RunConfig
from storage import registry


def begin_run(cfg: RunConfig) -> None:
    """Record the resolved config and its hash in the run's folder (config.yaml, run.json).
    The hash is `cfg.hash()`, the one every trajectory row of the run carries, so the `runs`
    view joins the rows on it."""
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
    registry.write_run_config(cfg.run_dir, cfg.model_dump(mode="json"), cfg.hash())
