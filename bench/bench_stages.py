"""Per-stage timing of the loop: runs a config (default: configs/default.yaml) through
`rollforge run`, or reads a finished run with --run-dir, and prints seconds per stage per
iteration beside each stage's share of the iteration, plus the wall time of the whole run.

    .venv/bin/python bench/bench_stages.py                       # the default run (~10 min)
    .venv/bin/python bench/bench_stages.py --config configs/tiny.yaml --out /tmp/bench-runs
    .venv/bin/python bench/bench_stages.py --run-dir runs/default  # an existing run
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STAGES = ["generate_tasks", "sample", "run_rollouts", "score", "write_trajectories",
          "update_policy", "evaluate"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=None)
    ap.add_argument("--out", default="/tmp/rollforge-bench-runs")
    ap.add_argument("--run-dir", default=None, help="report an existing run instead of running one")
    args = ap.parse_args()
    from storage.registry import read_metrics

    wall = None
    if args.run_dir is None:
        run_id = f"bench-{int(time.time())}"
        cmd = [sys.executable, "-m", "flows.cli", "run", "--set", f"out_dir={args.out}",
               "--set", f"run_id={run_id}"] + (["--config", args.config] if args.config else [])
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode:
            print(proc.stdout[-2000:], proc.stderr[-4000:], file=sys.stderr)
            return proc.returncode
        args.run_dir = f"{args.out}/{run_id}"
    m = read_metrics(args.run_dir)
    cols = [s for s in STAGES if f"time/{s}_s" in m.columns]
    print(f"run: {args.run_dir}")
    print("iter  " + "  ".join(f"{s[:14]:>14}" for s in cols) + "       iter s  rollouts/s")
    for _, r in m.iterrows():
        cells = []
        for s in cols:
            v = r[f"time/{s}_s"]
            cells.append("             -" if v != v else f"{v:7.2f}s {100 * v / r['time/iteration_s']:4.0f}%")
        print(f"{int(r['iteration']):4d}  " + "  ".join(f"{c:>14}" for c in cells)
              + f"  {r['time/iteration_s']:11.2f}  {r['rollout/per_s']:10.1f}")
    total = m["time/iteration_s"].sum()
    print("share of all iterations' time: " + ", ".join(
        f"{s} {100 * m[f'time/{s}_s'].fillna(0).sum() / total:.0f}%" for s in cols))
    if wall is not None:
        print(f"whole run wall time: {wall:.1f}s (iterations {total:.1f}s; the rest is start-up, "
              f"SFT warm start and evaluation of the SFT start)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
