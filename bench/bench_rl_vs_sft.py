"""The RL loop against equal-time SFT, from the same SFT checkpoint (issue 11).

    .venv/bin/python bench/bench_rl_vs_sft.py [--config configs/default.yaml] [--seeds 0 1]
                                              [--own-start | --start RUN_DIR]
                                              [--out /tmp/rollforge-bench-rl]
                                              [--set KEY=VALUE ...] [--eval-samples 16]
    .venv/bin/python bench/bench_rl_vs_sft.py --out DIR --seeds 0 1 --reevaluate [--eval-samples K]
    .venv/bin/python bench/bench_rl_vs_sft.py --report DIR1/results.json DIR2/results.json

The SFT start (v0) is trained once, by the first seed's run, on the families that ship reference
solutions; every seed starts both arms from that same checkpoint (`--own-start`: each seed trains
its own v0, so the spread also covers the warm start). For each seed:
  1. `rollforge run` in a child process: the config's GRPO iterations from v0 over the whole
     mix, which includes the verification-only families (no reference: only the reward can teach
     them). Its RL wall time W is the iterations' seconds minus their held-out evaluations.
  2. The control: from that same v0, more SFT on the same reference data for W seconds (same
     DeepSpeed engine, batch size and peak learning rate, warm-up then linear decay over the
     steps that fit in W).
  3. The SFT start, the RL policy and the control are evaluated by the same code (the flow's
     `evaluate` stage: held-out tasks, greedy and `--eval-samples` sampled completions each,
     16 by default: the families with references have 2-28 held-out tasks, and at the run's own
     4 samples a 2-task family moves 12 points when 1 of its 8 samples per seed changes).

It prints, per seed and as the mean with the spread (max - min) over seeds, the held-out pass
rate on the verification-only families and on the rest, then per family. Target: on the
verification-only families RL ends at least 15 points above both the SFT start and the control,
and no other family loses more than 3 points (mean over seeds, greedy and sampled).
Runs take about 2 x (the default run + W) on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DS_ACCELERATOR", "cpu")
from flows.env import apply_defaults, standalone_env  # noqa: E402

apply_defaults()
import torch  # noqa: E402

from envs.io.procedural import FAMILIES  # noqa: E402
from flows.config import load_config  # noqa: E402
from flows.report import group_rate  # noqa: E402
from flows.stages import sft_data, task_pool  # noqa: E402
from storage.registry import read_metrics  # noqa: E402
from tasks.curriculum import informative_groups  # noqa: E402
from training import checkpoints  # noqa: E402
from training import engine as eng  # noqa: E402
from training.batch import make_batch, token_logprobs  # noqa: E402
from training.losses import sft_loss  # noqa: E402
from training.policy import load_policy, save_policy, tokenizer_of  # noqa: E402
from training.trainer import WarmupLinearDecay  # noqa: E402


def run_rl(config: str, seed: int, out: Path, sets: list[str],
           start: Path | None = None) -> tuple[Path, float, float]:
    """The RL arm: one `rollforge run` (from the v0 in run folder `start` if given: the flow
    reuses a v0 it finds); returns its run folder, W and the whole run's seconds."""
    run_id = f"rl-s{seed}"
    if start is not None:
        v0 = checkpoints.checkpoint_dir(str(out / run_id), 0)
        v0.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(checkpoints.checkpoint_dir(str(start), 0), v0)
    cmd = [sys.executable, "-m", "flows.cli", "run", "--config", config, "--set", f"seed={seed}",
           "--set", f"run_id={run_id}", "--set", f"out_dir={out}"]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    log = out / f"{run_id}.log"
    with open(log, "w") as f:
        rc = subprocess.call(cmd, cwd=ROOT, env=standalone_env(), stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        raise SystemExit(f"rollforge run for seed {seed} exited with {rc}; see {log}")
    m = read_metrics(str(out / run_id))
    rl_s = float((m["time/iteration_s"] - m.get("time/evaluate_s", 0).fillna(0)).sum())
    return out / run_id, rl_s, time.perf_counter() - t0


def run_sft_control(rl_dir: Path, cfg, budget_s: float, out: Path) -> tuple[Path, dict]:
    """The control arm: more SFT from the RL run's v0 for `budget_s` seconds; published as v1."""
    ctl_cfg = cfg.model_copy(update={"run_id": f"sft-{rl_dir.name}", "out_dir": str(out)})
    ctl_dir = Path(ctl_cfg.run_dir)
    shutil.rmtree(ctl_dir, ignore_errors=True)
    (ctl_dir / "checkpoints").mkdir(parents=True)
    shutil.copytree(checkpoints.checkpoint_dir(str(rl_dir), 0), checkpoints.checkpoint_dir(str(ctl_dir), 0))
    torch.manual_seed(cfg.seed)
    model = load_policy(str(checkpoints.checkpoint_dir(str(ctl_dir), 0) / "model")).train()
    tok = tokenizer_of(model)
    train = [t for _, ts in sft_data(cfg) for t in ts if t.reference]
    data = [(tok.encode_prompt(t.prompt), tok.encode(t.reference, bos=False) + [tok.eos_token_id])
            for t in train]
    sft, rng = cfg.sft, torch.Generator().manual_seed(cfg.seed)
    est_steps = [max(sft.warmup_steps + 1, 100)]  # replaced by the measured count after 10 steps
    engine = eng.make_engine(model, cfg.rl, sft.lr, sft.batch_size, 1,
                             lambda opt: _Elastic(opt, est_steps, sft.lr, sft.warmup_steps))
    t0, step, losses = time.perf_counter(), 0, []
    while time.perf_counter() - t0 < budget_s:
        idx = torch.randint(len(data), (sft.batch_size,), generator=rng).tolist()
        b = make_batch([data[i][0] for i in idx], [data[i][1] for i in idx], tok.pad_token_id,
                       cfg.policy.max_len)
        loss = sft_loss(token_logprobs(engine, b), b.loss_mask)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.detach()))
        step += 1
        if step == 10:  # the schedule's decay ends at the step count that fits in the budget
            est_steps[0] = max(11, int(budget_s / ((time.perf_counter() - t0) / step)))
    seconds = time.perf_counter() - t0
    stage = checkpoints.staging_dir(str(ctl_dir), 1)
    save_policy(engine.module, str(stage / "model"))
    facts = {"steps": step, "seconds": seconds, "planned_steps": est_steps[0],
             "final_loss": sum(losses[-20:]) / max(1, len(losses[-20:]))}
    checkpoints.publish(stage, checkpoints.checkpoint_dir(str(ctl_dir), 1),
                        {"version": 1, "kind": "sft-control", **facts})
    return ctl_dir, facts


