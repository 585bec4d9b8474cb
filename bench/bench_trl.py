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
`nice -n 5`, each with its own default threads, as a user would run it (TRL: torch's default, one
per core; rollforge: its own thread budget, training/threads.py); `--threads N` pins both.

A comparison is only as good as the machine is quiet: a CPU-bound neighbour slows the two sides
unequally (here TRL's step went from 1.69 s quiet to 4.84 s at load 3). The quiet sitting comes
first, and its ratios are printed only when the machine was quiet around it: the CPU that
*other* processes used, per core, at most `--max-load` (0.5) over a few seconds before it starts
and over the whole sitting (the machine's busy time from /proc/stat less this benchmark's own
process tree's, read as training/threads.py reads it; the 1-minute load average cannot say this, it counts the sides themselves and the
workload build just before). `--allow-load` prints them anyway, marked. Then,
with `--loaded-rounds`, a second sitting under a known load (`--burners` CPU-bound processes
beside the sides) gives the loaded figure as a second table.

    .venv/bin/python bench/bench_trl.py                    # build, 2 quiet rounds, report (~12 min)
    .venv/bin/python bench/bench_trl.py --loaded-rounds 1  # then one round beside 2 burners
    .venv/bin/python bench/bench_trl.py --rounds 1 --profile
    .venv/bin/python bench/bench_trl.py --report           # print the last results again

After each round, bench/train_same.py trains rollforge's update on the very batches TRL's run
trained (its prompt and completion ids and advantages, step by step from the same warm model):
the training time on the same sequences, as rollforge trains them (only those whose loss is not
identically zero) and with every sequence run; the report sets both against TRL's forward +
backward of those steps.

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

from bench.train_same import med, paired_steps, same_sequences  # noqa: E402

TRL_VERSION = "1.16.0"
VENV = ROOT / ".bench-venvs" / "trl"
CONFIG = ROOT / "bench" / "trl_workload.yaml"
NICE = ["nice", "-n", "5"]


def side_env(threads: int | None = None) -> dict[str, str]:
    # DeepSpeed's CPU accelerator JIT-builds its shm comm op into TORCH_EXTENSIONS_DIR (default
    # ~/.cache/torch_extensions, shared by every checkout on the machine), and rebuilds it
    # (minutes) whenever the venv's path in its build file differs from the last builder's:
    # a folder of this checkout's own keeps the build and stops it from evicting others'.
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT),
           "TORCH_EXTENSIONS_DIR": str(ROOT / ".torch_extensions")}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(k, None)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def busy_s() -> tuple[float, float]:
    """(the machine's busy CPU seconds, this benchmark's: this process and every process under
    it, the sides, their Dask workers and sandboxes, the burners) so far: training/threads.py's
    reading, the one a run's thread budget decides by."""
    from training.threads import busy_seconds  # noqa: PLC0415

    got = busy_seconds()
    if got is None:
        sys.exit("bench_trl needs /proc (Linux) to tell whether the machine is quiet")
    return got


class Others:
    """CPU used by processes that are not this benchmark's, per core, from `start()` on. An
    orphan of ours (reparented to init) counts as another's: the error makes the machine look
    busier, never quieter."""

    def start(self) -> "Others":
        self.t, (self.busy, self.own) = time.monotonic(), busy_s()
        return self

    def per_core(self) -> float:
        wall = max(time.monotonic() - self.t, 1e-6)
        busy, own = busy_s()
        return max(busy - self.busy - (own - self.own), 0.0) / wall / (os.cpu_count() or 1)


def others_now(seconds: float = 3.0) -> float:
    """Other processes' CPU per core over the next `seconds`, this benchmark idle."""
    o = Others().start()
    time.sleep(seconds)
    return o.per_core()


