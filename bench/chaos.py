"""The chaos run: `rollforge run` on a small config against separately started services (a
`dask scheduler` and `dask worker`s under their nannies, a Prefect server, the process sandbox,
2 trainer ranks, the store on a small tmpfs of its own), while a driver injects faults at
moments drawn from a seed, restarts what died the way a supervisor would, and resumes the run
with the same command until it completes; then the store is checked and compared with an
uninterrupted run of the same seed.

Faults (`KINDS`): SIGKILL of the flow process, of a Dask worker, of the Dask scheduler
(restarted on its port, workers too if they left), of a trainer rank, of a sandbox's process
tree; a Prefect server killed and restarted; the store's filesystem filled, then freed; a hung
sandbox (its process tree SIGSTOPped and never continued); a stage's Prefect result deleted.

Every wait is bounded: a run that makes no progress (no new journal line, no exit) for
--stall-s is a hang: counted, reported, killed, and the run resumed. Needs root (the tmpfs).

This module is the command and its report; the parts are bench/chaos_services.py (the services
and the killing of process trees), chaos_faults.py (the faults), chaos_runner.py (a run resumed
until it completes while faults land) and chaos_check.py (the store's check and the comparison).

    .venv/bin/python bench/chaos.py --seeds 0 1 2 --faults 12
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.chaos_check import check_store, compare  # noqa: E402
from bench.chaos_faults import KINDS, small_fs  # noqa: E402
from bench.chaos_runner import Tally, chaos, reference  # noqa: E402
from bench.chaos_services import Services  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--faults", type=int, default=len(KINDS), help="faults per seed")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--gap-s", type=float, nargs=2, default=(20.0, 60.0), metavar=("MIN", "MAX"),
                    help="the most seconds between faults, drawn uniformly: a fault lands 0-2 s "
                    "after the next start of a stage drawn at random, or after this if that "
                    "stage does not start by then")
    ap.add_argument("--stall-s", type=float, default=300.0,
                    help="seconds without a new journal line or an exit that count as a hang")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--store-mb", type=int, default=96)
    ap.add_argument("--no-reference", action="store_true", help="skip the equality check")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/chaos.py: needs root (it mounts the store's own tmpfs)", file=sys.stderr)
        return 2
    totals, lines, bad = Tally(), [], 0
    with tempfile.TemporaryDirectory(prefix="chaos-") as d:
        work = Path(d)
        services = Services(work)
        try:
            with small_fs(work / "store", args.store_mb) as store:
                for seed in args.seeds:
                    print(f"seed {seed}: {args.faults} faults", flush=True)
                    t0 = time.monotonic()
                    t, runs = chaos(services, store, seed, args.faults, args.iterations,
                                    args.stall_s, tuple(args.kinds), tuple(args.gap_s),
                                    log=lambda s: print(s, flush=True))
                    ref = None if args.no_reference else reference(services, store, seed,
                                                                     args.iterations)
                    for name in ("injected", "skipped", "exits", "errors"):
                        getattr(totals, name).update(getattr(t, name))
                    totals.hangs += t.hangs
                    totals.left_behind += t.left_behind
                    totals.attempts += t.attempts
                    totals.completed += t.completed
                    for run_dir in runs:
                        chk = check_store(run_dir, args.iterations, 4)
                        cmp = None if ref is None else compare(run_dir, ref, args.iterations)
                        bad += bool(chk["problems"] or chk["duplicated"]
                                    or (cmp and (cmp["lost"] or cmp["extra"])))
                        lines.append(f"seed {seed} {run_dir.parent.name}: rows {chk['rows']}, "
                                     f"duplicated {chk['duplicated']}, problems "
                                     f"{chk['problems']}; vs uninterrupted: {cmp}")
                        print(lines[-1], flush=True)
                    print(f"seed {seed}: {sum(t.injected.values())} faults, {t.completed} runs "
                          f"completed, {t.attempts} invocations, hangs {len(t.hangs)}, "
                          f"{time.monotonic() - t0:.0f} s", flush=True)
        finally:
            services.close()
    _report(totals, lines, len(args.seeds))
    return 1 if bad or totals.hangs or totals.left_behind else 0


def _report(totals: Tally, lines: list[str], n_seeds: int) -> None:
    """The summary over all seeds, then each run's line (its check and its comparison)."""
    print("\nfaults injected by kind:", dict(sorted(totals.injected.items())))
    print("nothing to hit at the drawn moment (retried 2 s later):", dict(totals.skipped))
    print("exit codes of the invocations:", dict(totals.exits))
    print("errors the failed invocations ended with:")
    for e, n in totals.errors.most_common():
        print(f"  {n} x {e}")
    print(f"hangs: {len(totals.hangs)} {totals.hangs}")
    print(f"trainer ranks left behind by a dead flow (killed after 60 s): {totals.left_behind}")
    print(f"\n{n_seeds} seeds, {sum(totals.injected.values())} faults, "
          f"{totals.attempts} invocations, runs completed {totals.completed}")
    for ln in lines:
        print(ln)


if __name__ == "__main__":
    sys.exit(main())
