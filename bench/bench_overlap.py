"""`rl.overlap` off and on: the default run's iteration time and its held-out result.

One warm start is made first (the default config's own, until its criterion), then the default
config's RL iterations run from a copy of that v0 twice in this sitting, without and with
`rl.overlap` (iteration i sampled by version i-1 while update i-1 trains beside it; the
update corrects for the staleness, training/trainer.py). Printed: the median seconds of the
iterations that ran no held-out evaluation, their parts (sampling, rollouts, the update, and
with overlap how long the flow still waited for it), the RL phase's wall time, and the
held-out pass rates after the last iteration, overall and per family.

    .venv/bin/python bench/bench_overlap.py                 # ~20 min on 2 quiet cores
    .venv/bin/python bench/bench_overlap.py --iterations 8 --set sft.steps=600 --set sft.until_pass=null
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_stages import run  # noqa: E402
from bench.bench_threads import median_iteration, seed_v0  # noqa: E402


def heldout(run_dir: str) -> dict:
    from storage.registry import read_metrics

    last = read_metrics(run_dir).iloc[-1]
    return {k: float(v) for k, v in last.items() if str(k).startswith("heldout/")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=None, help="default: the config's")
    ap.add_argument("--out", default="/tmp/rollforge-bench-overlap")
    ap.add_argument("--config", default=None, help="another config than the default's")
    ap.add_argument("--set", action="append", default=[], help="key=value for every run")
    ap.add_argument("--v0", default=None, help="a warm start (checkpoints/v0000) to start from "
                    "instead of making one")
    args = ap.parse_args()
    if os.environ.get("OMP_NUM_THREADS"):
        sys.exit("unset OMP_NUM_THREADS: the run chooses its threads (threads.torch auto), "
                 "and overlap splits the cores between sampler and update")
    shutil.rmtree(args.out, ignore_errors=True)
    common = list(args.set) + ([f"iterations={args.iterations}"] if args.iterations else [])
    print(f"{len(os.sched_getaffinity(0))} cores; load average at start "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    if args.v0:
        v0 = Path(args.v0)
    else:
        prep, prep_wall = run(ROOT, args.config, args.out, [*args.set, "iterations=1",
                                                              "eval_every=100"])
        from training.checkpoints import checkpoint_dir

        v0 = checkpoint_dir(prep, 0)
        print(f"warm start and one iteration: {prep_wall:.0f}s", flush=True)
    results = []
    for overlap in ("false", "true"):
        run_id = f"overlap-{overlap}"
        seed_v0(v0, args.out, run_id)
        _, wall = run(ROOT, args.config, args.out,
                      [*common, f"rl.overlap={overlap}", f"run_id={run_id}"])
        it, parts = median_iteration(f"{args.out}/{run_id}")
        results.append((overlap, it, wall, parts, heldout(f"{args.out}/{run_id}")))
        print(f"  rl.overlap={overlap:5}: median iteration {it:6.2f}s (wall {wall:.0f}s)",
              flush=True)
    base = results[0][1]
    print("\nmedian seconds of the iterations without evaluation; wall: the whole run from v0 "
          "(v0's and the evaluations included)")
    print(f"{'rl.overlap':<11}{'sample':>8}{'rollouts':>9}{'update':>8}{'waited':>8}"
          f"{'iteration':>11}{'x off':>7}{'wall s':>8}{'held-out greedy':>17}{'sampled':>9}")
    for overlap, it, wall, p, h in results:
        print(f"{overlap:<11}{p.get('sample', 0):>8.2f}{p.get('run_rollouts', 0):>9.2f}"
              f"{p.get('update_policy', 0):>8.2f}{p.get('update_wait', float('nan')):>8.2f}"
              f"{it:>11.2f}{it / base:>7.2f}{wall:>8.0f}"
              f"{h.get('heldout/pass_greedy', float('nan')):>17.3f}"
              f"{h.get('heldout/pass_sampled', float('nan')):>9.3f}")
    fams = sorted({k.split("/")[1] for *_, h in results for k in h
                   if k.count("/") == 2 and k.endswith("/pass_greedy")})
    if fams:
        print("\nheld-out pass greedy / sampled per family after the last iteration")
        print(f"{'family':<14}" + "".join(f"{'overlap ' + o:>20}" for o, *_ in results))
        for f in fams:
            print(f"{f:<14}" + "".join(
                f"{h.get(f'heldout/{f}/pass_greedy', float('nan')):>12.3f} / "
                f"{h.get(f'heldout/{f}/pass_sampled', float('nan')):.3f}"
                for *_, h in results))
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