class _Elastic(WarmupLinearDecay):
    """Warm-up then linear decay over a step count known only after a few timed steps."""

    def __init__(self, optimizer, total_ref: list[int], peak: float, warmup: int):
        self._total_ref = total_ref
        super().__init__(optimizer, total_ref[0], peak, warmup)

    def get_lr(self) -> list[float]:
        self.total = self._total_ref[0]
        return super().get_lr()


def _at(cfg, run_dir: Path):
    """`cfg` pointed at `run_dir` (the run whose checkpoints are evaluated)."""
    return cfg.model_copy(update={"run_id": run_dir.name, "out_dir": str(run_dir.parent)})


def evaluate_version(cfg, run_dir: Path, version: int, samples: int | None = None) -> dict:
    """The flow's held-out evaluation of `run_dir`'s `version`; `samples`: sampled completions
    per held-out task instead of the run's `tasks.heldout_samples`."""
    from flows.rounds import pass_rates_on
    from flows.stages import heldout_tasks

    if samples:
        cfg = cfg.model_copy(update={"tasks": cfg.tasks.model_copy(update={"heldout_samples": samples})})
    cfg = _at(cfg, run_dir)
    return pass_rates_on(cfg, version, heldout_tasks(cfg), "heldout")


def evaluate_trained(cfg, run_dir: Path, version: int) -> dict:
    """Pass rates on the verification-only families' *training-split* tasks: the ones the RL
    arm was rewarded on (never shown a solution), and that no reference exists to imitate."""
    from flows.rounds import pass_rates_on

    tasks = [t for t in task_pool(cfg) if t.split == "train" and FAMILIES[t.family].verify_only]
    return pass_rates_on(_at(cfg, run_dir), version, tasks, "trained") if tasks else {}


