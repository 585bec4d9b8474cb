"""The experiment trackers a user already has (config `tracking`): each iteration's metrics and
the run's resolved config go to TensorBoard, MLflow and/or Weights & Biases as well as to the
run's registry (`<run>/metrics/`) and the Prefect artifacts.

Offline only, in files under the run's folder; nothing phones home:

    <run>/tensorboard/  event files   tensorboard --logdir <run>/tensorboard
    <run>/mlflow/       SQLite store  mlflow ui --backend-store-uri sqlite:///<run>/mlflow/mlflow.db
    <run>/wandb/        offline run   wandb sync <run>/wandb/offline-run-* (uploads it)

`OFFLINE_ENV` is set in this process before a tracker is imported: W&B runs in offline mode
(silent, no console capture, no code or git capture, no system-stats sampling), MLflow's
telemetry is off and its client is given the run's SQLite store (never MLFLOW_TRACKING_URI's
server). TensorBoard's writer only writes files.

Each tracker's package is imported only when the run names it. A tracker that fails while the
run goes on costs a warning, like the Prefect artifacts: the run's own record is the registry.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Literal

import yaml

TrackerName = Literal["tensorboard", "mlflow", "wandb"]  # RunConfig.tracking's names

# name -> (module it imports, what to install when it is missing). The pins are those of
# requirements.txt; mlflow-skinny is the tracking client without the UI server (the full
# `mlflow` package would move the pinned pyarrow back a major version).
PACKAGES: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard==2.21.0"),
    "mlflow": ("mlflow", "mlflow-skinny==3.18.0"),
    "wandb": ("wandb", "wandb==0.31.0"),
}

OFFLINE_ENV = {
    "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONSOLE": "off",
    "WANDB_DISABLE_CODE": "true", "WANDB_DISABLE_GIT": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",
}


class TrackingUnavailable(RuntimeError):
    """A tracker the config names whose package is not installed."""


def unavailable(names: list[str]) -> list[str]:
    """One message per named tracker whose package is not importable, naming what to install."""
    out = []
    for name in names:
        module, package = PACKAGES[name]
        if importlib.util.find_spec(module) is None:
            out.append(f"tracking: {name!r} needs the {module!r} package, which is not installed "
                       f"in this environment; install it with `pip install {package}` (or leave "
                       f"{name!r} out of tracking)")
    return out


def scalars(metrics: dict) -> dict[str, float]:
    """The metrics a tracker can plot: finite numbers (bools as 0/1). NaN ("not measured this
    iteration") and strings are left out."""
    out = {}
    for k, v in metrics.items():
        v = v.item() if hasattr(v, "item") else v
        if isinstance(v, (bool, int, float)) and math.isfinite(float(v)):
            out[k] = float(v)
    return out


def flatten(config: dict, prefix: str = "") -> dict[str, str]:
    """`{"rl": {"lr": 0.0001}}` -> `{"rl.lr": "0.0001"}`: a tracker's flat parameters."""
    out: dict[str, str] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v if isinstance(v, str) else json.dumps(v)
    return out


class TensorBoard:
    def __init__(self, run_dir: Path, run_id: str, config: dict):
        from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415

        self.folder = run_dir / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.folder))
        text = yaml.safe_dump(config, sort_keys=False)
        # TensorBoard renders text as Markdown: indented, the YAML stays a code block.
        self.writer.add_text("config", "\n".join("    " + line for line in text.splitlines()))
        self.writer.flush()

    def log(self, iteration: int, values: dict[str, float]) -> None:
        for k, v in values.items():
            self.writer.add_scalar(k, v, global_step=iteration)
        self.writer.flush()  # readable by `tensorboard --logdir` while the run goes on

    def close(self) -> None:
        self.writer.close()


def store_uri(run_dir: str | Path) -> str:
    """The MLflow store of a run: `mlflow ui --backend-store-uri <this>` shows it."""
    return f"sqlite:///{(Path(run_dir) / 'mlflow' / 'mlflow.db').resolve()}"


