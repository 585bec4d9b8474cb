"""One round of rejection sampling, measured: a model's held-out pass@1 before and after SFT on
its own filtered successes (issue 40, item 3).

    .venv/bin/python bench/bench_rejection_round.py [--seeds 0 1] [--out /tmp/rollforge-bench-rs]
        [--config configs/default.yaml] [--base-steps 400] [--base-until-pass P]
        [--round-steps 150] [--round-lr 1e-3] [--tasks-per-iteration 64] [--n 4]
        [--per-task-cap 4] [--no-control] [--set KEY=VALUE ...]

Per seed, every step a `rollforge` command in a child process (no training loop of its own):
  1. `rollforge run` of one RL iteration: the warm start (`--base-steps` of SFT on the sources'
     references) is checkpoint v0, the base; the iteration's rollouts are v0's own samples on
     `--tasks-per-iteration` TRAINING tasks, `group_size` each, graded in the sandbox and written
     to the run's trajectories (its update to v1 is not used).
  2. `rollforge eval --model BASE:0`: greedy pass@1 (Wilson 95%) and sampled pass@1 (`--n` a
     task, bootstrap 95%) on the run's held-out tasks, at the seed.
  3. `rollforge data export --store BASE --dedup --per-task-cap N`: the verified successes (held-out
     tasks never in train).
  4. `rollforge run --set policy.model_path=BASE/checkpoints/v0000/model --set sft.dataset=DATA`:
     `--round-steps` of SFT from v0 on that dataset (its v0 is the "after" checkpoint).
  5. `rollforge eval` of the new v0 on the same held-out tasks with the same seed.
  6. The control (unless --no-control): step 4 without `sft.dataset`, so the same SFT steps from
     v0 train on the sources' own training references, then step 5 on it.
It prints before/after side by side per seed, with the paired count of held-out tasks that the
round fixed and broke under greedy decoding (the same tasks both times, so the flips say more
than two overlapping intervals), and writes results.json under --out. A finished step is not
run again (its output is there), so a killed bench resumes.
"""
from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flows.eval_stats import summarize  # noqa: E402

CLI = [str(ROOT / ".venv" / "bin" / "rollforge")]


def sh(cmd: list[str], log: Path) -> float:
    """Run one CLI command, its output to `log`; the seconds it took. Exit != 0 stops the bench
    with the log's tail (exit 1 of eval, unscored samples, is reported, not fatal)."""
    print("$ " + " ".join(cmd), flush=True)
    t = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    if rc not in (0, 1) or (rc == 1 and cmd[1] != "eval"):
        tail = log.read_text()[-3000:]
        sys.exit(f"exit {rc}: {' '.join(cmd)}\n{tail}")
    return time.perf_counter() - t


def eval_rows(store: Path) -> list[dict]:
    files = sorted(glob.glob(str(store / "_evaluations" / "*" / "rows" / "*.parquet")))
    if not files:
        sys.exit(f"no evaluation rows under {store}")
    # as Python lists, not numpy arrays: flows/eval_stats.py tests `hack_flags` for truth
    return [r for f in files for r in pq.read_table(f).to_pylist()]


def summary(rows: list[dict], seed: int) -> dict:
    row = summarize(rows, ks=(1,), seed=seed)[0]
    greedy = {r["task_id"]: bool(r["passed"]) for r in rows
              if r["mode"] == "greedy" and r["passed"] is not None}
    p1 = row.pass_k.get(1, (float("nan"),) * 3)
    return {"tasks": row.tasks, "greedy": row.greedy, "greedy_ci": list(row.greedy_ci),
            "greedy_solved": sum(greedy.values()), "sampled": p1[0], "sampled_ci": list(p1[1:]),
            "samples": row.samples, "unscored": row.unscored, "hack_flagged": row.hack_flagged,
            "greedy_by_task": greedy}


def round_run(args, common: list[str], run_id: str, base: Path, sets: list[str],
              log: Path) -> float | None:
    """`--round-steps` of SFT from the base's v0 as run `run_id` (skipped when its v0 is
    there): on the exported successes (the round) or, without `sft.dataset`, on the sources'
    own training references (the control)."""
    if (base.parent / run_id / "checkpoints" / "v0000").exists():
        return None
    return sh(CLI + ["run", *common, "--set", f"run_id={run_id}",
                     "--set", f"policy.model_path={base / 'checkpoints' / 'v0000' / 'model'}",
                     *sets, "--set", f"sft.steps={args.round_steps}",
                     "--set", "sft.until_pass=null", "--set", f"sft.lr={args.round_lr}",
                     "--set", f"sft.warmup_steps={min(20, args.round_steps)}",
                     "--set", "tasks.tasks_per_iteration=4"], log)


def paired(before: dict, after: dict) -> dict:
    """Greedy flips over the held-out tasks both evaluations scored."""
    b, a = before["greedy_by_task"], after["greedy_by_task"]
    both = sorted(set(b) & set(a))
    return {"paired_tasks": len(both), "fixed": sum(a[t] and not b[t] for t in both),
            "broken": sum(b[t] and not a[t] for t in both)}


