"""A kind's own preload on the fork server: grading reasoning-gym answers one sandbox run each
(the training loop's shape: every rollout graded as it comes), with the kind as shipped against
the same runs without its preload, in one interleaved run.

    .venv/bin/python bench/bench_kind_preload.py [--n 12] [--dataset basic_arithmetic]

Three ways, each round in turn so that all see the same machine load:

- `fresh`: the process backend without the fork server (bubblewrap and a fresh interpreter per
  run, which imports reasoning_gym);
- `shared zygote`: the fork server, the run naming no preload (a fork of the shared zygote, the
  harness imports reasoning_gym: what every run paid before the kind named its preload);
- `kind's zygote`: the kind as shipped (`envs/reasoning_gym/grading.py PRELOAD`: a fork of a
  zygote that imported reasoning_gym once).

Each answer is the dataset's own (score 1), so the three must agree on every score. Prints p50
and p95 per run and the ratios to `kind's zygote`; the first run of each way (its zygote's
start) is left out and printed apart.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import pct  # noqa: E402
from envs.reasoning_gym import grading  # noqa: E402
from envs.registry import make_env  # noqa: E402
from sandbox.base import Limits  # noqa: E402
from sandbox.process import ProcessSandbox  # noqa: E402

LIMITS = Limits(timeout_s=60)


def grade_one(sandbox, task, preload) -> tuple[float, float]:
    """(seconds, score) of one answer in one sandbox run, naming `preload`."""
    saved = grading.PRELOAD
    grading.PRELOAD = preload
    try:
        t0 = time.perf_counter()
        report = grading.run_batch([(task, task.reference)], sandbox, LIMITS, 10.0)[0]
        return time.perf_counter() - t0, report.score
    finally:
        grading.PRELOAD = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=12, help="rounds (each grades one answer each way)")
    ap.add_argument("--dataset", default="basic_arithmetic")
    a = ap.parse_args()
    tasks = make_env("reasoning_gym", {"datasets": [a.dataset], "tasks_per_level": a.n + 1,
                                       "seed": 0}).generate()
    fast = ProcessSandbox(site_packages=True)
    if fast.fork_server is None:
        print("no fork server on this host: nothing to compare", file=sys.stderr)
        return 1
    plain = ProcessSandbox(site_packages=True, fork_server=False)
    ways = {"fresh": (plain, ()), "shared zygote": (fast, ()),
            "kind's zygote": (fast, grading.PRELOAD)}
    times: dict[str, list[float]] = {w: [] for w in ways}
    scores: dict[str, list[float]] = {w: [] for w in ways}
    try:
        for task in tasks[: a.n + 1]:
            for way, (sbx, preload) in ways.items():
                t, score = grade_one(sbx, task, preload)
                times[way].append(t)
                scores[way].append(score)
    finally:
        fast.close()
        plain.close()
    if len({tuple(s) for s in scores.values()}) != 1:
        print(f"the ways disagree on the scores: {scores}", file=sys.stderr)
        return 1
    base = pct(times["kind's zygote"][1:], 0.5)
    print(f"{a.dataset}: {a.n} answers one sandbox run each, after each way's first run; "
          f"every score {sorted(set(scores['fresh']))}")
    print(f"{'way':<15} {'first ms':>9} {'p50 ms':>8} {'p95 ms':>8} {'p50 / kind':>11}")
    for way, ts in times.items():
        p50 = pct(ts[1:], 0.5)
        print(f"{way:<15} {ts[0] * 1000:>9.0f} {p50:>8.0f} {pct(ts[1:], 0.95):>8.0f} "
              f"{p50 / base:>10.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
