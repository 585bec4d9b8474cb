"""The stage decorator of the flow: every pipeline stage is a Prefect task with an explicit
cache key (stage, run id, iteration, policy version, round, shard, config hash, code version,
digest of the stage's other inputs), a persisted result, retries with exponential backoff, a
deadline and a journal line per run (`<run>/stages.jsonl`); a stage whose product is on disk
names it, and `call_stage` runs it again when the product is gone."""
from __future__ import annotations

import functools
import inspect
import time
from typing import Any, Callable

from prefect import task
from prefect.context import TaskRunContext
from prefect.tasks import exponential_backoff
from prefect.utilities.annotations import BaseAnnotation, quote

from flows import stages
from flows.config import RunConfig
from flows.stop import raise_if_stopped
from training import checkpoints

CODE_VERSION = stages.code_version()
RETRY_DELAYS = exponential_backoff(backoff_factor=2)  # 2 s, 4 s, 8 s, ... (plus 20% jitter)
_WHERE = ("iteration", "version", "round_", "shard")  # key parts that get their own field
_NOT_INPUTS = ("cfg", "deadline_s", *_WHERE)


_SCALARS = (str, int, float, bool, type(None))


def bulky(inputs: dict[str, Any]) -> dict[str, Any]:
    """A stage's arguments, by name, with everything but a scalar quoted: Prefect otherwise
    walks each one, element by element and field by field (the run's config is a tree of
    pydantic models), twice per call, looking for futures to resolve (none are ever passed: a
    stage receives values). On 320 rows of an iteration that walk cost 0.67 s a call, 0.02 s
    quoted (bench/bench_stage_call.py). The stage receives the values themselves."""
    return {k: a if isinstance(a, _SCALARS) else quote(a) for k, a in inputs.items()}


def _unquoted(v):
    return v.unwrap() if isinstance(v, BaseAnnotation) else v


def stage_key(stage: str):
    """The Prefect cache-key function of `stage`: the stage, the run, where in the loop the call
    is (iteration, policy version, round, shard), the config's hash, the code version and a
    digest of the other inputs, each taken by its parameter's name. The deadline is left out:
    how long we wait for a result is not what the result is computed from."""
    def key(ctx: TaskRunContext, p: dict[str, Any]) -> str:
        p = {k: _unquoted(v) for k, v in p.items()}
        cfg: RunConfig = p["cfg"]
        inputs = stages.inputs_digest({k: v for k, v in p.items() if k not in _NOT_INPUTS})
        parts = [stage, cfg.run_id, f"it{p.get('iteration', 'na')}", f"v{p.get('version', 'na')}",
                 f"r{p.get('round_', 'na')}", f"s{p.get('shard', 'na')}", cfg.hash(),
                 CODE_VERSION, inputs]
        return "-".join(str(x) for x in parts)
    return key


def pipeline_stage(stage: str, retries: int = 2, timeout_s: float | None = 3600,
           product: Callable[[dict], bool] | None = None):
    """A pipeline stage: explicit cache key, persisted result, retries with backoff, a
    deadline (enforced by Prefect for stages the flow calls directly; rollout shards, which
    run in threads, enforce their own inside `step_many`), and a journal line per run.
    `product(params)`: whether what the stage writes to disk is there; `call_stage` reuses a
    stored result only while it is."""
    def deco(fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def journaled(*args, **kwargs):
            a = sig.bind(*args, **kwargs).arguments
            where = {k.rstrip("_"): a[k] for k in _WHERE if k in a}
            run_dir = a["cfg"].run_dir
            stages.journal(run_dir, stage, "start", **where)
            t0 = time.perf_counter()
            try:
                out = fn(*args, **kwargs)
            except BaseException as exc:
                error = f"{type(exc).__name__}: {exc}"[:300]
                if type(exc).__name__ == "CancelledError" and timeout_s:
                    error = f"deadline of {timeout_s:g} s passed ({error})"  # Prefect's timeout
                stages.journal(run_dir, stage, "failed", error=error, **where)
                raise
            stages.journal(run_dir, stage, "end", seconds=round(time.perf_counter() - t0, 3),
                           **where)
            return out

        t = task(name=stage, cache_key_fn=stage_key(stage), persist_result=True,
                 retries=retries, retry_delay_seconds=RETRY_DELAYS, retry_jitter_factor=0.2,
                 timeout_seconds=timeout_s)(journaled)
        t.product = product
        return t
    return deco


def _options(stage, opts: dict, inputs: dict[str, Any]) -> dict:
    product = getattr(stage, "product", None)
    if product is not None:
        bound = inspect.signature(stage.fn).bind(**inputs)
        bound.apply_defaults()
        if not product(bound.arguments):
            opts = dict(opts, refresh_cache=True)
    return opts


def call_stage(stage, opts: dict, /, **inputs):
    """Run `stage` with the run's task options on its inputs, each by its parameter's name.
    The cache key is built from the parameters by name (`stage_key`), so it does not depend on
    how a call spells them. A stage whose product is gone (a checkpoint deleted since its
    result was stored) runs again and replaces its stored result: a cache hit would return
    what it computed and write nothing. (Its key stays the same, so the stored result is found
    again once the product is back.)"""
    raise_if_stopped()
    return stage.with_options(**_options(stage, opts, inputs))(**bulky(inputs))


def submit_stage(stage, opts: dict, /, **inputs):
    """`call_stage` in the background (the flow's task runner, a thread): its future."""
    raise_if_stopped()
    return stage.with_options(**_options(stage, opts, inputs)).submit(**bulky(inputs))


def has_checkpoint(version_of: Callable[[dict], int]) -> Callable[[dict], bool]:
    return lambda p: checkpoints.exists(p["cfg"].run_dir, version_of(p))
