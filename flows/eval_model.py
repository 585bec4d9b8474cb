"""`rollforge eval --model`: a policy generates on any sources through the loop's own path
(flows.rounds.Play: the `sample_completions` stage on `sampling.engine`, then the
`run_rollouts` shards that step and grade each episode in the sandbox on the Dask cluster), n
samples a task sampled plus one greedy, written chunk by chunk to the store's evaluations table
(storage/evaluations.py).

Resuming: the evaluation's folder is named by a digest of what it computes (model, version,
sources, split, n, seed, config hash, chunk size), so the same command finds it again; a chunk
whose file is there is read, not run; inside an unfinished chunk the stages' persisted results
(the loop's cache keys, under the folder's `work/.prefect-results`) are reused, so a sample
generated or graded before the kill is neither generated nor graded again.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import signal
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from prefect import flow
from pydantic import ValidationError

from envs.base import EnvError
from envs.sources import SourceConfig, build_pool
from flows.config import (ConfigError, load_config, parse_override, task_sources,
                          validate_config)
# one override rule, one error format and one length check for run and eval
from flows.config import RunConfig, check_prompts_fit, format_errors, set_dotted
from flows.rounds import Play  # the loop's round of episodes, reused
from flows.staging import CODE_VERSION
from storage import evaluations, registry
from training import checkpoints

# A test's fault hook: SIGKILL this process right after it has written this many chunks.
FAULT_ENV = "ROLLFORGE_EVAL_KILL_AFTER_CHUNKS"
SPLITS = ("heldout", "train", "all")


class EvalInputError(ValueError):
    """A --model, --sources or setting that cannot be evaluated (the CLI exits 2)."""


@dataclass(frozen=True)
class ModelRef:
    label: str              # the rows' `model`: a known name, or the resolved path
    version: int            # the policy version (0 for a base model)
    model_dir: str          # the Hugging Face (or LoRA adapter) folder sampled with
    run_dir: str | None     # the run whose config.yaml is the evaluation's base config
    base: bool = False      # a known name or a Hugging Face folder, not a rollforge checkpoint


_FORMS = ("CHECKPOINT_DIR (runs/<id>/checkpoints/v0003), RUN_DIR[:VERSION] (runs/<id>, newest "
          "checkpoint or the one named), a known model name (smollm2-135m-instruct), or a "
          "Hugging Face model folder")


def _newest(run_dir: str) -> int:
    vs = sorted(int(d.name[1:]) for d in Path(run_dir, "checkpoints").glob("v[0-9]*")
                if checkpoints.exists(run_dir, int(d.name[1:])))
    if not vs:
        raise EvalInputError(f"--model {run_dir!r}: the run has no finished checkpoint")
    return vs[-1]


def resolve_model(spec: str) -> ModelRef:
    """What `--model` names, as a folder to sample with and the version it is."""
    from training import pretrained  # noqa: PLC0415

    if pretrained.is_known(spec):
        return ModelRef(spec, 0, str(Path(pretrained.resolve(spec)).resolve()), None, base=True)
    m = re.fullmatch(r"(.+):(\d+)", spec)
    if m and Path(m.group(1), "checkpoints").is_dir():
        run_dir, version = str(Path(m.group(1)).resolve()), int(m.group(2))
        if not checkpoints.exists(run_dir, version):
            raise EvalInputError(f"--model {spec!r}: {m.group(1)} has no checkpoint v{version}")
        return ModelRef(f"{run_dir}:{version}", version,
                        str(checkpoints.checkpoint_dir(run_dir, version) / "model"), run_dir)
    p = Path(spec)
    if (p / "checkpoints").is_dir():
        run_dir = str(p.resolve())
        version = _newest(run_dir)
        return ModelRef(f"{run_dir}:{version}", version,
                        str(checkpoints.checkpoint_dir(run_dir, version) / "model"), run_dir)
    if (p / "model").is_dir() and (p / "meta.json").is_file():
        v = re.fullmatch(r"v(\d+)", p.resolve().name)
        run = p.resolve().parent.parent
        return ModelRef(str(p.resolve()), int(v.group(1)) if v else 0, str((p / "model").resolve()),
                        str(run) if (run / "config.yaml").is_file() else None)
    if (p / "config.json").is_file() or (p / "adapter_config.json").is_file():
        return ModelRef(str(p.resolve()), 0, str(p.resolve()), None, base=True)
    raise EvalInputError(f"--model {spec!r}: not a model rollforge can load; expected {_FORMS}")


def parse_source(text: str) -> SourceConfig:
    """One --sources item: a JSON object (SourceConfig's fields), a task file, or a kind."""
    try:
        if text.lstrip().startswith("{"):
            return SourceConfig.model_validate(json.loads(text))
        if text.endswith((".jsonl", ".parquet")) or os.path.isfile(text):
            if not os.path.isfile(text):
                raise EvalInputError(f"--sources {text!r}: no such task file")
            return SourceConfig(file=text)
        return SourceConfig(kind=text)
    except ValueError as exc:
        if isinstance(exc, EvalInputError):
            raise
        raise EvalInputError(f"--sources {text!r}: {exc}") from None


@dataclass(frozen=True)
class Plan:
    """A resolved evaluation: its config, its tasks in chunks, its folder and spec."""
    cfg: object               # flows.config.RunConfig whose run_dir is the folder's work/
    ref: ModelRef
    store: str
    eval_id: str
    spec: dict
    chunks: list              # list[list[Task]]
    n: int


def plan(model: str, sources: list[str] | None = None, n: int = 4, split: str = "heldout",
         seed: int | None = None, store: str = "runs", config_file: str | None = None,
         overrides: list[str] = (), chunk_size: int = 16, engine: str | None = None) -> Plan:
    """Everything the evaluation will do, checked before anything starts."""
    if n < 1:
        raise EvalInputError(f"--n {n}: expected at least 1 sampled completion a task")
    if chunk_size < 1:
        raise EvalInputError(f"--chunk-size {chunk_size}: expected at least 1")
    if split not in SPLITS:
        raise EvalInputError(f"--split {split!r}: expected one of {', '.join(SPLITS)}")
    ref = resolve_model(model)
    raw = _base_config(ref, config_file, overrides)
    try:
        srcs = ([parse_source(s) for s in sources] if sources
                else task_sources(validate_config(raw)))
        raw.setdefault("tasks", {})["sources"] = [s.model_dump(mode="json", exclude_defaults=True)
                                                  for s in srcs]
        raw["tasks"]["heldout_samples"] = n
        if seed is not None:
            raw["seed"] = seed
        if engine is not None:
            raw.setdefault("sampling", {})["engine"] = engine
        if ref.base:  # the config names the model, as a run starting from it would
            raw.setdefault("policy", {})["model_path"] = ref.label
        raw["out_dir"], raw["run_id"] = "_", "work"
        cfg = _eval_config(raw)
        tasks = [t for t in build_pool(srcs) if split == "all" or t.split == split]
    except (ConfigError, EnvError) as exc:
        raise EvalInputError(str(exc)) from None
    if not tasks:
        raise EvalInputError(f"--split {split}: the sources have no {split} tasks "
                             "(try --split all)")
    spec = {"model": ref.label, "model_dir": ref.model_dir, "version": ref.version,
            "sources": [s.model_dump(mode="json") for s in srcs], "split": split, "n": n,
            "seed": cfg.seed, "config_hash": cfg.hash(), "chunk_size": chunk_size,
            "tasks": len(tasks)}
    eval_id = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    work = evaluations.eval_dir(store, eval_id)
    if not work.is_local:
        raise EvalInputError(f"--store {store!r}: evaluation runs need a local store folder")
    cfg = _eval_config({**cfg.model_dump(mode="json"), "out_dir": work.path, "run_id": "work"})
    chunks = [tasks[i:i + chunk_size] for i in range(0, len(tasks), chunk_size)]
    return Plan(cfg, ref, store, eval_id, spec, chunks, n)


def _eval_config(raw: dict) -> RunConfig:
    """validate_config less its rule that the sources hold training tasks (an evaluation
    trains nothing: HumanEval alone, all held out, is a fine thing to evaluate on)."""
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_errors(err)) from None
    pool = build_pool(task_sources(cfg))  # EnvError: a source that does not load
    check_prompts_fit(cfg, pool)
    return cfg


