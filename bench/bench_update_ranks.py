"""The RL update on the resident trainer group (training/group.py): tokens/s at 1 and 2 ranks
(and 2 placed on a Dask cluster's workers) side by side, the per-iteration cost of keeping the group resident against relaunching it for
every update, and each rank's memory under ZeRO 0, 2 and 3. Default model (configs/default.yaml),
the same synthetic batch for every update, all measured in one run.

    .venv/bin/python bench/bench_update_ranks.py [--samples 128] [--repeats 3]

Each rank runs one torch thread (OMP_NUM_THREADS, default 1 here), so 1 and 2 ranks are compared
on their process count, not on threads. On CPU, ranks share the machine's cores: 2 ranks beat 1
only where 2 cores are free.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("OMP_NUM_THREADS", "1")
from flows.env import apply_defaults  # noqa: E402

apply_defaults()
from flows.config import load_config  # noqa: E402
from flows.rollouts import launcher_vars  # noqa: E402
from training.config import SFTConfig  # noqa: E402
from training.group import TrainerGroup, combine  # noqa: E402
from training.trainer import RLSample, sft_warm_start  # noqa: E402


def _samples(n: int, seed: int = 0) -> list[RLSample]:
    r = random.Random(seed)
    out = []
    for _ in range(n):
        p = [257] + [r.randrange(32, 127) for _ in range(r.randrange(60, 140))]
        c = [r.randrange(32, 127) for _ in range(r.randrange(10, 41))]
        out.append(RLSample(p, c, [-4.0] * len(c), r.choice([-1.0, 1.0])))
    return out


class Jobs:
    """Updates of version 0 of one warm start, each on its own copy of the run folder."""

    def __init__(self, root: Path, cfg, samples: list[RLSample]):
        self.root, self.cfg, self.n = root, cfg, 0
        self.base = root / "base"
        sft_warm_start(str(self.base), ["def f(x):\n"] * 4, ["    return x\n"] * 4, cfg.policy,
                       SFTConfig(steps=1, batch_size=4), cfg.rl, 0)
        self.samples = [asdict(s) for s in samples]

    def next(self, **rl) -> dict:
        self.n += 1
        run = self.root / f"job{self.n}"
        shutil.copytree(self.base, run)
        return {"run_dir": str(run), "version": 0, "samples": self.samples,
                "policy": self.cfg.policy.model_dump(),
                "rl": {**self.cfg.rl.model_dump(), "lr_schedule": "constant", **rl},
                "temperature": 1.0, "seed": 0, "replay": []}


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=128, help="sequences per update")
    ap.add_argument("--repeats", type=int, default=3, help="updates per figure (median)")
    ap.add_argument("--no-dask", action="store_true",
                    help="leave out the 2 ranks placed on a 2-worker Dask LocalCluster")
    args = ap.parse_args()
    cfg = load_config(None, ["rl.replay_coef=0", "rl.kl_coef=0", "rl.epochs=1"])
    with tempfile.TemporaryDirectory(prefix="bench-ranks-") as tmp:
        jobs = Jobs(Path(tmp), cfg, _samples(args.samples))
        groups = {w: _timed(lambda w=w: TrainerGroup(w)) for w in (1, 2)}
        rates, resident = {}, []
        for w, (g, _) in groups.items():
            g.run(jobs.next())  # warm-up: first engine build, first collectives
            rates[w] = []
            for _ in range(args.repeats):
                replies, sec = _timed(lambda g=g: g.run(jobs.next()))
                rates[w].append(combine(replies)["train/tokens_per_s"])
                if w == 2:
                    resident.append(sec)
        memory = {}
        for stage in (0, 2, 3):
            memory[stage] = combine(groups[2][0].run(jobs.next(zero_stage=stage)))
        memory["1 rank"] = combine(groups[1][0].run(jobs.next()))
        for g, _ in groups.values():
            g.close()
        on_dask = []
        if not args.no_dask:  # rl.placement=dask: the same 2 ranks started by 2 Dask workers
            from distributed import Client, LocalCluster

            with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                              host="127.0.0.1", dashboard_address=None) as cluster, \
                    Client(cluster) as client:
                g = TrainerGroup(2, client, launcher_vars=launcher_vars())
                g.run(jobs.next())
                for _ in range(args.repeats):
                    replies, sec = _timed(lambda: g.run(jobs.next()))
                    on_dask.append((combine(replies)["train/tokens_per_s"], sec))
                g.close()
        relaunch = []
        for _ in range(args.repeats):
            def once():
                g = TrainerGroup(2)
                g.run(jobs.next())
                g.close()
            relaunch.append(_timed(once)[1])

    p = cfg.policy
    print(f"RL update on the trainer group, default model ({p.n_layer}x{p.n_embd}, {args.samples} "
          f"seqs, micro {cfg.rl.micro_batch_size}, 1 epoch, ZeRO-{cfg.rl.zero_stage} "
          f"{cfg.rl.dtype}, {os.environ['OMP_NUM_THREADS']} torch thread(s) per rank, "
          f"{os.cpu_count()} cores), median of {args.repeats}:")
    one, two = statistics.median(rates[1]), statistics.median(rates[2])
    print(f"  1 rank           : {one:10.0f} tokens/s")
    print(f"  2 ranks          : {two:10.0f} tokens/s   ({two / one:.2f}x)")
    if on_dask:
        rate, sec = (statistics.median(x) for x in zip(*on_dask))
        print(f"  2 ranks, Dask    : {rate:10.0f} tokens/s   ({rate / one:.2f}x; rl.placement=dask, "
              f"one rank on each of 2 LocalCluster workers; {sec:.2f} s an update)")
    res, rel = statistics.median(resident), statistics.median(relaunch)
    print("per-iteration cost of the update stage, 2 ranks:")
    print(f"  resident group   : {res:10.2f} s")
    print(f"  relaunch per it. : {rel:10.2f} s   (group start {groups[2][1]:.1f} s the first time)")
    print(f"  ratio            : {rel / res:10.2f}x  (relaunch / resident)")
    print("memory per rank, MB (optimizer moments | weights held | peak "
          f"{'CUDA allocated' if _cuda() else 'resident set'}):")
    for name, m in memory.items():
        n = int(m["train/processes"])
        label = name if isinstance(name, str) else f"ZeRO-{name}, 2 ranks"
        def of(r, key):
            return m[f"train/rank{r}/{key}"] if n > 1 else m[f"train/{key}"]

        cells = "   ".join(f"rank {r}: {of(r, 'optimizer_mb'):6.2f} | {of(r, 'params_mb'):6.2f} | "
                           f"{of(r, 'peak_mem_mb'):7.1f}" for r in range(n))
        print(f"  {label:17}: {cells}")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
