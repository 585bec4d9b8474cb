"""rollforge against TRL's GRPOTrainer on the same work (issue 21): median step / iteration time
and its parts side by side, the ratio, and both sides' mean reward per step.

The workload (bench/trl_workload.py): a tiny Llama (1.1M parameters, hidden 128, 4 layers) over
the byte tokenizer, 64 `affine` prompts ("Return x times a plus b.") as a rollforge task file, a
brief supervised warm start on affine tasks of other seeds; both sides start from that warm
checkpoint. Each step / iteration: 8 prompts x G=8 = 64 completions of up to 32 tokens, reward =
the fraction of the task's hidden tests passed, run two at a time; GRPO, lr 1e-4 constant, one
pass, no KL, no replay, every group trained on; 10 steps a run.

- TRL: `bench/trl_side.py` in a venv of its own, `.bench-venvs/trl` (made here on first use:
  `python -m venv` then `pip install trl==TRL torch==<.venv's> transformers==<.venv's> ...`; TRL is
  not a dependency of rollforge).
- rollforge: `rollforge run --config bench/trl_workload.yaml --tasks WORK/tasks.jsonl
  --set policy.model_path=WORK/warm`; its per-stage seconds are the metrics it stores under the
  run folder (`time/*_s`, `train/seconds`), its wall per iteration the stage journal's times.

The sides run alternately (TRL, rollforge, TRL, rollforge, ... `--rounds`), each under
`nice -n 5` with OMP_NUM_THREADS=1; the load average is printed at the start and the end.

    .venv/bin/python bench/bench_trl.py                    # build, 2 rounds, report (~12 min)
    .venv/bin/python bench/bench_trl.py --rounds 1 --profile
    .venv/bin/python bench/bench_trl.py --report           # print the last results again

`--profile` then runs bench/trl_profile.py: one more rollforge run in-process under cProfile
(iterations 1.. of `--profile-iterations`), and prints where the time goes that is not sampling,
rollouts or the update's math.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRL_VERSION = "1.16.0"
VENV = ROOT / ".bench-venvs" / "trl"
CONFIG = ROOT / "bench" / "trl_workload.yaml"
NICE = ["nice", "-n", "5"]


def side_env() -> dict[str, str]:
    # DeepSpeed's CPU accelerator JIT-builds its shm comm op into TORCH_EXTENSIONS_DIR (default
    # ~/.cache/torch_extensions, shared by every checkout on the machine), and rebuilds it
    # (minutes) whenever the venv's path in its build file differs from the last builder's:
    # a folder of this checkout's own keeps the build and stops it from evicting others'.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT),
           "TORCH_EXTENSIONS_DIR": str(ROOT / ".torch_extensions")}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def ensure_venv() -> Path:
    """TRL's venv: the same torch and transformers as rollforge's, TRL pinned."""
    py = VENV / "bin" / "python"
    probe = [str(py), "-c", "import trl, torch, transformers; print(trl.__version__, "
             "torch.__version__, transformers.__version__)"]
    import torch
    import transformers

    want = f"{TRL_VERSION} {torch.__version__} {transformers.__version__}"
    if py.is_file():
        got = subprocess.run(probe, capture_output=True, text=True).stdout.strip()
        if got == want:
            return py
    print(f"making {VENV} (trl {TRL_VERSION}, torch {torch.__version__}, transformers "
          f"{transformers.__version__})", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    # torch pinned in the same install: left to pip, trl's dependency would pull a CUDA build.
    subprocess.run([str(py), "-m", "pip", "install", "-q", f"trl=={TRL_VERSION}",
                    f"torch=={torch.__version__}", f"transformers=={transformers.__version__}",
                    "accelerate", "datasets"], check=True)
    return py


# -- the two sides -----------------------------------------------------------------------------
def run_trl(py: Path, work: Path, tag: str, steps: int) -> dict:
    out = work / "results" / f"trl-{tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    p = subprocess.run([*NICE, str(py), str(ROOT / "bench" / "trl_side.py"), "--model",
                        str(work / "warm"), "--tasks", str(work / "tasks.jsonl"), "--out", str(out),
                        "--steps", str(steps)], env=side_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode:
        sys.exit(f"TRL side failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
    res = json.loads(out.read_text())
    res["wall_s"] = wall
    for s in res["steps"]:  # TRL runs the forward and backward whatever the advantages
        s["trained"] = bool(s.get("informative_groups", 1))
    return res


def run_rollforge(work: Path, tag: str, steps: int) -> dict:
    run_id = f"rf-{tag}-{int(time.time())}"
    out_dir = work / "runs"
    cmd = [*NICE, sys.executable, "-m", "flows.cli", "run", "--config", str(CONFIG), "--tasks",
           str(work / "tasks.jsonl"), "--set", f"policy.model_path={work / 'warm'}",
           "--set", f"out_dir={out_dir}", "--set", f"run_id={run_id}",
           "--set", f"iterations={steps}"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, env=side_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode:
        sys.exit(f"rollforge side failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
    return {"run_dir": str(out_dir / run_id), "wall_s": wall, **rollforge_figures(out_dir / run_id)}


RF_PARTS = ["ledger", "generate_tasks", "sample", "run_rollouts", "score", "write_trajectories",
            "update_policy", "evaluate"]


PREFECT_VIEW = [("generate_tasks", "generate_tasks"), ("sample", "sample_completions"),
                ("run_rollouts", "run_rollouts"), ("score", "score"),
                ("write_trajectories", "write_trajectories"), ("update_policy", "update_policy")]


def rollforge_figures(run_dir: Path) -> dict:
    """Per iteration: the stage seconds the run stored, the update's own training seconds, and
    the wall time from the previous iteration's end (the journal's checkpoint ends), which also
    holds what runs between iterations (the checkpoint record, the UI's artifacts)."""
    from flows.stages import read_journal
    from storage.registry import read_metrics

    m = read_metrics(str(run_dir)).sort_values("iteration")
    journal = read_journal(run_dir)
    ends = {r["iteration"]: r["t"] for r in journal
            if r["stage"] == "checkpoint" and r["event"] == "end"}
    bodies: dict[int, dict[str, float]] = {}  # the stage functions' own seconds (the journal's)
    for r in journal:
        if r["event"] == "end" and "iteration" in r and isinstance(r["iteration"], int):
            b = bodies.setdefault(r["iteration"], {})
            b[r["stage"]] = b.get(r["stage"], 0.0) + r["seconds"]
    iters = []
    for _, row in m.iterrows():
        it = int(row["iteration"])
        parts = {p: float(row.get(f"time/{p}_s", 0.0) or 0.0) for p in RF_PARTS}
        parts = {p: (0.0 if v != v else v) for p, v in parts.items()}  # NaN: not run
        d = {f"{p}_s": v for p, v in parts.items()}
        d["iteration_s"] = float(row["time/iteration_s"]) - parts["evaluate"]
        d["train_s"] = float(row.get("train/seconds", 0.0))
        d["sequences"] = int(row.get("train/sequences", 0))  # those with a non-zero advantage
        d["trained"] = d["sequences"] > 0  # 0: every advantage was 0, no forward or backward
        d["update_rest_s"] = parts["update_policy"] - d["train_s"]
        d["mean_reward"] = float(row["rollout/mean_reward"])
        d["wall_s"] = ends[it] - ends[it - 1] if it - 1 in ends and it in ends else None
        d["bodies"] = bodies.get(it, {})
        iters.append(d)
    return {"iterations": iters}


# -- the report ------------------------------------------------------------------------------
def med(xs) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def report(res: dict) -> str:
    trl = [s for r in res["trl"] for s in r["steps"]]
    rf = [s for r in res["rollforge"] for s in r["iterations"]]
    trl_wall = [b["t_end"] - a["t_end"] for r in res["trl"] for a, b in zip(r["steps"], r["steps"][1:])]
    T = lambda k: med(s[k] for s in trl)  # noqa: E731
    R = lambda k: med(s[k] for s in rf)  # noqa: E731
    rows = [
        ("step / iteration (median)", T("step_s"), R("iteration_s")),
        ("  wall from the previous one's end", med(trl_wall), R("wall_s")),
        ("  sampling (TRL: transformers.generate)", T("generate_s"), R("sample_s")),
        ("  reward (rollforge: run_rollouts + score)", T("reward_s"),
         med(s["run_rollouts_s"] + s["score_s"] for s in rf)),
        ("    rollforge run_rollouts", None, R("run_rollouts_s")),
        ("    rollforge score", None, R("score_s")),
        ("  forward + backward (rollforge: train/seconds)", med(s["forward_s"] + s["backward_s"]
                                                             for s in trl), R("train_s")),
        ("    the same, steps with an informative group only", med(
            s["forward_s"] + s["backward_s"] for s in trl if s["trained"]),
         med(s["train_s"] for s in rf if s["trained"])),
        ("    sequences through them (median)", 64.0, R("sequences")),
        ("    seconds per 1000 sequences", 1000 * med((s["forward_s"] + s["backward_s"]) / 64
                                                     for s in trl),
         1000 * med(s["train_s"] / s["sequences"] for s in rf if s["trained"])),
        ("    TRL forward (compute_loss)", T("forward_s"), None),
        ("    TRL backward", T("backward_s"), None),
        ("  rollforge update_policy less training (load, engine, save)", None, R("update_rest_s")),
        ("  rollforge write_trajectories", None, R("write_trajectories_s")),
        ("  rollforge generate_tasks + ledger", None,
         med(s["generate_tasks_s"] + s["ledger_s"] for s in rf)),
        ("  the rest (TRL: tokenise, advantages, optimizer step, logging)", T("other_s"),
         med(s["iteration_s"] - s["sample_s"] - s["run_rollouts_s"] - s["score_s"]
             - s["update_policy_s"] - s["write_trajectories_s"] - s["generate_tasks_s"]
             - s["ledger_s"] for s in rf)),
    ]
    f = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    width = max(len(r[0]) for r in rows) + 2
    lines = [f"{'seconds, median over ' + str(len(trl)) + ' TRL steps / ' + str(len(rf)) + ' rollforge iterations':<{width}}"
             f"{'TRL':>8}{'rollforge':>11}{'ratio':>8}"]
    for name, t, r in rows:
        ratio = f"{r / t:.2f}x" if t and r is not None and t == t and r == r else ""
        lines.append(f"{name:<{width}}{f(t):>8}{f(r):>11}{ratio:>8}")
    lines.append("")
    lines.append("rollforge stages: seconds as the flow sees them | the stage function's own (its "
                 "journal line) | the difference, Prefect's task engine around it (median)")
    for metric, stage in PREFECT_VIEW:
        seen = R(f"{metric}_s")
        body = med(s["bodies"].get(stage, 0.0) for s in rf)
        lines.append(f"  {stage:<20}{seen:8.3f}{body:8.3f}{seen - body:8.3f}")
    lines.append("")
    lines.append("mean reward per step / iteration, each run (the two sides' rows in run order):")
    for r in res["trl"]:
        lines.append("  TRL       " + " ".join(f"{s['mean_reward']:.3f}" for s in r["steps"]))
    for r in res["rollforge"]:
        lines.append("  rollforge " + " ".join(f"{s['mean_reward']:.3f}" for s in r["iterations"]))
    lines.append(f"  steps without any informative group: TRL {sum(not s['trained'] for s in trl)}"
                 f"/{len(trl)}, rollforge {sum(not s['trained'] for s in rf)}/{len(rf)} (rollforge "
                 "then skips the forward and backward: every advantage is 0; TRL runs them)")
    lines.append(f"  mean: TRL {statistics.mean(s['mean_reward'] for s in trl):.3f}, rollforge "
                 f"{statistics.mean(s['mean_reward'] for s in rf):.3f}")
    lines.append("")
    lines.append("whole runs (s): " + ", ".join(
        f"{name} {wall:.1f}" for name, wall in res["order"]))
    lines.append(f"load average (1, 5, 15 min): start {res['load_start']}, end {res['load_end']}")
    v = res["trl"][0]
    lines.append(f"TRL {v['trl']}, torch {v['torch']} ({v['torch_threads']} thread), "
                 f"transformers {v['transformers']}; warm start {res['workload']['warm_start']}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench-trl"),
                    help="where the workload, the runs and results.json go")
    ap.add_argument("--rounds", type=int, default=2, help="TRL-then-rollforge pairs")
    ap.add_argument("--steps", type=int, default=10, help="steps (iterations) a run")
    ap.add_argument("--warm-steps", type=int, default=150, help="warm start steps (first build)")
    ap.add_argument("--report", action="store_true", help="print the last results again")
    ap.add_argument("--profile", action="store_true", help="then profile a rollforge run")
    ap.add_argument("--profile-iterations", type=int, default=4)
    args = ap.parse_args()
    work = Path(args.work).resolve()
    results = work / "results.json"
    if args.report:  # rollforge's figures are read again from its run folders
        res = json.loads(results.read_text())
        for r in res["rollforge"]:
            r.update(rollforge_figures(Path(r["run_dir"])))
        print(report(res))
        return 0

    os.environ.update({k: v for k, v in side_env().items() if k.endswith("THREADS")})
    py = ensure_venv()
    from bench import trl_workload

    print(f"building the workload in {work} ...", flush=True)
    wl = trl_workload.build(work, args.warm_steps)
    print(f"workload: {json.dumps(wl['warm_start'])}", flush=True)
    res = {"workload": wl, "trl": [], "rollforge": [], "order": [], "load_start": load()}
    print(f"load average at the start: {res['load_start']}", flush=True)
    for r in range(args.rounds):
        t = run_trl(py, work, f"r{r}", args.steps)
        res["trl"].append(t)
        res["order"].append((f"TRL r{r}", t["wall_s"]))
        print(f"round {r}: TRL {t['wall_s']:.1f} s (load {load()})", flush=True)
        f = run_rollforge(work, f"r{r}", args.steps)
        res["rollforge"].append(f)
        res["order"].append((f"rollforge r{r}", f["wall_s"]))
        print(f"round {r}: rollforge {f['wall_s']:.1f} s (load {load()})", flush=True)
    res["load_end"] = load()
    results.write_text(json.dumps(res, indent=2))
    print()
    print(report(res))
    if args.profile:
        print(flush=True)
        subprocess.run([*NICE, sys.executable, str(ROOT / "bench" / "trl_profile.py"), "--work",
                        str(work), "--iterations", str(args.profile_iterations)],
                       env=side_env(), cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