def _base_config(ref: ModelRef, config_file: str | None, overrides) -> dict:
    """The config the evaluation starts from, overrides applied: --config, else the run's own
    resolved config, else configs/default.yaml."""
    try:
        if config_file or ref.run_dir is None:
            return load_config(config_file, overrides).model_dump(mode="json")
        try:
            raw = registry.read_run_config(ref.run_dir)
        except FileNotFoundError as exc:
            raise EvalInputError(f"--model {ref.label}: {exc}; pass --config") from None
        for item in overrides:
            set_dotted(raw, *parse_override(item))
        return raw
    except ConfigError as exc:
        raise EvalInputError(str(exc)) from None


def link_checkpoint(p: Plan) -> None:
    """The evaluation's work folder gets the model as its checkpoint v<version> (a link to the
    model folder and a meta.json, published by one rename), so the loop's sampler loads it as
    it loads any run's version."""
    run_dir = p.cfg.run_dir
    final = checkpoints.checkpoint_dir(run_dir, p.ref.version)
    if checkpoints.exists(run_dir, p.ref.version):
        if os.path.realpath(final / "model") != os.path.realpath(p.ref.model_dir):
            raise EvalInputError(f"{final}: links to another model than {p.ref.model_dir}")
        return
    checkpoints.clear_staging(run_dir)
    staging = checkpoints.staging_dir(run_dir, p.ref.version)
    os.symlink(p.ref.model_dir, staging / "model")
    checkpoints.publish(staging, final, {"evaluated_model": p.ref.label,
                                         "model_dir": p.ref.model_dir})


