"""`rollforge tasks list|show|export|check`: for people who curate tasks.

The tasks come from a kind's own generator (`--kind io|dataframe|humaneval|<plug-in>`, or
`--suite`, its older name, where `procedural` means `io`; options as flags or `--options JSON`)
or a file (`--file tasks.jsonl|tasks.parquet`, any kind: each record is validated by the kind
that grades it). `check` validates every record (a bad one: exit 1 naming file and line), then
checks the tasks' quality by their kind (its record checks, the reference passes, the kind's
trivial answers fail) and exits 1 if any task has a problem.
"""
from __future__ import annotations

import argparse
import sys


def _csv(kind):
    def parse(s: str):
        try:
            return [kind(x) for x in s.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {kind.__name__}, "
                                             f"got {s!r}")
    return parse


def _source_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("where the tasks come from")
    g.add_argument("--kind", "--suite", dest="kind", default="io",
                   help="an environment kind's own tasks: io (default; 'procedural' is the same), "
                   "dataframe, humaneval, a plug-in (`rollforge envs`) or module:Class")
    g.add_argument("--options", default=None, metavar="JSON",
                   help="the kind's options as a JSON object (see `rollforge envs KIND`)")
    g.add_argument("--file", help="a task file (.jsonl or .parquet, any kind) instead")
    g.add_argument("--families", type=_csv(str), help="comma-separated families (generated suites)")
    g.add_argument("--difficulties", type=_csv(int), help="comma-separated levels, e.g. 1,2,3")
    g.add_argument("--per-family", type=int, default=None, dest="tasks_per_family",
                   help="tasks per family and difficulty (default 5)")
    g.add_argument("--n-tests", type=int, default=None, help="hidden tests per task")
    g.add_argument("--seed", type=int, default=None, help="generator seed (default 0)")
    g.add_argument("--heldout-fraction", type=float, default=None)
    f = p.add_argument_group("filters")
    f.add_argument("--split", choices=["train", "heldout"])
    f.add_argument("--family", help="only this family")
    f.add_argument("--difficulty", type=int, help="only this difficulty")


def register(subparsers) -> None:
    p = subparsers.add_parser("tasks", help="list, show, export or check tasks",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="tasks_command", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="one line per task (or --summary counts)")
    _source_args(ls)
    ls.add_argument("--summary", action="store_true", help="counts per family and difficulty")
    ls.add_argument("--limit", type=int, default=None)
    ls.set_defaults(func=_list)
    show = sub.add_parser("show", help="one task: prompt, examples, hidden tests, reference")
    show.add_argument("task_id")
    _source_args(show)
    show.add_argument("--json", action="store_true", help="the record as JSON")
    show.set_defaults(func=_show)
    ex = sub.add_parser("export", help="write the tasks to a .jsonl or .parquet file")
    _source_args(ex)
    ex.add_argument("--out", required=True, help="output path (.jsonl or .parquet)")
    ex.set_defaults(func=_export)
    ck = sub.add_parser("check", help="validate records and task quality; exit 1 on a problem")
    _source_args(ck)
    ck.add_argument("--no-exec", action="store_true",
                    help="skip the sandbox runs (reference passes, trivial solution fails)")
    ck.add_argument("--workers", type=int, default=2, help="sandbox runs in parallel")
    ck.add_argument("--backend", default=None, help="sandbox backend (default: process)")
    ck.set_defaults(func=_check)
    br = sub.add_parser("build-repo", help="synthesize bug-fix instances from a PyPI package's "
                        "sdist into the repo task file (envs/repo/build.py)")
    br.add_argument("spec", metavar="NAME==VERSION")
    br.add_argument("--out", default=None, help="task file (default: envs/repo/instances.jsonl)")
    br.add_argument("--max", type=int, default=60, dest="max_instances",
                    help="single-file instances at most")
    br.add_argument("--max-tries", type=int, default=400, help="mutants tried at most")
    br.add_argument("--pairs", type=int, default=10, help="two-file instances at most")
    br.add_argument("--runs", type=int, default=3, help="whole-suite runs for stable tests")
    br.set_defaults(func=_build_repo)


_OPTION_FLAGS = ("families", "difficulties", "tasks_per_family", "n_tests", "seed",
                 "heldout_fraction")


def _source(args):
    """The CLI's source: --file, or --kind with its options (flags the kind has, --options)."""
    import json

    from envs.base import EnvError
    from envs.registry import kind_class
    from envs.sources import SourceConfig
    from flows.cli import UsageError

    kind = {"procedural": "io", "repos": "repo"}.get(args.kind, args.kind)
    if args.file:
        return SourceConfig(file=args.file, kind=None if args.kind in ("io", "procedural") else kind)
    try:
        fields = kind_class(kind).Config.model_fields
    except EnvError as exc:
        raise UsageError(str(exc)) from None
    options = {f: getattr(args, f) for f in _OPTION_FLAGS
               if getattr(args, f) is not None and f in fields}
    given = [f for f in _OPTION_FLAGS if getattr(args, f) is not None and f not in fields]
    if given:
        raise UsageError(f"kind {kind!r} has no option {given[0]!r} (see `rollforge envs {kind}`)")
    if args.options:
        try:
            extra = json.loads(args.options)
        except ValueError as exc:
            raise UsageError(f"--options: not valid JSON ({exc})") from None
        if not isinstance(extra, dict):
            raise UsageError("--options: expected a JSON object")
        options.update(extra)
    return SourceConfig(kind=kind, options=options)