def split_rates(ev: dict, families: list[str]) -> dict:
    """Pass rates of the verification-only families and of the rest, weighted by task count
    (the end-of-run summary's `group_rate`)."""
    out = {}
    for group, names in (("verify-only", [f for f in families if FAMILIES[f].verify_only]),
                         ("rest", [f for f in families if not FAMILIES[f].verify_only])):
        for mode in ("greedy", "sampled"):
            out[f"{group}/{mode}"] = group_rate(ev, names, mode)
        out[f"{group}/tasks"] = sum(ev.get(f"heldout/{f}/tasks", 0) for f in names)
    return out


def trained_mix(rl_dir: Path) -> dict:
    """What the RL arm trained on: groups drawn and groups with signal (rewards not all equal,
    the ones GRPO updates on), verification-only against the families with references."""
    from storage.trajectories import read_trajectories  # noqa: PLC0415

    rows = read_trajectories(str(rl_dir))
    rows["signal"] = informative_groups(rows["reward"].to_numpy(), rows["group_id"].to_numpy())
    g = rows.groupby("group_id").agg(family=("family", "first"), signal=("signal", "first"))
    g["vo"] = [FAMILIES[f].verify_only for f in g["family"]]
    return {"groups": len(g), "vo_groups": int(g["vo"].sum()),
            "signal": int(g["signal"].sum()), "vo_signal": int((g["vo"] & g["signal"]).sum())}


def _pt(x: float) -> str:
    return "   -  " if math.isnan(x) else f"{100 * x:5.1f}"


