"""Seconds from SIGTERM to exit, and processes left, for `rollforge run` on configs/tiny.yaml
signalled at random moments (seeded): a stage drawn from the loop's, in iteration 0 or 1, plus a
random delay after it starts. The signal goes to the run's process group, as `timeout` and
`make run` stopped by it deliver it. --root runs another checkout's code (the "before" figure,
e.g. a `git worktree add /tmp/before <commit>`), with this venv; --exit-s bounds the wait (a
run still alive then is reported as such and killed).

    .venv/bin/python bench/bench_stop.py --moments 3 --seed 0
    .venv/bin/python bench/bench_stop.py --moments 1 --root /tmp/before --exit-s 240
    .venv/bin/python bench/bench_stop.py --moments 8 --stage sample_completions --max-delay 0.5
"""
from __future__ import annotations

import argparse
import random
import signal
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from stop_at_stage import stop_when_stage_starts  # noqa: E402

from flows.env import standalone_env  # noqa: E402

STAGES = ("sample_completions", "run_rollouts", "score", "write_trajectories", "update_policy")


def moments(n: int, seed: int, stages: tuple[str, ...] = STAGES,
            max_delay_s: float = 1.0) -> list[tuple[str, int, float]]:
    rng = random.Random(seed)
    return [(rng.choice(stages), rng.choice((0, 1)), round(rng.uniform(0.0, max_delay_s), 2))
            for _ in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moments", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--exit-s", type=float, default=180.0)
    ap.add_argument("--stage", action="append", choices=STAGES,
                    help="draw the moments from this stage only (repeatable; default: all)")
    ap.add_argument("--max-delay", type=float, default=1.0,
                    help="the longest delay after the stage starts, in seconds")
    args = ap.parse_args()
    rows = []
    for stage, it, delay in moments(args.moments, args.seed, tuple(args.stage or STAGES),
                                     args.max_delay):
        with tempfile.TemporaryDirectory(prefix="bench-stop-") as d:
            out = Path(d) / "runs"
            cmd = [sys.executable, "-m", "flows.cli", "run", "--config",
                   str(args.root / "configs/tiny.yaml"), "--set", f"out_dir={out}",
                   "--set", "iterations=2"]
            env = {**standalone_env(), "PREFECT_HOME": str(Path(d) / "prefect-home")}
            stop = stop_when_stage_starts(cmd, env, Path(d) / "run.log", out / "tiny", stage, it,
                                          300, args.exit_s, signal.SIGTERM, delay, args.root)
        alive = stop.returncode == -999
        secs = f">{args.exit_s:.0f} (still running)" if alive else f"{stop.seconds_to_exit:.1f}"
        print(f"{stage:>20} it {it} +{delay:.2f}s: exit {secs} s, rc {stop.returncode}, "
              f"left {len(stop.left)}" + (f": {stop.left}" if stop.left else ""), flush=True)
        rows.append((stop.seconds_to_exit, len(stop.left), alive))
    done = [s for s, _, a in rows if not a]
    print(f"\n{args.root} (seed {args.seed}, {len(rows)} moments): seconds to exit median "
          f"{statistics.median(done) if done else float('nan'):.1f}, max "
          f"{max(done) if done else float('nan'):.1f}; still running after {args.exit_s:.0f} s: "
          f"{sum(a for *_, a in rows)}; processes left {sum(n for _, n, _ in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
