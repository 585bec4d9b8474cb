"""The real model RL-trained (`make bench-real`): `rollforge run --config configs/smollm2.yaml`
for each seed, then the flow's own held-out evaluation of v0 (the instruct model as shipped,
adapters at zero) and of the last version, greedy and sampled pass@1, per family and on
HumanEval's 164 (a source with no training split: never trained on). The last version's figures
are the run's own (recorded with its last iteration); v0's evaluation is the one the run made,
answered by Prefect's cache, so this adds no sampling as long as the package's code is not
edited while it runs (the cache key holds the code's hash). Prints the table; writes the reward
curve to <out>/reward_curve.png.

    .venv/bin/python bench/bench_real_rl.py [--seeds 0,1] [--jobs N] [--out runs/bench-real]
        [--set key=value ...]   (e.g. --set iterations=2 for a short version)
On 2 CPU cores the two seeds as configured, at once, took 2 h 3 min: each held-out evaluation
(v0 and the last version; 197 prompts, three answers each at up to 192 tokens) about 41 min, each
of the six iterations about 6 min (docs/benchmarks.md has the table).
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DS_ACCELERATOR", "cpu")
from flows.env import apply_defaults, standalone_env  # noqa: E402

apply_defaults()
from flows.config import load_config  # noqa: E402
from storage.registry import read_metrics  # noqa: E402

CONFIG = ROOT / "configs" / "smollm2.yaml"


def run_seeds(seeds: list[int], out: Path, sets: list[str], jobs: int) -> dict[int, Path]:
    """`rollforge run` for each seed, `jobs` at a time. Each run gets its share of the cores as
    its torch threads (OMP_NUM_THREADS, unless the caller set it): two runs of two threads on
    two cores stall each other many times over (docs/benchmarks.md, thread oversubscription)."""
    out.mkdir(parents=True, exist_ok=True)
    env = standalone_env()
    if jobs > 1:
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))
    waiting, running, done = list(seeds), {}, {}
    while waiting or running:
        while waiting and len(running) < jobs:
            seed = waiting.pop(0)
            run_id = f"smollm2-s{seed}"
            cmd = [sys.executable, "-m", "flows.cli", "run", "--config", str(CONFIG), "--set",
                   f"seed={seed}", "--set", f"run_id={run_id}", "--set", f"out_dir={out}"]
            for s in sets:
                cmd += ["--set", s]
            log = out / f"{run_id}.log"
            with open(log, "w") as f:
                proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
            running[seed] = (proc, log, time.perf_counter())
        time.sleep(1)
        for seed, (proc, log, t0) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[seed]
            if proc.returncode != 0:
                for other, _log, _t0 in running.values():
                    other.terminate()
                raise SystemExit(f"rollforge run for seed {seed} exited with {proc.returncode}; "
                                 f"see {log}")
            done[seed] = out / f"smollm2-s{seed}"
            print(f"seed {seed}: {done[seed]} in {time.perf_counter() - t0:.0f} s (log {log}, "
                  f"OMP_NUM_THREADS={env.get('OMP_NUM_THREADS', 'unset')})", flush=True)
    return {seed: done[seed] for seed in seeds}


def evaluate(run_dir: Path, sets: list[str], version: int) -> dict:
    from flows.rounds import pass_rates_on  # noqa: PLC0415
    from flows.stages import heldout_tasks  # noqa: PLC0415

    cfg = load_config(CONFIG, [*sets, f"run_id={run_dir.name}", f"out_dir={run_dir.parent}"])
    return pass_rates_on(cfg, version, heldout_tasks(cfg), "heldout")


def _fmt(x) -> str:
    return "   -" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def table(results: dict[int, tuple[dict, dict]]) -> str:
    """Rows: overall, each family, each source; columns: greedy and sampled before/after."""
    first = next(iter(results.values()))[0]
    keys = ["heldout"] + sorted({k.rsplit("/", 1)[0] for k in first
                                 if k.endswith("/pass_greedy") and k.count("/") >= 2})
    lines = [f"{'held-out':34s} {'tasks':>5s}  {'seed':>4s}  {'greedy before':>13s} "
             f"{'after':>6s}  {'sampled before':>14s} {'after':>6s}"]
    for k in keys:
        for seed, (before, after) in results.items():
            n = before.get(f"{k}/tasks")
            name = k.replace("heldout/", "").replace("heldout", "all") or "all"
            lines.append(f"{name:34s} {n if n is not None else '':>5}  {seed:>4d}  "
                         f"{_fmt(before.get(f'{k}/pass_greedy')):>13s} "
                         f"{_fmt(after.get(f'{k}/pass_greedy')):>6s}  "
                         f"{_fmt(before.get(f'{k}/pass_sampled')):>14s} "
                         f"{_fmt(after.get(f'{k}/pass_sampled')):>6s}")
    return "\n".join(lines)


def reward_curve(runs: dict[int, Path], path: Path) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for seed, run_dir in runs.items():
        m = read_metrics(str(run_dir))
        ax.plot(m["iteration"], m["rollout/mean_reward"], marker="o", label=f"seed {seed}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean rollout reward")
    ax.set_title("SmolLM2-135M-Instruct, LoRA GRPO (configs/smollm2.yaml)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--out", default=str(ROOT / "runs" / "bench-real"))
    ap.add_argument("--jobs", type=int, default=None,
                    help="seeds run at once, each on its share of the cores as its torch "
                         "threads (default: as many as there are seeds, at most the cores)")
    ap.add_argument("--set", dest="sets", action="append", default=[],
                    help="key=value override of configs/smollm2.yaml (repeatable)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds takes integers separated by commas, not {args.seeds!r}")
    jobs = args.jobs if args.jobs is not None else min(len(seeds), os.cpu_count() or 1)
    if jobs < 1:
        ap.error(f"--jobs must be at least 1, not {jobs}")
    runs, results = run_seeds(seeds, out, args.sets, jobs), {}
    for seed, run_dir in runs.items():
        final = read_metrics(str(run_dir)).iloc[-1].dropna().to_dict()  # the last evaluation
        sets = [*args.sets, f"seed={seed}"]
        results[seed] = (evaluate(run_dir, sets, 0), final)
    print(f"\nconfigs/smollm2.yaml {' '.join('--set ' + s for s in args.sets)}".rstrip())
    print(table(results))
    reward_curve(runs, out / "reward_curve.png")
    print(f"reward curve: {out / 'reward_curve.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
