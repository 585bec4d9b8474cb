"""`rollforge data export [--store PATH ...] [--evaluations PATH ...] --out DIR`: the verified
trajectories of runs, and the verified samples of evaluations (`rollforge eval --model`), as an
SFT dataset (chat-message JSONL and Parquet per split, a manifest).

Kept: status ok, no infra error, no hack or tamper flag, and solved (or reward >= --min-reward).
A task held out by any input run (its rows' split, or its config's task pool rebuilt) is never
in the train split; nor is a task an input evaluation held out (its rows' split: `rollforge
eval` runs on held-out tasks by default) unless --train-on-evaluated-heldout says so.
storage/sft_export.py holds the selection and the writing.
"""
from __future__ import annotations

import argparse
import math
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("data", help="datasets from the store's trajectories and "
                              "evaluations (SFT export)",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)
    e = sub.add_parser(
        "export", help="verified trajectories and evaluation samples as an SFT dataset "
                       "(JSONL + Parquet)",
        description="Write the verified trajectories of the runs and the verified samples of "
                    "the evaluations as chat messages (user = the task's prompt, assistant = "
                    "the policy's completion) with provenance, split by task; print the counts "
                    "kept and dropped by reason.",
        epilog="examples: rollforge data export --store runs/ --out data/round1 --dedup "
               "--per-task-cap 4 --validation-fraction 0.1; rollforge data export "
               "--evaluations runs/ --out data/round1 --dedup (the evaluations of "
               "`rollforge eval --model ... --split train`; held-out ones need "
               "--train-on-evaluated-heldout to reach train)")
    e.add_argument("--store", action="append", default=[], metavar="PATH",
                   help="a run folder or a folder of runs (fsspec URIs too); repeat for more")
    e.add_argument("--evaluations", action="append", default=[], metavar="PATH",
                   help="evaluations of `rollforge eval --model`: a store holding "
                        "_evaluations/, that folder, or one evaluation's folder "
                        "(_evaluations/<eval_id>); repeat for more. At least one --store or "
                        "--evaluations")
    e.add_argument("--out", required=True, help="folder to write (absent or empty; local)")
    e.add_argument("--min-reward", type=float, default=None, metavar="X",
                   help="keep rows with reward >= X (default: only rows marked solved)")
    e.add_argument("--dedup", action="store_true",
                   help="one example per task and normalised answer (comments and layout "
                        "ignored for Python)")
    e.add_argument("--per-task-cap", type=int, default=None, metavar="N",
                   help="at most N examples per task (highest rewards first)")
    e.add_argument("--validation-fraction", type=float, default=0.0, metavar="F",
                   help="share of the (not held-out) tasks whose examples go to the "
                        "validation split, by task (default: %(default)s)")
    e.add_argument("--keep-heldout", action="store_true",
                   help="write the held-out tasks' verified examples to heldout.* (default: "
                        "drop them); they never go to train")
    e.add_argument("--train-on-evaluated-heldout", action="store_true",
                   help="let the tasks an input evaluation held out (its rows' split) into "
                        "train/validation; the manifest lists them (heldout_tasks_released), "
                        "and no held-out figure of a model trained on them may count them. "
                        "Tasks a run holds out stay out of train")
    e.add_argument("--seed", type=int, default=0, help="seed of the train/validation split")
    e.add_argument("--no-config-heldout", action="store_true",
                   help="take the held-out tasks from the rows only, without rebuilding each "
                        "run's task pool from its config.yaml (a task held out by a run whose "
                        "rows do not show it could then reach train)")
    e.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    e.set_defaults(func=run_export)


def config_heldout(runs: list[str]) -> tuple[set[str], list[str]]:
    """Task ids held out by the runs' configs (the task pool each config builds), and notes for
    the runs that recorded no config. ValueError names a run whose config cannot be rebuilt."""
    from flows import stages
    from flows.config import ConfigError, validate_config
    from storage import registry
    from storage.fs import locate

    held: set[str] = set()
    notes = []
    for run in runs:
        try:
            raw = registry.read_run_config(run)
        except FileNotFoundError:
            notes.append(f"{run}: no config.yaml; its held-out tasks are taken from its rows")
            continue
        loc = locate(run)
        try:
            cfg = validate_config({**raw, "out_dir": loc.parent().uri, "run_id": loc.name})
            held |= {t.task_id for t in stages.heldout_tasks(cfg)}
        except (ConfigError, ValueError, ImportError, OSError) as exc:
            raise ValueError(f"{run}: its config.yaml does not rebuild its task pool, so its "
                             f"held-out tasks are unknown ({exc}); pass --no-config-heldout "
                             "to rely on the rows' split") from None
    return held, notes


def _options(args: argparse.Namespace):  # noqa: ANN202
    from flows.cli import UsageError
    from storage.sft_export import ExportOptions

    if args.min_reward is not None and not math.isfinite(args.min_reward):
        raise UsageError(f"--min-reward {args.min_reward}: expected a finite number")
    if args.per_task_cap is not None and args.per_task_cap < 1:
        raise UsageError(f"--per-task-cap {args.per_task_cap}: expected an integer >= 1")
    if not args.store and not args.evaluations:
        raise UsageError("nothing to export: give --store PATH (runs) or --evaluations PATH "
                         "(evaluations), or both")
    if not 0.0 <= args.validation_fraction < 1.0:
        raise UsageError(f"--validation-fraction {args.validation_fraction}: expected "
                         "0 <= F < 1")
    return ExportOptions(min_reward=args.min_reward, dedup=args.dedup,
                         per_task_cap=args.per_task_cap,
                         validation_fraction=args.validation_fraction,
                         keep_heldout=args.keep_heldout, seed=args.seed,
                         train_on_evaluated_heldout=args.train_on_evaluated_heldout)


def run_export(args: argparse.Namespace) -> int:
    from flows.cli import UsageError
    from storage.evaluations import has_evaluations
    from storage.sft_export import check_out_dir, export, resolve_runs

    opts = _options(args)
    try:
        check_out_dir(args.out, args.overwrite)  # before minutes of reading
        runs = resolve_runs(args.store)
        held, notes = (set(), []) if args.no_config_heldout else config_heldout(runs)
        result = export(args.store, args.out, opts, heldout=held, runs=runs,
                        overwrite=args.overwrite, eval_inputs=args.evaluations)
    except (FileNotFoundError, FileExistsError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    notes += [f"{s} holds evaluations, not read: pass --evaluations {s} to export them too"
              for s in args.store if s not in args.evaluations and has_evaluations(s)]
    if result.released:
        notes.append(f"{len(result.released)} task(s) held out by the evaluations are in "
                     "train/validation (--train-on-evaluated-heldout; manifest.json "
                     "heldout_tasks_released): a model trained on them has no held-out figure "
                     "on them")
    for note in notes + result.notes:
        print(f"rollforge data export: note: {note}", file=sys.stderr)
    kept = ", ".join(f"{s} {n}" for s, n in result.kept.items())
    dropped = ", ".join(f"{r} {n}" for r, n in result.dropped.items() if n) or "none"
    print(f"read {result.rows_read} rows from {len(runs)} run(s) and "
          f"{result.evaluations} evaluation(s)")
    print(f"kept: {kept}")
    print(f"dropped: {dropped}")
    print(f"wrote {args.out} (manifest.json, <split>.jsonl, <split>.parquet)")
    return 0
