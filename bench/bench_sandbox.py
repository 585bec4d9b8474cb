"""Sandbox latency and throughput, side by side with a bare subprocess.

    .venv/bin/python bench/bench_sandbox.py [--n 30] [--workers 2] [--no-docker]

Per-execution latency (p50, p95) of `python -c pass` and of a small test file for: a bare
subprocess (the baseline), the process backend with a fresh interpreter per execution, the process
backend's fork-server fast path (its default; `bench/bench_fork_server.py` has the fuller
comparison), a cold Docker container per execution, and the warm Docker pool; then executions per
second with parallel worker threads. The bare baseline and the process backends are measured
interleaved (same moments, same machine load), and the differences are printed as the targets
state them: process p50 within 30 ms of bare, warm Docker p50 under 100 ms.
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox.base import Limits  # noqa: E402
from bench.common import Bare, pct  # noqa: E402
from sandbox.process import ProcessSandbox  # noqa: E402

PASS = ("pass.py", "pass\n")
TESTFILE = ("test_small.py", """
def solve(xs):
    return sorted(xs)

for i in range(200):
    assert solve(list(range(i, 0, -1))) == list(range(1, i + 1))
print("ok")
""")
LIMITS = Limits(timeout_s=30)


def timed(sbx, prog) -> float:
    t = time.perf_counter()
    r = sbx.run({prog[0]: prog[1]}, ["python", prog[0]], LIMITS)
    if r is not None and r.status != "ok":
        raise RuntimeError(f"{sbx.name}: {r}")
    return time.perf_counter() - t


def measure(backends, prog, n) -> dict[str, list[float]]:
    """n rounds; each round runs every backend once, in turn (interleaved)."""
    out = {b.name: [] for b in backends}
    for b in backends:
        timed(b, prog)  # warm-up
    for _ in range(n):
        for b in backends:
            out[b.name].append(timed(b, prog))
    return out


def throughput(sbx, workers: int, total: int) -> float:
    with ThreadPoolExecutor(workers) as pool:
        t = time.perf_counter()
        list(pool.map(lambda _: timed(sbx, PASS), range(total)))
        return total / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30, help="executions per backend and program")
    ap.add_argument("--workers", type=int, default=2, help="parallel threads for throughput")
    ap.add_argument("--no-docker", action="store_true")
    args = ap.parse_args()

    bare, proc = Bare("bare subprocess"), ProcessSandbox(fork_server=False)
    proc.name = "process backend"
    fork = ProcessSandbox()
    fork.name = "process+fork server"
    if fork.fork_server is None:
        print("process fork server: unavailable on this host (see the log line above)")
    print(f"process backend protections: {', '.join(proc.protections)}"
          + (f"; MISSING: {proc.missing}" if proc.missing else ""))
    warm = cold = None
    if not args.no_docker:
        from sandbox.docker_container import engine_unavailable
        why = engine_unavailable()
        if why:
            print(f"docker: skipped ({why})")
        else:
            from sandbox.docker_backend import DockerSandbox
            cold = DockerSandbox(pool_size=0)
            cold.name = "docker cold start"
            warm = DockerSandbox(pool_size=args.workers, prewarm=LIMITS)
            warm.name = "docker warm pool"
    fast = [bare, proc] + ([fork] if fork.fork_server else []) + ([warm] if warm else [])
    results = {}
    for label, prog in (("python -c pass", PASS), ("small test file", TESTFILE)):
        results[label] = measure(fast, prog, args.n)
        if cold:
            results[label].update(measure([cold], prog, max(5, args.n // 5)))
    print(f"\nlatency per execution, ms (n={args.n}; docker cold n={max(5, args.n // 5)})")
    print(f"{'backend':<20}{'program':<18}{'p50':>8}{'p95':>8}{'p50 - bare p50':>16}")
    for label, res in results.items():
        base = pct(res[bare.name], 0.5)
        for name, xs in res.items():
            print(f"{name:<20}{label:<18}{pct(xs, .5):8.1f}{pct(xs, .95):8.1f}"
                  f"{pct(xs, .5) - base:+16.1f}")
    p = results["python -c pass"]
    gap = pct(p[proc.name], .5) - pct(p[bare.name], .5)
    print(f"\ntarget: process p50 within 30 ms of bare: {gap:+.1f} ms -> "
          f"{'MET' if gap <= 30 else 'MISSED'}")
    if warm:
        w = pct(p[warm.name], .5)
        print(f"target: warm docker p50 under 100 ms: {w:.1f} ms -> "
              f"{'MET' if w < 100 else 'MISSED'}")
    total = max(20, args.n)
    print(f"\nthroughput, executions/s of `python -c pass` ({total} executions)")
    for sbx in [bare, proc] + ([fork] if fork.fork_server else []) + ([warm] if warm else []):
        one = throughput(sbx, 1, total)
        many = throughput(sbx, args.workers, total)
        print(f"{sbx.name:<20} 1 worker {one:6.1f}/s   {args.workers} workers {many:6.1f}/s")
    for s in (warm, cold, fork):
        if s:
            s.close()


if __name__ == "__main__":
    main()
