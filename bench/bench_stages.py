"""Per-stage timing of the loop: runs a config (default: configs/default.yaml) through
`rollforge run`, or reads a finished run with --run-dir, and prints seconds per stage per
iteration beside each stage's share of the iteration, plus the wall time of the whole run.
With --baseline REV, the same config runs first on the code of git revision REV (a temporary
worktree) and then on this checkout, and the median seconds per stage of both are printed side
by side with their ratio, including the loop's own overhead per iteration (the iteration's
time less sampling, rollouts, the update and evaluation).

    .venv/bin/python bench/bench_stages.py                       # the default run (~10 min)
    .venv/bin/python bench/bench_stages.py --config configs/tiny.yaml --out /tmp/bench-runs
    .venv/bin/python bench/bench_stages.py --run-dir runs/default  # an existing run
    .venv/bin/python bench/bench_stages.py --config configs/tiny.yaml --set iterations=8 \\
        --baseline 38f8411                                       # before/after a change
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STAGES = ["ledger", "generate_tasks", "sample", "run_rollouts", "score", "write_trajectories",
          "update_policy", "evaluate"]
WORK = ("sample", "run_rollouts", "update_policy", "evaluate")  # the rest is the loop's overhead


def run(code: Path, config: str | None, out: str, sets: list[str]) -> tuple[str, float]:
    """One `rollforge run` of the code at `code`; returns (run dir, wall seconds)."""
    run_id = f"bench-{int(time.time() * 1000)}"
    cmd = [sys.executable, "-m", "flows.cli", "run", "--set", f"out_dir={out}",
           "--set", f"run_id={run_id}"] + sum((["--set", s] for s in sets), [])
    if config:
        cmd += ["--config", str(Path(config).resolve())]
    env = {**os.environ, "PYTHONPATH": str(code)}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=code, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode:
        print(proc.stdout[-2000:], proc.stderr[-4000:], file=sys.stderr)
        raise SystemExit(proc.returncode)
    return f"{out}/{run_id}", wall


def per_iteration(m) -> dict[str, list[float]]:
    out = {s: [float(v) for v in m[f"time/{s}_s"].fillna(0)] for s in STAGES
           if f"time/{s}_s" in m.columns}
    out["iteration"] = [float(v) for v in m["time/iteration_s"]]
    out["overhead"] = [it - sum(out.get(s, [0.0] * len(m))[i] for s in WORK)
                       for i, it in enumerate(out["iteration"])]
    return out


def report(run_dir: str, wall: float | None) -> None:
    from storage.registry import read_metrics

    m = read_metrics(run_dir)
    cols = [s for s in STAGES if f"time/{s}_s" in m.columns]
    print(f"run: {run_dir}")
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


def compare(base_dir: str, new_dir: str, rev: str) -> None:
    import numpy as np

    from storage.registry import read_metrics

    a, b = per_iteration(read_metrics(base_dir)), per_iteration(read_metrics(new_dir))
    print(f"\nmedian seconds per iteration, {rev} (baseline) against this checkout:")
    print(f"{'stage':<20}{'baseline':>10}{'now':>10}{'now/base':>10}")
    for s in [*STAGES, "overhead", "iteration"]:
        if s in a or s in b:
            x = float(np.median(a.get(s, [np.nan])))
            y = float(np.median(b.get(s, [np.nan])))
            ratio = y / x if x > 0 else float("nan")
            print(f"{s:<20}{x:>10.3f}{y:>10.3f}{ratio:>10.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="config override for the run(s)")
    ap.add_argument("--out", default="/tmp/rollforge-bench-runs")
    ap.add_argument("--run-dir", default=None, help="report an existing run instead of running one")
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="run the same config on git revision REV first, then compare")
    args = ap.parse_args()
    if args.run_dir is not None:
        report(args.run_dir, None)
        return 0
    if args.baseline is None:
        report(*run(ROOT, args.config, args.out, args.sets))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="bench-base-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tmp / "code"),
                    args.baseline], check=True, capture_output=True)
    try:
        base_dir, base_wall = run(tmp / "code", args.config, args.out, args.sets)
        new_dir, new_wall = run(ROOT, args.config, args.out, args.sets)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                        str(tmp / "code")], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    report(base_dir, base_wall)
    report(new_dir, new_wall)
    compare(base_dir, new_dir, args.baseline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