def report(results: list[dict], families: list[str]) -> str:
    arms = ("sft_start", "rl", "sft_control")
    lines = []
    k = sorted({r.get("eval_samples", 4) for r in results})
    lines.append(f"held-out evaluations: greedy, and {'/'.join(map(str, k))} sampled completions per task")
    for mode in ("greedy", "sampled"):
        lines.append(f"\nheld-out pass rate, {mode} (points)   "
                     + "  ".join(f"{'SFT start':>9} {'RL':>6} {'SFT ctl':>8}" for _ in [0])
                     + "   RL-start  RL-ctl")
        for group in ("verify-only", "rest"):
            for r in results:
                v = [r["split"][a][f"{group}/{mode}"] for a in arms]
                lines.append(f"  {group:<12} seed {r['seed']} ({r['split']['rl'][f'{group}/tasks']:>3} tasks)"
                             f"   {_pt(v[0]):>9} {_pt(v[1]):>6} {_pt(v[2]):>8}"
                             f"   {100 * (v[1] - v[0]):+7.1f} {100 * (v[1] - v[2]):+7.1f}")
            d0 = [100 * (r["split"]["rl"][f"{group}/{mode}"] - r["split"]["sft_start"][f"{group}/{mode}"]) for r in results]
            d1 = [100 * (r["split"]["rl"][f"{group}/{mode}"] - r["split"]["sft_control"][f"{group}/{mode}"]) for r in results]
            lines.append(f"  {group:<12} mean over {len(results)} seeds{'':>22}"
                         f"{sum(d0) / len(d0):+7.1f} {sum(d1) / len(d1):+7.1f}"
                         f"   (spread {max(d0) - min(d0):.1f} / {max(d1) - min(d1):.1f})")
    vo = [f for f in families if FAMILIES[f].verify_only]
    if vo and all(r["trained"].get("rl") for r in results):
        lines.append("\nverification-only families, TRAINING-split tasks (the RL arm was rewarded on"
                     " these; nothing to imitate)")
        lines.append(f"  {'':<33}SFT start     RL  SFT ctl   RL-start  RL-ctl")
        for mode in ("greedy", "sampled"):
            for r in results:
                v = [group_rate(r["trained"][a], vo, mode, "trained") for a in arms]
                lines.append(f"  {mode:<8} seed {r['seed']} ({r['trained']['rl']['trained/tasks']:>3} tasks)"
                             f"   {_pt(v[0]):>9} {_pt(v[1]):>6} {_pt(v[2]):>8}"
                             f"   {100 * (v[1] - v[0]):+7.1f} {100 * (v[1] - v[2]):+7.1f}")
    lines.append("\nwhat RL trained on (forgetting guards: the families with references stay in every"
                 " iteration's pool, family-balanced, and rl.kl_coef pulls towards the SFT start)")
    for r in results:
        m = r["mix"]
        lines.append(f"  seed {r['seed']}: {m['groups']} groups drawn, {m['vo_groups']} verification-only;"
                     f" {m['signal']} with signal, {m['vo_signal']} of them verification-only;"
                     f" rl.kl_coef {r['kl_coef']:g}")
    lines.append("\nper family, mean over seeds (points)     tasks   SFT start  ->  RL   |  SFT ctl"
                 "   (greedy / sampled)")
    worst = {}
    for f in families:
        n = results[0]["evals"]["rl"].get(f"heldout/{f}/tasks", 0)
        if not n:
            continue
        cells = {}
        for a in arms:
            cells[a] = tuple(sum(r["evals"][a][f"heldout/{f}/pass_{m}"] for r in results) / len(results)
                             for m in ("greedy", "sampled"))
        tag = " (verify-only)" if FAMILIES[f].verify_only else ""
        lines.append(f"  {f + tag:<30} {n:>5}   {_pt(cells['sft_start'][0])}/{_pt(cells['sft_start'][1])}"
                     f" -> {_pt(cells['rl'][0])}/{_pt(cells['rl'][1])} | {_pt(cells['sft_control'][0])}/"
                     f"{_pt(cells['sft_control'][1])}")
        if not FAMILIES[f].verify_only:
            for i, mode in enumerate(("greedy", "sampled")):
                worst[(f, mode)] = (cells["rl"][i] - cells["sft_start"][i],
                                    _se(cells["rl"][i], cells["sft_start"][i], n * len(results)),
                                    cells["sft_control"][i] - cells["sft_start"][i], n)
    if worst:
        f, mode = min(worst, key=lambda k: worst[k][0])
        lines.append(f"\nlargest loss on a family with references: {f} {100 * worst[(f, mode)][0]:+.1f}"
                     f" points ({mode}; target: no loss larger than 3)")
        losses = sorted((k for k, v in worst.items() if v[0] < -0.03), key=lambda k: worst[k][0])
        if losses:
            lines.append("  every loss above 3 points, with its standard error (binomial over held-out"
                         " tasks x seeds, the task as the unit) and the SFT control's change on the"
                         " same tasks:")
        for f, mode in losses:
            d, se, ctl, n = worst[(f, mode)]
            lines.append(f"    {f:<10} {mode:<8} {100 * d:+6.1f} +- {100 * se:4.1f}   control"
                         f" {100 * ctl:+6.1f}   ({n} tasks x {len(results)} seeds;"
                         f" {abs(d) / se if se else math.inf:.1f} standard errors)")
    return "\n".join(lines)


def evaluate_arms(cfg, rl_dir: Path, ctl_dir: Path, samples: int) -> dict:
    return {"sft_start": evaluate_version(cfg, rl_dir, 0, samples),
            "rl": evaluate_version(cfg, rl_dir, cfg.iterations, samples),
            "sft_control": evaluate_version(cfg, ctl_dir, 1, samples)}


def reevaluate(out: Path, seeds: list[int], samples: int, config: str) -> int:
    """The held-out evaluations of stored arms again, with `samples` per task; results.json is
    rewritten in place (atomically), the report printed."""
    path = out / "results.json"
    if not path.is_file():
        raise SystemExit(f"--reevaluate: no {path}; run the bench into --out first")
    results = json.loads(path.read_text())
    missing = sorted(set(seeds) - {r["seed"] for r in results})
    if missing:
        raise SystemExit(f"--reevaluate: seeds {missing} are not in {path}")
    cfg = None
    for r in results:
        if r["seed"] not in seeds:
            continue
        rl_dir, ctl_dir = out / f"rl-s{r['seed']}", out / f"sft-rl-s{r['seed']}"
        cfg = load_config(str(rl_dir / "config.yaml"))
        r["evals"] = evaluate_arms(cfg, rl_dir, ctl_dir, samples)
        r["split"] = {a: split_rates(e, cfg.tasks.families) for a, e in r["evals"].items()}
        r["eval_samples"] = samples
        print(f"seed {r['seed']}: evaluated again with {samples} samples per held-out task", flush=True)
    _write_results(path, results)
    print(report(results, (cfg or load_config(config)).tasks.families))
    return 0