class _CountingPlay(Play):
    """The loop's round of episodes, also counting the sequences its sample stages generated
    now (a stage answered from the persisted results generated nothing)."""

    generated = 0
    reused = 0

    def sample(self, turn, contexts, _episodes, max_new_tokens, k):
        state = self.sample_stage()(**self.sample_inputs(turn, k, contexts, max_new_tokens),
                                    return_state=True)
        out, seconds = state.result()
        if state.name == "Cached":
            self.reused += len(contexts)
        else:
            self.generated += len(contexts)
        return out, seconds


def rows_of(episodes, mode: str, base: dict, chunk: int, written_at: str) -> list[dict]:
    """One evaluations row per episode (storage/evaluations.py's columns)."""
    from flows.episodes import solved  # noqa: PLC0415

    rows = []
    for e in episodes:
        g = e.grade
        reward = None if g is None or math.isnan(g.reward) else float(g.reward)
        rows.append({**base, "source": e.task.source,
                     "kind": e.env.name or type(e.env).__name__, "family": e.task.family,
                     "difficulty": e.task.difficulty, "split": e.task.split,
                     "task_id": e.task.task_id, "mode": mode, "sample_index": e.index,
                     "prompt": e.intro, "completion": "".join(e.text),
                     "answer_executed": e.executed, "reward": reward, "passed": solved(e),
                     "tests_passed": g.tests_passed if g else None,
                     "tests_total": g.tests_total if g else None,
                     "status": g.status if g else (e.final or {}).get("end_reason"),
                     "hack_flags": list(g.hack_flags) if g else [],
                     "infra_error": True if g is None else bool(g.infra_error),
                     "turns": e.turns, "gen_s": float(e.gen_s),
                     "tool_calls": e.calls if e.chat else None, "chunk": chunk,
                     "written_at": written_at})
    return rows


