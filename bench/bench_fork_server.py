"""The fork-server fast path against a fresh interpreter, per execution, in one interleaved run.

    .venv/bin/python bench/bench_fork_server.py [--n 60]

For two programs, the `python -c pass` equivalent (`python main.py` with `pass`) and one
HumanEval problem's tests (exactly the files and command `rollforge`'s grader sends the sandbox
for HumanEval/0's canonical solution), the latency of one execution, start to result, for:

- a bare fresh interpreter (`subprocess.run`, no isolation at all): the baseline;
- the process backend without the fast path (`fork_server=False`: bubblewrap, cgroups, a fresh
  interpreter per execution);
- the process backend with it (a fork of the warm zygote per execution).

Each round runs the three once, in turn, so that all three see the same machine load (other work
shares this machine). Prints p50 and p95 and the ratios, and the target: fast path p50 at most
5 ms and below the bare interpreter's.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox.base import ExecResult, Limits  # noqa: E402
from bench.common import Bare, pct  # noqa: E402
from sandbox.process import ProcessSandbox  # noqa: E402

LIMITS = Limits(timeout_s=30)


class Recorder:
    """Stands in for a sandbox once, to capture what the grader sends it."""

    name = "recorder"

    def run(self, files, argv, limits=LIMITS, stdin=None, collect=()):
        self.call = (dict(files), list(argv), limits)
        return ExecResult("infra_error", None, "", "", 0.0, self.name, error="recording")


def humaneval_call():
    """The files and argv `rollforge` sends the sandbox to grade HumanEval/0's canonical
    solution (a batch of one, as score() does)."""
    from envs.humaneval.grading import run_humaneval_tests
    from envs.humaneval.problems import humaneval_by_id

    task = humaneval_by_id()["HumanEval/0"]
    rec = Recorder()
    run_humaneval_tests(task, task.reference, rec, Limits(timeout_s=10.0), 3.0)
    files, argv, limits = rec.call
    return files, argv, limits


def measure(backends, files, argv, limits, n, check) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {b.name: [] for b in backends}
    for b in backends:  # warm-up: the zygote starts here, not in the timed runs
        check(b, b.run(files, argv, limits))
    for _ in range(n):
        for b in backends:
            t = time.perf_counter()
            r = b.run(files, argv, limits)
            out[b.name].append(time.perf_counter() - t)
            check(b, r)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=60, help="rounds (each runs every backend once)")
    args = ap.parse_args()

    bare = Bare()
    plain = ProcessSandbox(fork_server=False)
    plain.name = "process, fresh interpreter"
    fast = ProcessSandbox(fork_server=True)
    fast.name = "process, fork server"
    if fast.fork_server is None:
        print("the fork server cannot run on this host (see the log line above)")
        return 1
    print(f"process backend protections: {', '.join(fast.protections)}"
          + (f"; MISSING: {fast.missing}" if fast.missing else ""))
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other work shares "
          "this machine; every round runs the three in turn)")

    def check_ok(b, r):
        if r.status != "ok":
            raise RuntimeError(f"{b.name}: {r}")

    def check_he(b, r):
        check_ok(b, r)
        if '"end": "ok"' not in r.stdout or "batch_done" not in r.stdout:
            raise RuntimeError(f"{b.name}: the HumanEval harness did not finish: {r}")

    he_files, he_argv, he_limits = humaneval_call()
    programs = (("python -c pass", {"main.py": "pass\n"}, ["python", "main.py"], LIMITS,
                 check_ok),
                ("HumanEval/0 tests", he_files, he_argv, he_limits, check_he))
    backends = [bare, plain, fast]
    results = {}
    for label, files, argv, limits, check in programs:
        results[label] = measure(backends, files, argv, limits, args.n, check)
    fast.close()

    print(f"\nlatency per execution, ms (n={args.n} each, interleaved)")
    print(f"{'program':<20}{'backend':<30}{'p50':>8}{'p95':>8}{'p50 vs fork server':>20}")
    for label, res in results.items():
        f50 = pct(res[fast.name], .5)
        for name, xs in res.items():
            print(f"{label:<20}{name:<30}{pct(xs, .5):8.2f}{pct(xs, .95):8.2f}"
                  f"{pct(xs, .5) / f50:19.1f}x")
    ok = True
    for label, res in results.items():
        f50, b50 = pct(res[fast.name], .5), pct(res[bare.name], .5)
        p50 = pct(res[plain.name], .5)
        print(f"{label}: fork server {f50:.2f} ms p50 = {p50 / f50:.1f}x faster than the process "
              f"backend without it, {b50 / f50:.1f}x faster than a bare interpreter")
    p = results["python -c pass"]
    f50, b50 = pct(p[fast.name], .5), pct(p[bare.name], .5)
    met = f50 <= 5.0 and f50 < b50
    ok = ok and met
    print(f"target: fast path p50 of `pass` at most 5 ms and below the bare interpreter's: "
          f"{f50:.2f} ms vs bare {b50:.2f} ms -> {'MET' if met else 'MISSED'} (load average "
          f"{os.getloadavg()[0]:.1f} at the end: above ~1, other work inflates every figure)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
