"""The repo kind, side by side with what a harness without it pays, in one run:

    .venv/bin/python bench/bench_repos.py [--tasks 12] [--build-tries 12]

1. episode reset (`RepoEnv.reset`: the pristine tree shared in memory, the bug's overlay)
   against a plain copy of the repository (`shutil.copytree` of the extracted sdist onto the
   same tmpfs the sandbox uses), p50 and p90 over the tasks (target: reset p50 <= 50 ms);
2. grading one instance (its gold patch: F2P and P2P through the sandbox, the grader's plugin
   and both reports) against bare pytest on the same node ids in a copy of the buggy-then-fixed
   tree with the grader's pytest.ini (the repository's own config would add its doctests),
   no sandbox, no plugin (target: <= 1.5x);
3. instances built per minute by `build_repo` (the three suite runs included) on inflection.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DO_NOT_TRACK", "1")

from bench.common import pct  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=12)
    ap.add_argument("--build-tries", type=int, default=12)
    args = ap.parse_args()

    from envs.base import StepContext
    from envs.registry import make_env
    from envs.repo.build import BuildOptions, build_repo
    from envs.repo.diffs import apply_diff
    from envs.repo.grading import INI, INI_SOURCE, apply_overlay
    from envs.repo.sandboxes import layer_sandbox
    from envs.repo.source import layer_python, tree_dir
    from rewards.aggregate import RewardConfig
    from sandbox.base import Limits
    from sandbox.workspace import workspace_base

    env = make_env("repo")
    tasks = env.generate()
    by_repo: dict[str, list] = {}
    for t in tasks:
        by_repo.setdefault(t.family, []).append(t)
    picked = [t for ts in by_repo.values() for t in ts[: max(1, args.tasks // len(by_repo))]]
    for t in picked:
        env.trees(t)  # the sdist fetched and the tree read once per process, as on a worker

    resets, copies = [], []
    for t in picked:
        t0 = time.perf_counter()
        env.reset(t)
        resets.append(time.perf_counter() - t0)
        src = tree_dir(t.payload["repo"], t.payload["sdist_sha256"])
        dst = tempfile.mkdtemp(dir=workspace_base())
        t0 = time.perf_counter()
        shutil.copytree(src, Path(dst) / "r")
        copies.append(time.perf_counter() - t0)
        shutil.rmtree(dst)
    print(f"{'':28}{'p50 ms':>10}{'p90 ms':>10}")
    print(f"{'episode reset (overlay)':28}{pct(resets, .5):10.2f}{pct(resets, .9):10.2f}")
    print(f"{'plain copy of the repo':28}{pct(copies, .5):10.2f}{pct(copies, .9):10.2f}")
    print(f"ratio reset/copy p50: {pct(resets, .5) / pct(copies, .5):.3f}")

    sandbox = layer_sandbox("process")
    ctx = StepContext(sandbox, Limits(timeout_s=30, memory_mb=1024), RewardConfig())
    py = layer_python()
    grades, bares = [], []
    for t in picked:
        t0 = time.perf_counter()
        b, _ = env.grade(t, t.reference, ctx)
        grades.append(time.perf_counter() - t0)
        assert b.solved, t.task_id
        tree, bug = env.trees(t)
        fixed = apply_overlay(apply_overlay(tree, bug), apply_diff(apply_overlay(tree, bug),
                                                                   t.reference))
        d = tempfile.mkdtemp(dir=workspace_base())
        for k, v in fixed.items():
            p = Path(d, k)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(v)
        Path(d, INI).write_text(INI_SOURCE)  # the grader's collection rules, not the repo's
        ids = t.payload["fail_to_pass"] + t.payload["pass_to_pass"]
        t0 = time.perf_counter()
        subprocess.run([py, "-I", "-B", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
                        INI, "--rootdir=.", *ids], cwd=d, capture_output=True, check=False)
        bares.append(time.perf_counter() - t0)
        shutil.rmtree(d)
    print(f"\n{'':28}{'p50 ms':>10}{'mean ms':>10}")
    print(f"{'grade (sandbox + grader)':28}{pct(grades, .5):10.1f}"
          f"{1000 * sum(grades) / len(grades):10.1f}")
    print(f"{'bare pytest, same tests':28}{pct(bares, .5):10.1f}"
          f"{1000 * sum(bares) / len(bares):10.1f}")
    print(f"ratio grade/bare (mean): {sum(grades) / sum(bares):.2f}x")

    t0 = time.perf_counter()
    made = build_repo("inflection==0.5.1", sandbox, Limits(timeout_s=60, memory_mb=1024,
                                                           output_bytes=1 << 20),
                      BuildOptions(max_instances=args.build_tries, max_tries=args.build_tries,
                                   pairs=0))
    dt = time.perf_counter() - t0
    print(f"\nbuilt {len(made)} instances in {dt:.1f} s: {60 * len(made) / dt:.1f} per minute "
          f"(inflection, 3 suite runs + {args.build_tries} mutants tried)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