class MLflow:
    EXPERIMENT = "rollforge"
    _NAME = re.compile(r"[^A-Za-z0-9_\-. /:]")  # what MLflow allows in a metric or param name
    _PARAM_MAX = 6000  # MLflow's longest param value; the whole config is also an artifact

    def __init__(self, run_dir: Path, run_id: str, config: dict):
        from mlflow.tracking import MlflowClient  # noqa: PLC0415

        self.folder = (run_dir / "mlflow").resolve()
        self.folder.mkdir(parents=True, exist_ok=True)
        # An explicit local store, so a tracking server named by MLFLOW_TRACKING_URI is never
        # used: SQLite, since MLflow refuses its `file:` store now (maintenance mode).
        self.client = MlflowClient(tracking_uri=store_uri(run_dir))
        exp = self.client.get_experiment_by_name(self.EXPERIMENT)
        exp_id = exp.experiment_id if exp else self.client.create_experiment(
            self.EXPERIMENT, artifact_location=(self.folder / "artifacts").as_uri())
        # A resumed run continues its MLflow run; its params stay those it started with
        # (MLflow refuses to change a param), the config artifact is the latest.
        found = self.client.search_runs([exp_id], f"tags.`rollforge.run_id` = '{run_id}'",
                                        max_results=1)
        if found:
            self.run_id = found[0].info.run_id
        else:
            self.run_id = self.client.create_run(exp_id, run_name=run_id,
                                                 tags={"rollforge.run_id": run_id}).info.run_id
            from mlflow.entities import Param  # noqa: PLC0415

            params = [Param(self._NAME.sub("_", k), v[:self._PARAM_MAX])
                      for k, v in flatten(config).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params a batch
                self.client.log_batch(self.run_id, params=params[i:i + 100])
        self.client.log_dict(self.run_id, config, "config.yaml")

    def log(self, iteration: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric  # noqa: PLC0415

        now = int(time.time() * 1000)
        metrics = [Metric(self._NAME.sub("_", k), v, now, iteration) for k, v in values.items()]
        for i in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics a batch
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class WandB:
    def __init__(self, run_dir: Path, run_id: str, config: dict):
        import wandb  # noqa: PLC0415

        # The same id for a resumed run, unique to this run folder: `wandb sync` of two
        # stores' runs of the same name does not merge them.
        where = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:8]
        wid = f"{re.sub(r'[^A-Za-z0-9_-]', '-', run_id)}-{where}"
        settings = wandb.Settings(mode="offline", silent=True, console="off", disable_code=True,
                                  disable_git=True, save_code=False, x_disable_stats=True)
        # wandb.init writes its offline-run-* folder under `dir`/wandb: <run>/wandb/.
        self.run = wandb.init(project="rollforge", name=run_id, id=wid, dir=str(run_dir),
                              config=config, mode="offline", resume="allow", settings=settings)

    def log(self, iteration: int, values: dict[str, float]) -> None:
        self.run.log(values, step=iteration)

    def close(self) -> None:
        self.run.finish()


BACKENDS = {"tensorboard": TensorBoard, "mlflow": MLflow, "wandb": WandB}
_OPEN: dict[str, dict[str, object]] = {}  # run dir -> tracker name -> open tracker
_FAILED: dict[str, set[str]] = {}  # run dir -> trackers that failed (warned once, left out)


def open_tracker(name: str, cfg) -> object:
    """Tracker `name` for run `cfg`, its config logged; TrackingUnavailable when its package
    is missing."""
    missing = unavailable([name])
    if missing:
        raise TrackingUnavailable(missing[0])
    os.environ.update(OFFLINE_ENV)  # before the tracker's package is imported
    return BACKENDS[name](Path(cfg.run_dir), cfg.run_id, cfg.model_dump(mode="json"))


def log_iteration(cfg, iteration: int, metrics: dict, log) -> None:
    """Iteration `iteration`'s metrics to each tracker the config names (opened, with the
    config, at the first iteration this process logs; closed after the run's last)."""
    if not cfg.tracking:
        return
    trackers = _OPEN.setdefault(cfg.run_dir, {})
    failed = _FAILED.setdefault(cfg.run_dir, set())
    values = scalars(metrics)
    for name in cfg.tracking:
        try:
            if name not in trackers and name not in failed:
                trackers[name] = open_tracker(name, cfg)
            if name in trackers:
                trackers[name].log(iteration, values)
        except Exception as exc:  # the run goes on; its registry holds the metrics
            failed.add(name)
            trackers.pop(name, None)
            log.warning(f"iteration {iteration}: tracking {name!r} failed, left out for the "
                        f"rest of this run ({type(exc).__name__}: {exc})")
    if iteration + 1 >= cfg.iterations:
        close(cfg.run_dir, log)


def close(run_dir: str, log) -> None:
    for name, tracker in _OPEN.pop(run_dir, {}).items():
        try:
            tracker.close()
        except Exception as exc:
            log.warning(f"tracking {name!r}: could not close ({type(exc).__name__}: {exc})")
    _FAILED.pop(run_dir, None)