def _load(args):
    from envs.base import EnvError
    from envs.sources import load_source
    from flows.cli import UsageError

    try:
        tasks = load_source(_source(args))
    except EnvError as exc:
        if args.tasks_command == "check" and args.file:
            raise
        raise UsageError(str(exc)) from None
    if args.split:
        tasks = [t for t in tasks if t.split == args.split]
    if args.family:
        tasks = [t for t in tasks if t.family == args.family]
    if args.difficulty is not None:
        tasks = [t for t in tasks if t.difficulty == args.difficulty]
    return tasks


def _list(args) -> int:
    tasks = _load(args)
    if args.summary:
        counts: dict[tuple, list[int]] = {}
        for t in tasks:
            c = counts.setdefault((t.suite, t.family, t.difficulty), [0, 0])
            c[t.split == "heldout"] += 1
        print(f"{'suite':<11}{'family':<14}{'diff':>4}{'train':>7}{'heldout':>9}")
        for (s, f, d), (tr, ho) in sorted(counts.items()):
            print(f"{s:<11}{f:<14}{d:>4}{tr:>7}{ho:>9}")
        print(f"{len(tasks)} tasks")
        return 0
    for t in tasks[: args.limit]:
        ref = "ref" if t.reference is not None else "no-ref"
        print(f"{t.task_id}\t{t.suite}\t{t.family}\td{t.difficulty}\t{t.split}\t"
              f"{len(t.tests)} tests\t{ref}\t{t.kind}")
    return 0


def _show(args) -> int:
    from flows.cli import UsageError

    tasks = {t.task_id: t for t in _load(args)}
    task = tasks.get(args.task_id)
    if task is None:
        raise UsageError(f"no task {args.task_id!r} in this source ({len(tasks)} tasks); "
                         f"see `rollforge tasks list`")
    if args.json:
        print(task.model_dump_json(indent=2))
        return 0
    print(f"# {task.task_id}  suite={task.suite} family={task.family} "
          f"difficulty={task.difficulty} split={task.split} kind={task.kind}")
    print("## prompt\n" + task.prompt)
    print("## reference\n" + (task.reference if task.reference is not None
                               else "(none: verification-only)\n"))
    print(f"## hidden tests ({len(task.tests)})")
    for c in task.tests:
        print(f"{task.entry_point}{tuple(c.args)!r} -> {c.expected!r}")
    if task.payload:
        import json

        print("## payload\n" + json.dumps(task.payload, indent=2))
    return 0


def _export(args) -> int:
    from flows.cli import UsageError
    from tasks.files import save_tasks

    tasks = _load(args)
    try:
        path = save_tasks(tasks, args.out)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {len(tasks)} tasks to {path}")
    return 0


def _check(args) -> int:
    from envs.base import EnvError
    from envs.registry import env_for_task
    from envs.quality import check_tasks
    from tasks.quality import dedupe, find_split_leaks

    try:
        tasks = _load(args)
        env = _source(args).environment()
    except EnvError as exc:
        print(f"rollforge tasks check: bad record: {exc}", file=sys.stderr)
        return 1
    failed = 0
    _, dups = dedupe(tasks)
    for d in dups:
        print(f"DUPLICATE {d}")
    leaks = find_split_leaks(tasks)
    for leak in leaks:
        print(f"LEAK {leak}")
    if args.no_exec:
        checks = [(t.task_id, (env or env_for_task(t)).problems(t)) for t in tasks]
    else:
        from sandbox.config import SandboxConfig
        from sandbox.registry import make_sandbox

        cfg = SandboxConfig(**({"backend": args.backend} if args.backend else {}),
                            site_packages=any((env or env_for_task(t)).site_packages
                                              for t in tasks))
        sandbox = make_sandbox(cfg)
        try:
            checks = [(c.task_id, list(c.problems))
                      for c in check_tasks(tasks, sandbox, cfg.limits(), workers=args.workers,
                                           env=env)]
        finally:
            sandbox.close()
    for task_id, problems in checks:
        for p in problems:
            print(f"PROBLEM {task_id}: {p}")
        failed += bool(problems)
    ok = len(tasks) - failed
    print(f"{len(tasks)} tasks: {ok} ok, {failed} with problems, {len(dups)} duplicates, "
          f"{len(leaks)} split leaks" + (" (no sandbox runs)" if args.no_exec else ""))
    return 1 if failed or dups or leaks else 0


def _build_repo(args) -> int:
    from pathlib import Path

    from envs.repo.build import DEFAULT_FILE, BuildError, BuildOptions, build_into_file
    from envs.repo.source import RepoSourceError, split_spec
    from flows.cli import UsageError

    try:
        split_spec(args.spec)
        opts = BuildOptions(runs=args.runs, max_instances=args.max_instances,
                            max_tries=args.max_tries, pairs=args.pairs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if min(args.runs, args.max_instances, args.max_tries) < 1 or args.pairs < 0:
        raise UsageError("--runs, --max and --max-tries must be >= 1, --pairs >= 0")
    try:
        made, total = build_into_file(args.spec, Path(args.out) if args.out else DEFAULT_FILE,
                                      opts)
    except (BuildError, RepoSourceError) as exc:
        print(f"rollforge tasks build-repo: {exc}", file=sys.stderr)
        return 1
    print(f"{args.spec}: {made} instances; {total} in the file")
    return 0
