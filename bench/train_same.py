"""rollforge's update on the very sequences TRL trained in bench/bench_trl.py: issue 41's
"training at least as fast as TRL's forward + backward on the same sequences".

TRL's side writes each step's trained batch (`bench/trl_side.py --batches-out`: prompt ids,
completion ids, advantages); this script publishes the bench's warm model as version 0 of a
fresh run folder and runs `training.trainer.grpo_update` (the flow's own update: DeepSpeed
engine, forward, loss, backward, optimizer step, checkpoint) on step k's batch from version k,
with the run's `bench/trl_workload.yaml` settings, and records the update's `train/seconds`,
the figure the flow reports and bench_trl compares. Two ways:

- `as_trained`: the batch as TRL handed it: rollforge runs only the sequences whose loss is
  not identically 0 (advantage != 0; TRL runs all 64 and multiplies the rest by 0);
- `every_sequence`: a zero advantage replaced by 1e-12, so every one of the 64 is run: the
  same work as TRL's per sequence.

The sampler's log-probs the loss's ratio needs are the starting weights' own (computed before
the update, not timed: TRL's one-iteration GRPO takes the ratio to its detached log-probs).
bench_trl's report of the results (`paired_steps`, `same_sequences`) is here too.

    .venv/bin/python bench/train_same.py --work runs/bench-trl --batches B.json --out R.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TINY = 1e-12


def med(xs) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def version_logprobs(run_dir: str, version: int, rows: list[dict], max_len: int,
                    temperature: float) -> list[list[float]]:
    """Each row's completion log-probs under version `version` (no gradient): the sampling
    log-probs the flow would have kept for rows that version sampled."""
    import torch

    from training.batch import RLSample, make_batch, token_logprobs
    from training.offpolicy import completion_values
    from training.tokenizer import tokenizer_of
    from training.trainer import policy_for_sampling

    model = policy_for_sampling(run_dir, version)
    tok = tokenizer_of(model)
    b = make_batch([r["prompt_ids"] for r in rows], [r["completion_ids"] for r in rows],
                   tok.pad_token_id, max_len)
    with torch.no_grad():
        logp = token_logprobs(model, b, temperature, tok.banned_ids)
    return [completion_values(logp, i, RLSample(r["prompt_ids"], r["completion_ids"], [], 0.0))
            for i, r in enumerate(rows)]


def run_way(way: str, batches: list[list[dict]], cfg, run_dir: str) -> list[dict]:
    from training.batch import RLSample
    from training.trainer import grpo_update, sft_warm_start

    sft_warm_start(run_dir, [], [], cfg.policy, cfg.sft, cfg.rl, cfg.seed)  # the model as is: v0
    temperature = cfg.sampling.temperature
    out = []
    for k, rows in enumerate(batches):
        old = version_logprobs(run_dir, k, rows, cfg.policy.max_len, temperature)
        samples = []
        for r, lp in zip(rows, old):
            a = r["advantage"]
            if way == "every_sequence" and a == 0.0:
                a = TINY
            samples.append(RLSample(r["prompt_ids"], r["completion_ids"], lp, a))
        t0 = time.perf_counter()
        m = grpo_update(run_dir, k, [s for s in samples if s.completion_ids], cfg.policy, cfg.rl,
                        temperature, cfg.seed)
        out.append({"step": k, "train_s": m["train/seconds"],
                    "update_s": time.perf_counter() - t0, "sequences": m["train/sequences"],
                    "tokens": m["train/tokens"], "loss": m["train/loss"],
                    "zero_advantage": sum(r["advantage"] == 0.0 for r in rows)})
        print(f"{way} step {k}: {m['train/sequences']} sequences, train "
              f"{m['train/seconds']:.3f} s", flush=True)
    return out


# -- bench_trl's report of the results ----------------------------------------------------
def paired_steps(same: list[dict], trl_runs: list[dict]) -> list[dict]:
    """Per TRL step whose batch rollforge's update also trained: TRL's forward + backward and
    rollforge's training seconds and sequences, each way. The first step of each run is left
    out on both sides (it pays one-off start-up: allocator, kernels' first calls)."""
    out = []
    for same_run, trl_run in zip(same, trl_runs):
        for k, t in enumerate(trl_run["steps"]):
            if k == 0 or k >= same_run.get("steps", 0):
                continue
            d = {"trl_s": t["forward_s"] + t["backward_s"]}
            for way in ("as_trained", "every_sequence"):
                d[way] = same_run[way][k]["train_s"]
                d[way + "_sequences"] = same_run[way][k]["sequences"]
            out.append(d)
    return out


def same_sequences(same: list[dict], trl_runs: list[dict], show_ratio: bool) -> list[str]:
    """The table of rollforge's update on TRL's own batches, as bench_trl prints it."""
    steps = paired_steps(same, trl_runs)
    if not steps:
        return []
    f = lambda v: f"{v:.3f}"  # noqa: E731
    lines = ["", f"training on the same sequences: TRL's trained batches, {len(steps)} steps "
             "(each run's first left out), median", f"  {'':<52}{'seconds':>9}{'per 1000 seq':>14}"
             f"{'vs TRL (paired)':>17}"]
    rows = [("TRL forward + backward (64 sequences)", "trl_s", None),
            ("rollforge, as it trains them (loss not all 0)", "as_trained", "as_trained_sequences"),
            ("rollforge, every sequence run", "every_sequence", "every_sequence_sequences")]
    for name, key, seqs in rows:
        secs = med(s[key] for s in steps)
        per = med(1000 * s[key] / (s[seqs] if seqs else 64) for s in steps
                  if not seqs or s[seqs])
        ratio = "" if key == "trl_s" or not show_ratio else \
            f"{med(s[key] / s['trl_s'] for s in steps):.2f}x"
        lines.append(f"  {name:<52}{f(secs):>9}{f(per):>14}{ratio:>17}")
    lines.append(f"  sequences rollforge ran as it trains them (median): "
                 f"{med(s['as_trained_sequences'] for s in steps):.0f} of 64")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, help="bench_trl's work folder (its warm/ model)")
    ap.add_argument("--batches", required=True, help="bench/trl_side.py --batches-out's file")
    ap.add_argument("--out", required=True, help="where the result JSON goes")
    ap.add_argument("--ways", default="as_trained,every_sequence")
    args = ap.parse_args()
    work = Path(args.work).resolve()
    try:
        batches = json.loads(Path(args.batches).read_text())
    except (OSError, ValueError) as exc:
        print(f"train_same: cannot read the batches file {args.batches}: {exc}", file=sys.stderr)
        return 2
    if not (work / "warm").is_dir():
        print(f"train_same: no warm model at {work / 'warm'} (bench_trl builds it)",
              file=sys.stderr)
        return 2
    ways = [w for w in args.ways.split(",") if w]
    bad = [w for w in ways if w not in ("as_trained", "every_sequence")]
    if bad or not batches:
        print(f"train_same: unknown way(s) {bad}" if bad else "train_same: no batch in "
              f"{args.batches}", file=sys.stderr)
        return 2
    from flows.env import apply_defaults

    apply_defaults()
    from flows.config import load_config

    stamp = int(time.time())
    res = {"steps": len(batches)}
    for way in ways:
        run_id = f"same-{way}-{stamp}"
        cfg = load_config(ROOT / "bench" / "trl_workload.yaml", [
            f"policy.model_path={work / 'warm'}", f"out_dir={work / 'runs'}", f"run_id={run_id}"])
        os.makedirs(cfg.run_dir, exist_ok=True)
        res[way] = run_way(way, batches, cfg, cfg.run_dir)
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=2))
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
