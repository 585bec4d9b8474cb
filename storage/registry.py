"""The run registry: what a run was (resolved config and its hash), how it went (metrics per
iteration), what it left (checkpoints) and how far it got (finished iterations), beside its
trajectories so a run can be found, resumed and compared later.

    <store>/<run_id>/config.yaml                      resolved config
    <store>/<run_id>/run.json                         run id, config hash, creation time
    <store>/<run_id>/metrics/iteration=<n>.json       metrics of iteration n
    <store>/<run_id>/metrics/warm_start.json          metrics of the warm start (version 0)
    <store>/<run_id>/checkpoints/iteration=<n>.json   checkpoint of iteration n: path + metrics
    <store>/<run_id>/done/iteration=<n>.json          iteration n finished

One small file per record and per iteration, each written atomically (temporary name, then
rename), so re-recording an iteration replaces it and concurrent iterations never contend
for a shared file.
"""
from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from typing import Any

import pandas as pd
import yaml

from storage.fs import Location, atomic_write_bytes, locate
from storage.schema import SCHEMA_VERSION

_ITERATION_FILE = re.compile(r"^iteration=(\d+)\.json$")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _check_iteration(iteration: Any) -> int:
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise ValueError(f"iteration={iteration!r}: expected a non-negative int")
    return iteration


def _json_bytes(value: Any, what: str) -> bytes:
    try:
        return json.dumps(_nan_to_none(value), indent=1, sort_keys=True, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: not JSON-serialisable ({exc}); pass plain dicts, lists, "
                         "strings, numbers and bools (e.g. model.model_dump(mode='json'))") from None


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_none(v) for v in value]
    return value


def _read_json(loc: Location) -> Any:
    return json.loads(loc.read_bytes())


def _iteration_records(folder: Location) -> list[tuple[int, Location]]:
    return sorted((int(m[1]), folder.join(n)) for n in folder.names() if (m := _ITERATION_FILE.match(n)))


def write_run_config(run_dir: str, config: dict, config_hash: str) -> None:
    """Record the resolved config (config.yaml) and the run's config hash (run.json, key
    `config_hash`): the hash the run stamps on each of its trajectory rows (`RunConfig.hash()`,
    what the run computes), so the `runs` view and the rows join on it. Writing again replaces
    both; `created_at` keeps the first write's time."""
    if not isinstance(config, dict):
        raise ValueError(f"config: expected a dict, got {type(config).__name__}")
    if not isinstance(config_hash, str) or not config_hash:
        raise ValueError(f"config_hash: expected the run's hash (a non-empty string), got "
                         f"{config_hash!r}")
    # Through JSON: refuses what cannot be hashed (naming the problem), tuples become lists.
    config = json.loads(_json_bytes(config, "config"))
    run = locate(run_dir)
    info_loc = run.join("run.json")
    created = _read_json(info_loc).get("created_at") if info_loc.exists() else None
    text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
    atomic_write_bytes(run.join("config.yaml"), text.encode())
    info = {"run_id": run.name, "config_hash": config_hash, "created_at": created or _now(),
            "updated_at": _now(), "store_schema_version": SCHEMA_VERSION}
    atomic_write_bytes(info_loc, _json_bytes(info, "run.json"))


def read_run_config(run_dir: str) -> dict:
    loc = locate(run_dir).join("config.yaml")
    if not loc.exists():
        raise FileNotFoundError(f"{loc.uri}: no resolved config recorded for this run")
    return yaml.safe_load(loc.read_bytes()) or {}


def read_run_info(run_dir: str) -> dict:
    """run.json (run id, config hash, times), {} when the config was never written."""
    loc = locate(run_dir).join("run.json")
    return _read_json(loc) if loc.exists() else {}


def _check_metrics(metrics: Any, what: str) -> dict:
    if not isinstance(metrics, dict):
        raise ValueError(f"{what}: expected a dict of name -> number, got {type(metrics).__name__}")
    for k, v in metrics.items():
        if not isinstance(k, str) or k in ("run_id", "iteration", "recorded_at"):
            raise ValueError(f"{what}: key {k!r} is not allowed (keys are metric names, strings; "
                             "run_id/iteration/recorded_at are added by the registry)")
        if not (v is None or isinstance(v, (int, float, str, bool))):
            if hasattr(v, "item"):  # numpy / torch scalars
                continue
            raise ValueError(f"{what}: metric {k!r}={v!r:.60}: expected a number, string, bool or None")
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in metrics.items()}


def record_metrics(run_dir: str, iteration: int, metrics: dict) -> None:
    """Record the metrics of one iteration; recording the same iteration again replaces them.
    NaN is recorded as null and read back as NaN."""
    _check_iteration(iteration)
    metrics = _check_metrics(metrics, "metrics")
    loc = locate(run_dir).join("metrics", f"iteration={iteration}.json")
    record = {"iteration": iteration, "recorded_at": _now(), "metrics": metrics}
    atomic_write_bytes(loc, _json_bytes(record, f"metrics of iteration {iteration}"))