class Burners:
    """`n` CPU-bound processes beside the benchmark: a known load for the loaded sitting."""

    def __init__(self, n: int) -> None:
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                      for _ in range(n)]

    def __enter__(self) -> "Burners":
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


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
def run_trl(py: Path, work: Path, tag: str, steps: int, threads: int | None) -> dict:
    out = work / "results" / f"trl-{tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    p = subprocess.run([*NICE, str(py), str(ROOT / "bench" / "trl_side.py"), "--model",
                        str(work / "warm"), "--tasks", str(work / "tasks.jsonl"), "--out", str(out),
                        "--steps", str(steps), "--batches-out", str(batches_file(out))],
                       env=side_env(threads), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode:
        sys.exit(f"TRL side failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
    res = json.loads(out.read_text())
    res["wall_s"] = wall
    for s in res["steps"]:  # TRL runs the forward and backward whatever the advantages
        s["trained"] = bool(s.get("informative_groups", 1))
    return res


def batches_file(trl_out: Path) -> Path:
    return trl_out.with_name(trl_out.stem + "-batches.json")


def run_same(work: Path, tag: str, threads: int | None) -> dict:
    """rollforge's update on the batches TRL's run `tag` trained (bench/train_same.py)."""
    trl_out = work / "results" / f"trl-{tag}.json"
    out = work / "results" / f"same-{tag}.json"
    p = subprocess.run([*NICE, sys.executable, str(ROOT / "bench" / "train_same.py"), "--work",
                        str(work), "--batches", str(batches_file(trl_out)), "--out", str(out)],
                       cwd=ROOT, env=side_env(threads), capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"train_same failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
    return json.loads(out.read_text())


def run_rollforge(work: Path, tag: str, steps: int, threads: int | None) -> dict:
    run_id = f"rf-{tag}-{int(time.time())}"
    out_dir = work / "runs"
    cmd = [*NICE, sys.executable, "-m", "flows.cli", "run", "--config", str(CONFIG), "--tasks",
           str(work / "tasks.jsonl"), "--set", f"policy.model_path={work / 'warm'}",
           "--set", f"out_dir={out_dir}", "--set", f"run_id={run_id}",
           "--set", f"iterations={steps}"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, env=side_env(threads), capture_output=True, text=True)
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
def quiet_enough(res: dict, max_load: float) -> bool:
    """Other processes' CPU per core, just before the sitting and over it, at most `max_load`."""
    return all(res.get(k, float("inf")) <= max_load for k in ("others_before", "others_during"))


def report(res: dict, max_load: float = 0.5, allow_load: bool = False) -> str:
    """The table of one sitting. Its ratios only where the machine was quiet enough (or
    `allow_load`, marked): a ratio from a loaded sitting says more about the neighbour."""
    quiet = quiet_enough(res, max_load)
    show_ratio = quiet or allow_load or res.get("burners", 0) > 0
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
        lines.append(f"{name:<{width}}{f(t):>8}{f(r):>11}{ratio if show_ratio else '':>8}")
    per_core = (f"{res.get('others_before', float('nan')):.2f} just before, "
                f"{res.get('others_during', float('nan')):.2f} during")
    if res.get("burners"):
        lines.append(f"LOADED sitting: {res['burners']} CPU-bound burner process(es) beside the "
                     f"sides; other processes' CPU per core {per_core} (burners are ours)")
    elif not quiet:
        lines.append(f"NOT QUIET: other processes' CPU per core {per_core}, above --max-load "
                     f"{max_load}: "
                     + ("ratios printed because of --allow-load; do not quote them as the quiet "
                        "figure" if allow_load else "no ratio printed (--allow-load to print it)"))
    else:
        lines.append(f"quiet sitting: other processes' CPU per core {per_core} (at most {max_load})")
    if show_ratio:
        lines += issue_targets(trl, rf, res.get("same", []), res["trl"])
    lines += same_sequences(res.get("same", []), res["trl"], show_ratio)
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
    threads = res.get("threads")
    lines.append(f"TRL {v['trl']}, torch {v['torch']} ({v['torch_threads']} thread(s): "
                 + (f"pinned by --threads {threads}" if threads else "its default") + "), "
                 f"transformers {v['transformers']}; rollforge threads: "
                 + (f"pinned by --threads {threads}" if threads else "its own budget")
                 + f"; warm start {res['workload']['warm_start']}")
    return "\n".join(lines)


def issue_targets(trl: list[dict], rf: list[dict], same: list[dict] | None = None,
                  trl_runs: list[dict] | None = None) -> list[str]:
    """Issue 41's targets for this sitting, each with its figure and whether it is met."""
    T = lambda k: med(s[k] for s in trl)  # noqa: E731
    R = lambda k: med(s[k] for s in rf)  # noqa: E731
    books = med(s["iteration_s"] - s["sample_s"] - s["run_rollouts_s"] - s["update_policy_s"]
                for s in rf)  # task draw, ledger, score, write and the rest
    rows = [
        ("iteration / TRL step (goal 0.7x, at worst 1.0x)", R("iteration_s") / T("step_s"),
         0.7, "x"),
        ("sampling / transformers.generate", R("sample_s") / T("generate_s"), 1.0, "x"),
        ("64 executions (run_rollouts) / TRL's reward", R("run_rollouts_s") / T("reward_s"),
         1.0, "x"),
        ("update beyond its training", R("update_rest_s"), 0.1, " s"),
        ("bookkeeping: task draw, ledger, score, write, the rest", books, 0.1, " s"),
    ]
    steps = paired_steps(same or [], trl_runs or [])
    if steps:
        rows += [
            ("training on TRL's sequences, as rollforge trains them", med(
                s["as_trained"] / s["trl_s"] for s in steps), 1.0, "x"),
            ("  the same, every sequence run", med(s["every_sequence"] / s["trl_s"]
                                                   for s in steps), 1.0, "x")]
    out = ["issue 41's targets (figure, at most):"]
    for name, value, limit, unit in rows:
        out.append(f"  {name:<56}{value:7.3f}{unit:<2} <= {limit:g}{unit:<2} "
                   + ("met" if value <= limit else "NOT MET"))
    return out


def sitting(py: Path, work: Path, name: str, rounds: int, steps: int, threads: int | None,
            burners: int, workload: dict) -> dict:
    """`rounds` alternated TRL-then-rollforge pairs, beside `burners` CPU-bound processes."""
    res = {"name": name, "workload": workload, "trl": [], "rollforge": [], "same": [],
           "order": [], "burners": burners, "threads": threads}
    res["others_before"] = others_now()
    with Burners(burners):
        others = Others().start()
        res["load_start"] = load()
        print(f"{name} sitting: load average at the start {res['load_start']}", flush=True)
        for r in range(rounds):
            tag = f"{name}-r{r}"
            t = run_trl(py, work, tag, steps, threads)
            res["trl"].append(t)
            res["order"].append((f"TRL {tag}", t["wall_s"]))
            print(f"{tag}: TRL {t['wall_s']:.1f} s (load {load()})", flush=True)
            f = run_rollforge(work, tag, steps, threads)
            res["rollforge"].append(f)
            res["order"].append((f"rollforge {tag}", f["wall_s"]))
            print(f"{tag}: rollforge {f['wall_s']:.1f} s (load {load()})", flush=True)
            res["same"].append(run_same(work, tag, threads))
            print(f"{tag}: rollforge's update on TRL's batches done (load {load()})", flush=True)
        res["load_end"], res["others_during"] = load(), others.per_core()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench-trl"),
                    help="where the workload, the runs and results.json go")
    ap.add_argument("--rounds", type=int, default=2, help="TRL-then-rollforge pairs, quiet")
    ap.add_argument("--loaded-rounds", type=int, default=0,
                    help="then pairs beside --burners CPU-bound processes (default: none)")
    ap.add_argument("--burners", type=int, default=os.cpu_count() or 2,
                    help="CPU-bound processes of the loaded sitting (default: one per core)")
    ap.add_argument("--max-load", type=float, default=0.5,
                    help="most CPU per core that other processes may use, just before the "
                         "quiet sitting and during it, for its ratios to be printed "
                         "(default: %(default)s)")
    ap.add_argument("--allow-load", action="store_true",
                    help="print the quiet sitting's ratios even above --max-load (marked)")
    ap.add_argument("--threads", type=int, default=None,
                    help="pin both sides' torch threads (default: each side's own default)")
    ap.add_argument("--steps", type=int, default=10, help="steps (iterations) a run")
    ap.add_argument("--warm-steps", type=int, default=150, help="warm start steps (first build)")
    ap.add_argument("--report", action="store_true", help="print the last results again")
    ap.add_argument("--profile", action="store_true", help="then profile a rollforge run")
    ap.add_argument("--profile-iterations", type=int, default=4)
    args = ap.parse_args()
    if args.rounds < 1 or args.loaded_rounds < 0 or args.burners < 1 or args.steps < 2:
        ap.error("--rounds must be >= 1, --loaded-rounds >= 0, --burners >= 1, --steps >= 2")
    work = Path(args.work).resolve()
    results = work / "results.json"
    if args.report:  # rollforge's figures are read again from its run folders
        saved = json.loads(results.read_text())
        for res in saved.get("sittings", [saved]):
            for r in res["rollforge"]:
                r.update(rollforge_figures(Path(r["run_dir"])))
            print(report({"workload": saved["workload"], **res}, args.max_load, args.allow_load))
            print()
        return 0

    py = ensure_venv()
    from bench import trl_workload

    print(f"building the workload in {work} ...", flush=True)
    wl = trl_workload.build(work, args.warm_steps)
    print(f"workload: {json.dumps(wl['warm_start'])}", flush=True)
    sittings = [sitting(py, work, "quiet", args.rounds, args.steps, args.threads, 0, wl)]
    if args.loaded_rounds:
        sittings.append(sitting(py, work, "loaded", args.loaded_rounds, args.steps, args.threads,
                                args.burners, wl))
    tmp = results.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"workload": wl, "sittings": sittings}, indent=2))
    os.replace(tmp, results)
    for res in sittings:  # the quiet figure first, then the loaded one
        print()
        print(report(res, args.max_load, args.allow_load))
    if args.profile:
        print(flush=True)
        subprocess.run([*NICE, sys.executable, str(ROOT / "bench" / "trl_profile.py"), "--work",
                        str(work), "--iterations", str(args.profile_iterations)],
                       env=side_env(args.threads), cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
