"""The real model RL-trained (`make bench-real`): `rollforge run --config configs/smollm2.yaml`
for each seed, then the flow's own held-out evaluation of v0 (the instruct model as shipped,
adapters at zero) and of the last version, greedy and sampled pass@1, per family and on
HumanEval's 164 (a source with no training split: never trained on). The last version's figures
are the run's own (recorded with its last iteration); v0's evaluation is the one the run made,
answered by Prefect's cache, so this adds no sampling as long as the package's code is not
edited while it runs (the cache key holds the code's hash). Prints the table; writes the reward
curve to <out>/reward_curve.png.

    .venv/bin/python bench/bench_real_rl.py [--seeds 0,1] [--out runs/bench-real]
        [--set key=value ...]   (e.g. --set iterations=2 for a short version)
Several hours on 2 CPU cores for the two seeds as configured: each held-out evaluation (v0 and
the last version) samples 189 prompts three times at up to 192 tokens (the greedy pass ran at
0.15 sequences/s at load 4), about an hour per seed quiet for the evaluations alone.
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


def run_seed(seed: int, out: Path, sets: list[str]) -> Path:
    run_id = f"smollm2-s{seed}"
    cmd = [sys.executable, "-m", "flows.cli", "run", "--config", str(CONFIG), "--set",
           f"seed={seed}", "--set", f"run_id={run_id}", "--set", f"out_dir={out}"]
    for s in sets:
        cmd += ["--set", s]
    out.mkdir(parents=True, exist_ok=True)
    log = out / f"{run_id}.log"
    t0 = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.call(cmd, cwd=ROOT, env=standalone_env(), stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        raise SystemExit(f"rollforge run for seed {seed} exited with {rc}; see {log}")
    print(f"seed {seed}: {out / run_id} in {time.perf_counter() - t0:.0f} s (log {log})", flush=True)
    return out / run_id


def evaluate(run_dir: Path, sets: list[str], version: int) -> dict:
    from flows.iteration import pass_rates_on  # noqa: PLC0415
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
    ap.add_argument("--set", dest="sets", action="append", default=[],
                    help="key=value override of configs/smollm2.yaml (repeatable)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    runs, results = {}, {}
    for seed in [int(s) for s in args.seeds.split(",")]:
        run_dir = run_seed(seed, out, args.sets)
        final = read_metrics(str(run_dir)).iloc[-1].dropna().to_dict()  # the last evaluation
        sets = [*args.sets, f"seed={seed}"]
        runs[seed], results[seed] = run_dir, (evaluate(run_dir, sets, 0), final)
    print(f"\nconfigs/smollm2.yaml {' '.join('--set ' + s for s in args.sets)}".rstrip())
    print(table(results))
    reward_curve(runs, out / "reward_curve.png")
    print(f"reward curve: {out / 'reward_curve.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