def run_plan(p: Plan, client, opts: dict, log=print) -> dict:
    """Play and write every chunk not written yet; counts of what was done now."""
    evaluations.write_spec(p.store, p.eval_id, p.spec)
    link_checkpoint(p)
    done = evaluations.chunks_written(p.store, p.eval_id)
    kill_after = int(os.environ.get(FAULT_ENV, "0") or 0)
    base = {"eval_id": p.eval_id, "model": p.ref.label, "version": p.ref.version,
            "config_hash": p.cfg.hash(), "code_version": CODE_VERSION, "seed": p.cfg.seed}
    counts = {"chunks": len(p.chunks), "chunks_reused": len(done & set(range(len(p.chunks)))),
              "chunks_run": 0, "sequences_generated": 0, "sequences_from_cache": 0,
              "steps_graded": 0}
    v = p.ref.version
    for k, tasks in enumerate(p.chunks):
        if k in done:
            continue
        greedy = _CountingPlay(p.cfg, v, v, f"eval-greedy-c{k}", True, opts, client)
        sampled = _CountingPlay(p.cfg, v, v, f"eval-sampled-c{k}", False, opts, client)
        g_eps, s_eps = greedy.play(tasks, 1), sampled.play(tasks, p.n)
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        evaluations.write_chunk(p.store, p.eval_id, k, rows_of(g_eps, "greedy", base, k, now)
                                + rows_of(s_eps, "sampled", base, k, now))
        counts["chunks_run"] += 1
        for play in (greedy, sampled):
            counts["sequences_generated"] += play.generated
            counts["sequences_from_cache"] += play.reused
            counts["steps_graded"] += len(play.stepped)
        log(f"evaluation {p.eval_id}: chunk {k + 1}/{len(p.chunks)} written "
            f"({len(tasks)} tasks x (1 greedy + {p.n} sampled))")
        if kill_after and counts["chunks_run"] >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
    return counts


@flow(name="rollforge-evaluate-model", log_prints=True)
def evaluate_model_flow(model: str, sources: list[str] | None = None, n: int = 4,
                        split: str = "heldout", seed: int | None = None, store: str = "runs",
                        config_file: str | None = None, overrides: list[str] | None = None,
                        chunk_size: int = 16, engine: str | None = None) -> dict:
    """Evaluate a model on sources into the store's `evaluations` table (resumable).

    Args:
        model: CHECKPOINT_DIR, RUN_DIR[:VERSION], a known model name
            (smollm2-135m-instruct) or a Hugging Face model folder.
        sources: kinds (io), task files (.jsonl/.parquet) or JSON source objects; empty: the
            config's own sources.
        n: sampled completions a task (one greedy completion a task besides).
        split: heldout, train or all of the sources' tasks.
        seed: the sampling seed (empty: the config's).
        store: the store folder the evaluations table lives in.
        config_file: the base config (empty: the run's own, else configs/default.yaml).
        overrides: key=value config overrides, as `rollforge run --set`.
        chunk_size: tasks a chunk (the unit written, and resumed from).
        engine: local or vllm (empty: the config's `sampling.engine`).
    """
    from flows.rollouts import close_clients, cluster_description, dask_client  # noqa: PLC0415
    from flows.sampler import close_engines, preflight  # noqa: PLC0415

    p = plan(model, sources, n, split, seed, store, config_file, overrides or [], chunk_size,
             engine)
    preflight(p.cfg)
    opts = dict(result_storage=Path(p.cfg.run_dir).resolve() / ".prefect-results")
    try:
        c = p.cfg.cluster
        client = dask_client(c.address, c.n_workers, c.threads_per_worker)
        print(cluster_description(client))
        counts = run_plan(p, client, opts)
    finally:
        close_engines()
        close_clients()
    return {"eval_id": p.eval_id, "store": store, **counts}
