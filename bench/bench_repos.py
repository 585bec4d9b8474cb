"""The repo kind, side by side with what a harness without it pays, in one run:

    .venv/bin/python bench/bench_repos.py [--tasks 12] [--runs 3] [--build-tries 12] [--no-build]

1. episode reset (`RepoEnv.reset`: the pristine tree shared in memory, the bug's overlay)
   against a plain copy of the repository (`shutil.copytree` of the extracted sdist onto the
   same tmpfs the sandbox uses), p50 and p90 over the tasks (target: reset p50 <= 50 ms);
2. one `<run>` of the episode (the process sandbox over the buggy workspace): the pristine
   tree shown read-only in place with only the episode's files written (`BaseTree`, what
   `RepoEnv` does) against the whole tree written into the workspace (what it did before), the
   same command interleaved, p50 of the whole run and of the workspace's making alone;
3. grading one instance (its gold patch: F2P and P2P through the sandbox, the grader's plugin
   and both reports) against bare pytest on the same node ids under the same conditions: the
   same fixed tree on the same tmpfs, the grader's pytest.ini and pytest flags, the same
   environment variables (PYTHONHASHSEED=0), the root on sys.path (the grader's root
   conftest.py puts it there; bare gets an empty root conftest.py, without which toolz's tests
   cannot import toolz and bare pytest "finished" in a second on a collection error), and
   checked to have passed every node the grader collected. The two alternate, grade first on
   even rounds and bare first on odd ones, `--runs` rounds per task (target: <= 1.5x);
4. instances built per minute by `build_repo` (the three suite runs included) on inflection.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DO_NOT_TRACK", "1")

from bench.common import pct  # noqa: E402


def reset_figures(env, picked) -> None:
    from envs.repo.source import tree_dir
    from sandbox.workspace import workspace_base

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
    print(f"{'':34}{'p50 ms':>10}{'p90 ms':>10}")
    print(f"{'episode reset (overlay)':34}{pct(resets, .5):10.2f}{pct(resets, .9):10.2f}")
    print(f"{'plain copy of the repo':34}{pct(copies, .5):10.2f}{pct(copies, .9):10.2f}")
    print(f"ratio reset/copy p50: {pct(resets, .5) / pct(copies, .5):.3f}")


def run_figures(env, picked, sandbox, limits, reps: int) -> None:
    """Per `<run>`: base tree in place against the whole tree written, same command."""
    from envs.repo.grading import apply_overlay
    from envs.repo.source import pristine_base
    from sandbox.process import _base_binds
    from sandbox.workspace import make_workspace, remove_tree, write_files

    cmd = ["python", "-c", "import os; os.listdir('.')"]
    whole, based, stage_whole, stage_based, n_files = [], [], [], [], []
    for t in picked:
        state, _ = env.reset(t)
        tree, _ = env.trees(t)
        view = apply_overlay(tree, state.files)
        mine = {k: v for k, v in state.files.items() if v is not None}
        base = pristine_base(t.payload["repo"], t.payload["sdist_sha256"], state.files)
        n_files.append(len(view))
        for i in range(reps):
            for mode in ((0, 1) if i % 2 == 0 else (1, 0)):
                t0 = time.perf_counter()
                if mode == 0:
                    res = sandbox.run(view, cmd, limits)
                else:
                    res = sandbox.run(mine, cmd, limits, base=base)
                (whole if mode == 0 else based).append(time.perf_counter() - t0)
                assert res.status == "ok", (res.status, res.stderr[-300:])
                t0 = time.perf_counter()  # the workspace alone, as the sandbox makes it
                d = make_workspace()
                if mode == 0:
                    write_files(d, view)
                else:
                    write_files(d, mine)
                    _base_binds(d, base, mine, "/workspace")
                remove_tree(d)
                (stage_whole if mode == 0 else stage_based).append(time.perf_counter() - t0)
    print(f"\none <run> ({' '.join(cmd)}), {reps} a task, "
          f"trees of {min(n_files)}-{max(n_files)} files")
    print(f"{'':34}{'p50 ms':>10}{'p90 ms':>10}{'workspace p50 ms':>18}")
    print(f"{'whole tree written (before)':34}{pct(whole, .5):10.1f}{pct(whole, .9):10.1f}"
          f"{pct(stage_whole, .5):18.2f}")
    print(f"{'base in place + overlay (now)':34}{pct(based, .5):10.1f}{pct(based, .9):10.1f}"
          f"{pct(stage_based, .5):18.2f}")
    print(f"ratio now/before p50: whole run {pct(based, .5) / pct(whole, .5):.2f}x, "
          f"workspace {pct(stage_based, .5) / pct(stage_whole, .5):.2f}x")


_SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
                "PYTHONHASHSEED": "0"}


def grade_figures(env, picked, ctx, runs: int) -> None:
    from envs.repo.diffs import apply_diff
    from envs.repo.grading import INI, INI_SOURCE, apply_overlay, run_tests
    from envs.repo.source import layer_python
    from sandbox.workspace import workspace_base

    py = layer_python()
    grades, bares = [], []
    per_repo: dict[str, list[tuple[float, float]]] = {}
    for t in picked:
        tree, bug = env.trees(t)
        buggy = apply_overlay(tree, bug)
        fixed = apply_overlay(buggy, apply_diff(buggy, t.reference))
        ids = t.payload["fail_to_pass"] + t.payload["pass_to_pass"]
        d = tempfile.mkdtemp(dir=workspace_base())
        for k, v in fixed.items():
            p = Path(d, k)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(v)
        Path(d, INI).write_text(INI_SOURCE)  # the grader's collection rules, not the repo's
        Path(d, "conftest.py").write_text("")  # the root on sys.path, as the grader's has it
        env_vars = dict(_SANDBOX_ENV, HOME=d)
        # the grader's argv (envs/repo/grading.py run_tests) without its plugin and reports
        argv = [py, "-I", "-B", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                "no:timeout", "-c", INI, "--rootdir=.", "--capture=sys", "--tb=short",
                "--color=no", "-W", "ignore::DeprecationWarning", *ids]
        n = run_tests(fixed, ids, ctx.sandbox, ctx.limits).collected  # and a warm-up of both
        subprocess.run(argv, cwd=d, capture_output=True, env=env_vars, check=False)
        for i in range(runs):
            for which in (("grade", "bare") if i % 2 == 0 else ("bare", "grade")):
                t0 = time.perf_counter()
                if which == "grade":
                    b, _ = env.grade(t, t.reference, ctx)
                    grades.append(time.perf_counter() - t0)
                    assert b.solved, t.task_id
                    continue
                p = subprocess.run(argv, cwd=d, capture_output=True, text=True, env=env_vars,
                                   check=False)
                bares.append(time.perf_counter() - t0)
                last = (p.stdout.strip().splitlines() or [""])[-1]
                got = re.match(r"(\d+) passed", last)
                assert p.returncode == 0 and got and int(got.group(1)) == len(n), \
                    (t.task_id, len(n), last)
            per_repo.setdefault(t.family, []).append((sum(grades[-runs:]), sum(bares[-runs:])))
        shutil.rmtree(d)
    print(f"\ngrading, {len(picked)} tasks x {runs} alternating rounds")
    print(f"{'':34}{'p50 ms':>10}{'mean ms':>10}")
    print(f"{'grade (sandbox + grader)':34}{pct(grades, .5):10.1f}"
          f"{1000 * sum(grades) / len(grades):10.1f}")
    print(f"{'bare pytest, same nodes/conditions':34}{pct(bares, .5):10.1f}"
          f"{1000 * sum(bares) / len(bares):10.1f}")
    for repo, pairs in per_repo.items():
        g, b = sum(x for x, _ in pairs), sum(y for _, y in pairs)
        print(f"  {repo:32}grade/bare {g / b:.2f}x")
    print(f"ratio grade/bare (mean): {sum(grades) / sum(bares):.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=12)
    ap.add_argument("--runs", type=int, default=3, help="alternating rounds per task (grading)")
    ap.add_argument("--build-tries", type=int, default=12)
    ap.add_argument("--no-build", action="store_true", help="leave out the builder's rate")
    args = ap.parse_args()

    from envs.base import StepContext
    from envs.registry import make_env
    from envs.repo.build import BuildOptions, build_repo
    from envs.repo.sandboxes import layer_sandbox
    from rewards.aggregate import RewardConfig
    from sandbox.base import Limits

    env = make_env("repo")
    tasks = env.generate()
    by_repo: dict[str, list] = {}
    for t in tasks:
        by_repo.setdefault(t.family, []).append(t)
    picked = [t for ts in by_repo.values() for t in ts[: max(1, args.tasks // len(by_repo))]]
    for t in picked:
        env.trees(t)  # the sdist fetched and the tree read once per process, as on a worker

    sandbox = layer_sandbox("process")
    limits = Limits(timeout_s=30, memory_mb=1024)
    reset_figures(env, picked)
    run_figures(env, picked, sandbox, limits, reps=4)
    grade_figures(env, picked, StepContext(sandbox, limits, RewardConfig()), args.runs)
    if args.no_build:
        return 0
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
