"""The default iteration on a quiet machine and next to a competing busy process, with the
flow's torch threads chosen by `threads.torch: auto` and fixed at the core count (what torch
does when nobody chooses, and what rollforge did before `threads.torch`).

One warm start is made first (the default config with a fixed-length warm start of --sft-steps
steps, so every run starts from the same v0), then each case is a `rollforge run` of the default
config from a copy of that v0 for --iterations iterations, one after another in this sitting:

    quiet,   auto         the baseline
    quiet,   fixed N      auto must cost nothing when nobody competes
    busy,    auto         target: at most 2x the baseline
    busy,    fixed N      the stall `auto` avoids

"busy" is one `python -c 'while True: pass'` started before the run and killed after it. The
figure is the median over the iterations that ran no held-out evaluation (evaluation is the
same work in every case; it is in the wall time). Held-out evaluation uses one sampled
completion per task (tasks.heldout_samples=1) to keep the busy fixed-thread case short.

    .venv/bin/python bench/bench_threads.py                     # ~15 min on 2 quiet cores
    .venv/bin/python bench/bench_threads.py --iterations 3 --sft-steps 200
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_stages import run  # noqa: E402


def seed_v0(v0: Path, out: str, run_id: str) -> None:
    """Run `run_id` under `out` starts from the warm start `v0` (its SFT stage finds it)."""
    from training.checkpoints import checkpoint_dir

    dst = checkpoint_dir(f"{out}/{run_id}", 0)
    dst.parent.mkdir(parents=True)
    shutil.copytree(v0, dst)


def median_iteration(run_dir: str) -> tuple[float, dict]:
    import numpy as np

    from storage.registry import read_metrics

    m = read_metrics(run_dir)
    plain = m[m.get("time/evaluate_s", 0).fillna(0) == 0] if "time/evaluate_s" in m else m
    rows = plain if len(plain) else m
    parts = {s: float(np.median(rows[f"time/{s}_s"].fillna(0))) for s in
             ("sample", "run_rollouts", "update_policy", "update_wait") if f"time/{s}_s" in rows}
    parts["threads"] = float(np.median(m["threads/torch"])) if "threads/torch" in m else float("nan")
    return float(np.median(rows["time/iteration_s"])), parts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--out", default="/tmp/rollforge-bench-threads")
    ap.add_argument("--config", default=None, help="another config than the default's")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    if os.environ.get("OMP_NUM_THREADS"):
        sys.exit("unset OMP_NUM_THREADS: it caps `auto` and would hide what this measures")
    shutil.rmtree(args.out, ignore_errors=True)
    common = ["sft.until_pass=null", f"sft.steps={args.sft_steps}", "tasks.heldout_samples=1",
              f"eval_every={10 * args.iterations}"]
    print(f"{cores} cores; load average at start {os.getloadavg()[0]:.2f}", flush=True)
    prep, prep_wall = run(ROOT, args.config, args.out, [*common, "iterations=1"])
    from training.checkpoints import checkpoint_dir

    v0 = checkpoint_dir(prep, 0)
    print(f"warm start ({args.sft_steps} steps) and one iteration: {prep_wall:.0f}s", flush=True)
    cases = [("quiet", "auto"), ("quiet", str(cores)), ("busy", "auto"), ("busy", str(cores))]
    results = []
    for load, threads in cases:
        run_id = f"{load}-{threads}"
        seed_v0(v0, args.out, run_id)
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) \
            if load == "busy" else None
        try:
            time.sleep(2 if hog else 0)  # the neighbour is running before the run starts
            _, wall = run(ROOT, args.config, args.out,
                                [*common, f"iterations={args.iterations}",
                                 f"threads.torch={threads}", f"run_id={run_id}"])
        finally:
            if hog:
                hog.kill()
                hog.wait()
        it, parts = median_iteration(f"{args.out}/{run_id}")  # the last run_id= given wins
        results.append((load, threads, it, wall, parts))
        print(f"  {load:5} threads.torch={threads:4}: median iteration {it:6.2f}s "
              f"(wall {wall:.0f}s)", flush=True)
    base = results[0][2]
    print(f"\nthe default config, {args.iterations} iterations from one v0; median seconds of "
          f"the iterations without evaluation")
    print(f"{'neighbour':<11}{'threads.torch':>14}{'torch thr':>10}{'sample':>9}{'rollouts':>9}"
          f"{'update':>9}{'iteration':>11}{'x quiet auto':>14}")
    for load, threads, it, wall, p in results:
        print(f"{'busy proc' if load == 'busy' else 'none':<11}{threads:>14}{p['threads']:>10.0f}"
              f"{p.get('sample', 0):>9.2f}{p.get('run_rollouts', 0):>9.2f}"
              f"{p.get('update_policy', 0):>9.2f}{it:>11.2f}{it / base:>14.2f}")
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