def record_gateway_take(run_dir: str, iteration: int, versions: list[int],
                        episodes: list[str]) -> None:
    """Record which of the gateway's episodes (their ids, of the policy `versions`) iteration
    `iteration`'s update takes (rl.gateway_rows). Written once, before the update, so a
    retried or resumed iteration trains on the same rows however many a client has added
    since, and no later iteration takes them again."""
    _check_iteration(iteration)
    record = {"iteration": iteration, "recorded_at": _now(), "versions": sorted(versions),
              "episodes": sorted(episodes)}
    atomic_write_bytes(locate(run_dir).join("gateway_takes", f"iteration={iteration}.json"),
                       _json_bytes(record, f"gateway take of iteration {iteration}"))


def gateway_takes(run_dir: str) -> dict[int, dict]:
    """Iteration -> its recorded gateway take (`versions`, `episodes`), {} where none."""
    folder = locate(run_dir).join("gateway_takes")
    if not folder.exists():
        return {}
    return {it: _read_json(loc) for it, loc in _iteration_records(folder)}


def record_warm_start(run_dir: str, metrics: dict) -> None:
    """Record what the warm start that made version 0 did (its steps, its data's counts, a
    probe's pass rate), so a resumed run that reuses version 0 still knows. Recording again
    replaces it."""
    metrics = _check_metrics(metrics, "warm start metrics")
    record = {"recorded_at": _now(), "metrics": metrics}
    atomic_write_bytes(locate(run_dir).join("metrics", "warm_start.json"),
                       _json_bytes(record, "warm start metrics"))


def read_warm_start(run_dir: str) -> dict:
    """The warm start's metrics (NaN for a null), {} where none was recorded."""
    loc = locate(run_dir).join("metrics", "warm_start.json")
    if not loc.exists():
        return {}
    return {k: (math.nan if v is None else v) for k, v in _read_json(loc)["metrics"].items()}


def read_metrics(run_dir: str) -> pd.DataFrame:
    """One row per recorded iteration: `iteration`, `recorded_at`, then one column per metric
    name (NaN where an iteration did not record it), ordered by iteration."""
    rows = []
    for _, loc in _iteration_records(locate(run_dir).join("metrics")):
        rec = _read_json(loc)
        metrics = {k: (math.nan if v is None else v) for k, v in rec["metrics"].items()}
        rows.append({"iteration": rec["iteration"], "recorded_at": rec["recorded_at"], **metrics})
    frame = pd.DataFrame(rows, columns=None if rows else ["iteration", "recorded_at"])
    # one block per dtype (copy consolidates): a run records a hundred-odd metrics, and the
    # blocks astype leaves make every later column insert warn PerformanceWarning
    return frame.astype({"iteration": "int64"}).reset_index(drop=True).copy()


def record_checkpoint(run_dir: str, iteration: int, path: str, metrics: dict) -> None:
    """Record that `path` holds the checkpoint of `iteration` (with the metrics it was chosen
    by). Recording the same iteration again replaces the record."""
    _check_iteration(iteration)
    if not isinstance(path, str) or not path:
        raise ValueError(f"path={path!r}: expected the checkpoint's path or URI")
    metrics = _check_metrics(metrics, "checkpoint metrics")
    loc = locate(run_dir).join("checkpoints", f"iteration={iteration}.json")
    record = {"iteration": iteration, "path": path, "metrics": metrics, "recorded_at": _now()}
    atomic_write_bytes(loc, _json_bytes(record, f"checkpoint of iteration {iteration}"))


def list_checkpoints(run_dir: str) -> list[dict]:
    """Checkpoint records ({iteration, path, metrics, recorded_at}), ordered by iteration."""
    records = [_read_json(loc) for _, loc in _iteration_records(locate(run_dir).join("checkpoints"))]
    for r in records:  # null in JSON was NaN when recorded
        r["metrics"] = {k: (math.nan if v is None else v) for k, v in r["metrics"].items()}
    return records


def mark_iteration_done(run_dir: str, iteration: int) -> None:
    """Record that every stage of `iteration` finished (written last, after its outputs)."""
    _check_iteration(iteration)
    loc = locate(run_dir).join("done", f"iteration={iteration}.json")
    atomic_write_bytes(loc, _json_bytes({"iteration": iteration, "finished_at": _now()}, "done"))


def finished_iterations(run_dir: str) -> list[int]:
    return [it for it, _ in _iteration_records(locate(run_dir).join("done"))]


def last_finished_iteration(run_dir: str) -> int | None:
    """The highest iteration marked done, None if none is (a resume starts after it)."""
    done = finished_iterations(run_dir)
    return done[-1] if done else None


def list_runs(store: str) -> list[str]:
    """Run folders of a store (those with a run.json, trajectories or metrics), sorted by name."""
    root = locate(store)
    marks = ("run.json", "config.yaml", "trajectories", "metrics", "done", "checkpoints")
    runs = []
    for name in root.names():
        if name.startswith((".", "_")):
            continue
        run = root.join(name)
        if run.is_dir() and any(m in run.names() for m in marks):
            runs.append(run.uri)
    return runs