def _write_results(path: Path, results: list[dict]) -> None:
    """results.json, replaced atomically (a bench stopped mid-write leaves the previous one)."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=1, default=float))
    os.replace(tmp, path)


def _se(p1: float, p0: float, n: int) -> float:
    """Standard error of p1 - p0, each a pass rate over `n` held-out task evaluations."""
    return math.sqrt((p1 * (1 - p1) + p0 * (1 - p0)) / n) if n else math.nan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/default.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--own-start", action="store_true",
                    help="each seed trains its own SFT start instead of sharing the first seed's")
    ap.add_argument("--start", metavar="RUN_DIR",
                    help="use this run's v0 as the shared SFT start (it must come from the same "
                         "policy and SFT settings) instead of training one")
    ap.add_argument("--out", default="/tmp/rollforge-bench-rl")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override for the RL runs (and the control's config), e.g. iterations=4")
    ap.add_argument("--eval-samples", type=int, default=16, metavar="K",
                    help="sampled completions per held-out task in the bench's evaluations of the"
                         " three arms (the runs' own evaluations keep tasks.heldout_samples): a"
                         " family with 2 held-out tasks is judged on 2K samples per seed")
    ap.add_argument("--reevaluate", action="store_true",
                    help="evaluate again the arms of the seeds already in --out (with"
                         " --eval-samples), keep their other results, train nothing")
    ap.add_argument("--report", nargs="+", metavar="RESULTS_JSON",
                    help="print the report of earlier runs' results.json files (seeds merged,"
                         " e.g. two runs of two seeds each) and run nothing")
    args = ap.parse_args(argv)
    if args.report:
        merged = [r for p in args.report for r in json.loads(Path(p).read_text())]
        print(report(sorted(merged, key=lambda r: r["seed"]), load_config(args.config).tasks.families))
        return 0
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    results, start = [], None
    if args.start:
        start = Path(args.start).resolve()
        if args.own_start or not checkpoints.exists(str(start), 0):
            raise SystemExit(f"--start {args.start}: no v0 checkpoint there, or --own-start also given")
        # a copy first: the start may be an earlier bench's rl-s<seed>, which this one replaces
        shared = out / "sft-start"
        shutil.rmtree(shared, ignore_errors=True)
        (shared / "checkpoints").mkdir(parents=True)
        shutil.copytree(checkpoints.checkpoint_dir(str(start), 0), checkpoints.checkpoint_dir(str(shared), 0))
        start = shared
    if args.reevaluate:
        return reevaluate(out, args.seeds, args.eval_samples, args.config)
    for seed in args.seeds:
        shutil.rmtree(out / f"rl-s{seed}", ignore_errors=True)
        rl_dir, rl_s, run_s = run_rl(args.config, seed, out, args.set, start)
        if not args.own_start:
            start = start or rl_dir
        cfg = load_config(str(rl_dir / "config.yaml"))
        ctl_dir, ctl = run_sft_control(rl_dir, cfg, rl_s, out)
        evals = evaluate_arms(cfg, rl_dir, ctl_dir, args.eval_samples)
        split = {a: split_rates(e, cfg.tasks.families) for a, e in evals.items()}
        trained = {"sft_start": evaluate_trained(cfg, rl_dir, 0),
                   "rl": evaluate_trained(cfg, rl_dir, cfg.iterations),
                   "sft_control": evaluate_trained(cfg, ctl_dir, 1)}
        results.append({"seed": seed, "rl_seconds": rl_s, "run_seconds": run_s, "control": ctl,
                        "eval_samples": args.eval_samples, "evals": evals, "split": split,
                        "trained": trained, "mix": trained_mix(rl_dir),
                        "kl_coef": cfg.rl.kl_coef})
        print(f"seed {seed}: RL {cfg.iterations} iterations in {rl_s:.0f}s (whole run {run_s:.0f}s);"
              f" SFT control {ctl['steps']} steps in {ctl['seconds']:.0f}s", flush=True)
        _write_results(out / "results.json", results)
    print(report(results, cfg.tasks.families))
    print(f"\nwall time {time.perf_counter() - t_all:.0f}s; results in {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