def one_seed(args: argparse.Namespace, seed: int) -> dict:
    out = Path(args.out) / f"seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    runs = out / "runs"
    common = ["--config", args.config, "--set", f"out_dir={runs}", "--set", f"seed={seed}",
              "--set", "iterations=1", "--set", "eval_every=1000"]
    for kv in args.set:
        common += ["--set", kv]
    secs = {}
    base, data = runs / "base", out / "data"
    if not (base / "checkpoints" / "v0001").exists():
        secs["base_run"] = sh(CLI + ["run", *common, "--set", "run_id=base",
                                     "--set", f"sft.steps={args.base_steps}",
                                     "--set", f"sft.until_pass={args.base_until_pass or 'null'}",
                                     "--set", f"tasks.tasks_per_iteration={args.tasks_per_iteration}"],
                              out / "base_run.log")
    arms = ["before", "after"] + (["control"] if args.control else [])
    evals = {}
    for name in arms:
        if name == "after" and not (data / "manifest.json").exists():
            secs["export"] = sh(CLI + ["data", "export", "--store", str(base), "--out", str(data),
                                       "--dedup", "--per-task-cap", str(args.per_task_cap),
                                       "--overwrite"], out / "export.log")
        if name != "before":
            sets = ["--set", f"sft.dataset={data}"] if name == "after" else []
            took = round_run(args, common, name, base, sets, out / f"{name}_run.log")
            if took is not None:
                secs[f"{name}_run"] = took
        store = out / f"eval-{name}"
        model = f"{base}:0" if name == "before" else f"{runs / name}:0"
        if not list(store.glob("_evaluations/*/rows/*.parquet")):
            secs[f"eval_{name}"] = sh(CLI + ["eval", "--model", model, "--n", str(args.n),
                                             "--k", "1", "--seed", str(seed), "--chunk-size",
                                             "256", "--store", str(store)], out / f"eval_{name}.log")
        evals[name] = summary(eval_rows(store), seed)
    manifest = json.loads((data / "manifest.json").read_text())
    return {"seed": seed, **evals, **paired(evals["before"], evals["after"]),
            "control_flips": paired(evals["before"], evals["control"]) if args.control else None,
            "dataset": {k: manifest.get(k) for k in ("kept", "dropped")}, "seconds": secs}


def fmt(est: float, ci: list[float]) -> str:
    return f"{est:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def report(results: list[dict], n: int) -> str:
    lines = ["| seed | held-out tasks | SFT examples (train) | greedy pass@1 before | after | "
             f"fixed / broken (greedy, paired) | sampled pass@1 (n={n}) before | after |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        b, a = r["before"], r["after"]
        kept = (r["dataset"].get("kept") or {}).get("train", "?")
        lines.append(f"| {r['seed']} | {b['tasks']} | {kept} | {fmt(b['greedy'], b['greedy_ci'])} "
                     f"| {fmt(a['greedy'], a['greedy_ci'])} | {r['fixed']} / {r['broken']} "
                     f"| {fmt(b['sampled'], b['sampled_ci'])} | {fmt(a['sampled'], a['sampled_ci'])} |")
    controls = [r for r in results if r.get("control")]
    if controls:
        lines += ["", "Control (the same SFT steps from the same base on the sources' own "
                  "training references):", "",
                  "| seed | greedy pass@1 | fixed / broken (greedy, paired with before) | "
                  f"sampled pass@1 (n={n}) |", "|---|---|---|---|"]
        for r in controls:
            c, f = r["control"], r["control_flips"]
            lines.append(f"| {r['seed']} | {fmt(c['greedy'], c['greedy_ci'])} | {f['fixed']} / "
                         f"{f['broken']} | {fmt(c['sampled'], c['sampled_ci'])} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--out", default="/tmp/rollforge-bench-rs")
    ap.add_argument("--config", default="configs/default.yaml")
    ap.add_argument("--base-steps", type=int, default=400,
                    help="SFT steps of the base's warm start (short: a base with room to improve)")
    ap.add_argument("--base-until-pass", type=float, default=None, metavar="P",
                    help="warm start the base until its probe passes P (sft.until_pass; "
                         "--base-steps is then its most), as the default run does")
    ap.add_argument("--round-steps", type=int, default=150, help="SFT steps of the round")
    ap.add_argument("--round-lr", type=float, default=1e-3, help="peak lr of the round's SFT")
    ap.add_argument("--tasks-per-iteration", type=int, default=64,
                    help="training tasks the base samples (group_size samples each)")
    ap.add_argument("--n", type=int, default=4, help="sampled completions a held-out task")
    ap.add_argument("--per-task-cap", type=int, default=4)
    ap.add_argument("--control", action=argparse.BooleanOptionalAction, default=True,
                    help="also the control arm: --round-steps of SFT from the same base on the "
                         "sources' own training references (a gain of the round over it is the "
                         "filter's, not more training's)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="config override for every run (e.g. tasks.families=[add,mul])")
    args = ap.parse_args()
    results = [one_seed(args, s) for s in args.seeds]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "results.json").write_text(json.dumps(
        {"args": vars(args), "results": results}, indent=1, default=str))
    print(report(results, args.n))
    for r in results:
        print(f"seed {r['seed']}: dataset kept {r['dataset']['kept']}, seconds "
              + ", ".join(f"{k} {v:.0f}" for k, v in r["seconds"].items()))


if __name__ == "__main__":
    main()
