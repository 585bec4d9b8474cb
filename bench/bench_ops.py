"""Episodes per second of the ops kind through the real environment, against a bare run of the
same reference scripts with `bash` in a temporary folder outside any sandbox.

    .venv/bin/python bench/bench_ops.py [--per-family 2] [--repeat 2]

One ops episode (`OpsEnv.grade`) is: a throw-away system made from the task's tree, the script
run in it (setpriv, bubblewrap with a user namespace, the supervisor), the tree read back, the
script run a second time (idempotence), the configs parsed by a sandbox execution, a rollback
run where the family has one, and the probes. The bare baseline writes the same tree into a
temp folder and runs the script once with bash, its absolute paths (/etc/..., /srv/...)
rewritten into that folder; as uid 65534 (nobody), so a path the rewrite missed cannot touch
the host. The ratio is the price of the isolation and of grading by state.
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
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("DO_NOT_TRACK", "1")


def bare(task, tmp_base: str) -> float:
    """Seconds to write the task's tree and run its reference once with plain bash."""
    from sandbox.rootfs import TOPS, materialize, node_of  # noqa: PLC0415

    t0 = time.perf_counter()
    root = tempfile.mkdtemp(dir=tmp_base)
    materialize(root, {p: node_of(s) for p, s in task.payload["files"].items()})
    script = re.sub(r"(?<![\w.])/(%s)(?=/|\b)" % "|".join(TOPS), lambda m: f"{root}/{m.group(1)}",
                    task.reference)
    subprocess.run(["chown", "-R", "65534:65534", root], check=True)
    subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c",
                    script], cwd=root, capture_output=True, timeout=30)
    shutil.rmtree(root)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-family", type=int, default=2, help="tasks per family")
    ap.add_argument("--repeat", type=int, default=2, help="episodes per task")
    args = ap.parse_args()

    from envs.base import StepContext  # noqa: PLC0415
    from envs.registry import make_env  # noqa: PLC0415
    from rewards.aggregate import RewardConfig  # noqa: PLC0415
    from sandbox.config import SandboxConfig  # noqa: PLC0415
    from sandbox.registry import make_sandbox  # noqa: PLC0415

    env = make_env("ops", {"tasks_per_family": args.per_family})
    tasks = env.generate()
    cfg = SandboxConfig(timeout_s=10)
    sandbox = make_sandbox(cfg)
    ctx = StepContext(sandbox, cfg.limits(), RewardConfig())
    env.grade(tasks[0], tasks[0].reference, ctx)  # warm: imports, the checker's interpreter
    by_family: dict[str, list[float]] = {}
    solved = 0
    t0 = time.perf_counter()
    for t in tasks:
        for _ in range(args.repeat):
            s = time.perf_counter()
            b, _ = env.grade(t, t.reference, ctx)
            by_family.setdefault(t.family, []).append(time.perf_counter() - s)
            solved += b.solved
    env_s = time.perf_counter() - t0
    sandbox.close()
    n = len(tasks) * args.repeat
    tmp_base = tempfile.mkdtemp(prefix="rf-bare-")
    os.chmod(tmp_base, 0o755)
    t0 = time.perf_counter()
    for t in tasks:
        for _ in range(args.repeat):
            bare(t, tmp_base)
    bare_s = time.perf_counter() - t0
    shutil.rmtree(tmp_base)
    print(f"{'family':<22}{'ms/episode':>11}")
    for f, v in by_family.items():
        print(f"{f:<22}{1000 * sum(v) / len(v):>11.0f}")
    print(f"ops env : {n} episodes in {env_s:.2f}s = {n / env_s:6.2f} episodes/s "
          f"({solved}/{n} references solved)")
    print(f"bare    : {n} runs     in {bare_s:.2f}s = {n / bare_s:6.2f} runs/s (bash, one run, "
          f"no sandbox, no probes)")
    print(f"ratio   : the environment is {env_s / bare_s:.1f}x the bare run's time per episode")
    return 0 if solved == n else 1


if __name__ == "__main__":
    sys.exit(main())
