"""`rollforge hacks`: run each kind's hack suite (envs/hacks.py) through its real grader and
sandbox, and print per kind the attacks tried, how many were credited (must be 0) and flagged."""
from __future__ import annotations

import json
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "hacks", help="run the kinds' hack suites: every attack must earn nothing and be flagged",
        description="Play every attack of each kind's hack suite as an episode through the "
        "kind's real grader in the sandbox, on a few of its tasks, and print per kind: attacks, "
        "tried (attack x task), credited (reward > 0 or solved: must be 0), flagged (raised a "
        "flag the attack names). Exit 0 when every attack was refused, 1 otherwise.")
    p.add_argument("kinds", nargs="*", metavar="KIND",
                   help="kinds to attack (default: every built-in kind, `rollforge envs`)")
    p.add_argument("--options", default=None, metavar="JSON",
                   help="options of the kind (only with one KIND)")
    p.add_argument("--file", default=None, help="attack the tasks of this task file (one KIND)")
    p.add_argument("--tasks", type=int, default=2, help="tasks per kind (spread over its list)")
    p.add_argument("--attack", action="append", default=[], help="only this attack (repeatable)")
    p.add_argument("--backend", default=None, help="sandbox backend (default: process)")
    p.add_argument("--workers", type=int, default=1,
                   help="attacks graded at once, each in its own sandbox run (default: 1)")
    p.add_argument("--json", action="store_true", help="one JSON object per attack and task")
    p.set_defaults(func=_hacks)


def spread(tasks: list, n: int) -> list:
    """`n` of `tasks` taken evenly over their list in task-id order (all of them when there are
    no more): the hack suite attacks a few tasks of a kind, not only its first ones."""
    tasks = sorted(tasks, key=lambda t: t.task_id)
    if n >= len(tasks):
        return tasks
    step = len(tasks) / n
    return [tasks[int(i * step)] for i in range(n)]


def _hacks(args) -> int:
    from envs.base import EnvError, StepContext
    from envs.hacks import run_suite, summary
    from envs.registry import BUILTIN, make_env, validate_by_kind
    from flows.cli import UsageError
    from rewards.aggregate import RewardConfig
    from sandbox.config import SandboxConfig
    from sandbox.registry import make_sandbox
    from tasks.files import load_tasks

    kinds = args.kinds or list(BUILTIN)
    if (args.options or args.file) and len(kinds) != 1:
        raise UsageError("--options and --file need exactly one KIND")
    if args.tasks < 1:
        raise UsageError(f"--tasks must be at least 1 (got {args.tasks})")
    if args.workers < 1:
        raise UsageError(f"--workers must be at least 1 (got {args.workers})")
    try:
        options = json.loads(args.options) if args.options else {}
    except json.JSONDecodeError as exc:
        raise UsageError(f"--options is not JSON: {exc}") from None
    results = []
    for kind in kinds:
        try:
            env = make_env(kind, options)
            # a kind that generates no tasks names the file it is attacked on (attack_tasks)
            tasks = load_tasks(args.file, validate=validate_by_kind) if args.file else env.attack_tasks()
        except (EnvError, OSError, ValueError) as exc:
            raise UsageError(f"kind {kind!r}: {exc}") from None
        if not tasks:  # openenv: the reward is its environment server's own verdict
            if args.kinds:
                raise UsageError(f"kind {kind!r} has no hack suite (no tasks to attack)")
            print(f"kind {kind!r}: no hack suite, skipped", file=sys.stderr)
            continue
        cfg = SandboxConfig(**({"backend": args.backend} if args.backend else {}),
                            site_packages=env.site_packages)
        sandbox = make_sandbox(cfg)
        try:
            ctx = StepContext(sandbox, cfg.limits(), RewardConfig())
            got = run_suite(env, spread(tasks, args.tasks), ctx, args.attack, args.workers)
        finally:
            sandbox.close()
        results += got
        for r in got:
            if args.json:
                print(json.dumps({"kind": r.kind, "attack": r.attack, "task_id": r.task_id,
                                  "reward": r.reward, "solved": r.solved, "flags": r.flags,
                                  "expected": r.expected, "refused": r.refused}))
            elif not r.refused:
                why = ("infra error" if r.infra_error else "CREDITED" if r.credited
                       else f"not flagged {'/'.join(r.expected)}")
                print(f"{why}: {r.kind} {r.attack} on {r.task_id}: reward {r.reward:.3f}, "
                      f"flags {','.join(r.flags) or '-'}", file=sys.stderr)
    if not args.json:
        print(f"{'kind':<10} {'attacks':>7} {'tried':>6} {'credited':>8} {'flagged':>8} "
              f"{'infra':>6}")
        for kind, s in summary(results).items():
            print(f"{kind:<10} {s['attacks']:>7} {s['tried']:>6} {s['credited']:>8} "
                  f"{s['flagged']:>8} {s['infra']:>6}")
    return 0 if results and all(r.refused for r in results) else 1
