"""Where one rollforge iteration of bench/bench_trl.py's workload spends the time that is not
sampling, rollouts or the update's math: a `rollforge run` of the same config, in this process,
with cProfile on from iteration 1 on (iteration 0 pays the cluster's and the fork server's
warm-up) over `run_iteration`, which ends with the UI artifacts (`publish_iteration`).
Prints seconds per iteration of named items (cumulative: an item's callees are in it), and
writes the whole profile to WORK/profile.pstats and its top functions to WORK/profile.txt.

    .venv/bin/python bench/trl_profile.py --work runs/bench-trl --iterations 4

cProfile sees the flow's thread only: rollout shards run in Prefect's worker threads and on the
Dask workers, so the flow thread's wait for them is what shows as `rollouts (waiting)`. Its own
overhead inflates Python-heavy items a little (each call costs a few hundred ns more).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (label, module path suffix, function name): the items looked up in the profile. Work first,
# then what is not work. A function may appear under several callers; its cumulative time is
# counted once (cProfile's cumulative time is per function, recursion-safe).
ITEMS = [
    ("work: sampling (sample_actions)", "training/episodes.py", "sample_actions"),
    ("work: rollouts (flow thread waiting on shards)", "prefect/futures.py", "wait"),
    ("work: update math (forward, loss)", "training/batch.py", "token_logprobs"),
    ("work: update math (engine.backward)", "deepspeed/runtime/engine.py", "backward"),
    ("work: update math (engine.step)", "deepspeed/runtime/engine.py", "step"),
    ("policy load from disk for the update (load_policy)", "training/trainer.py", "grpo_update:load"),
    ("policy load for sampling (policy_for_sampling)", "training/trainer.py", "policy_for_sampling"),
    ("DeepSpeed engine set-up (make_engine)", "training/engine.py", "make_engine"),
    ("optimizer state restore (engine load_state)", "training/engine.py", "load_state"),
    ("checkpoint save (_publish: model + engine state)", "training/trainer.py", "_publish"),
    ("  of it: HF model save (save_policy)", "training/policy.py", "save_policy"),
    ("  of it: engine state save (save_state)", "training/engine.py", "save_state"),
    ("Prefect result persistence (ResultStore.persist_result_record)", "prefect/results.py",
     "persist_result_record"),
    ("Prefect: result records built (create_result_record)", "prefect/results.py",
     "create_result_record"),
    ("Prefect task engine around direct stage calls (Task.__call__ less bodies)",
     "prefect/tasks.py", "__call__:less_bodies"),
    ("stage cache keys (inputs_digest)", "flows/stages.py", "inputs_digest"),
    ("stage journal lines (journal)", "flows/stages.py", "journal"),
    ("task generation (pick_tasks)", "flows/stages.py", "pick_tasks"),
    ("ledger (ledger_frame)", "flows/stages.py", "ledger_frame"),
    ("score rows (episode_rows)", "flows/scoring.py", "episode_rows"),
    ("trajectory write (write_iteration)", "storage/trajectories.py", "write_iteration"),
    ("checkpoint stage (metrics, registry, prune)", "flows/pipeline.py", "checkpoint"),
    ("UI artifacts between iterations (publish_iteration)", "flows/artifacts.py",
     "publish_iteration"),
    ("  of it: reward curve PNG (matplotlib)", "flows/artifacts.py", "reward_curve_png"),
]


def _find(stats: pstats.Stats, suffix: str, name: str) -> tuple[float, int]:
    """Cumulative seconds and primitive calls of the function `name` in a file ending `suffix`."""
    best = (0.0, 0)
    for (file, _line, fn), (cc, _nc, _tt, ct, _callers) in stats.stats.items():
        if fn == name and file.replace(os.sep, "/").endswith(suffix) and ct > best[0]:
            best = (ct, cc)
    return best


def _callee_of(stats: pstats.Stats, caller: tuple[str, str], callee: tuple[str, str]) -> float:
    """Cumulative seconds of `callee` (suffix, name) spent when called from `caller`."""
    total = 0.0
    for (file, _line, fn), (_cc, _nc, _tt, _ct, callers) in stats.stats.items():
        if fn != callee[1] or not file.endswith(callee[0]):
            continue
        for (cfile, _cline, cfn), val in callers.items():
            if cfn == caller[1] and cfile.endswith(caller[0]):
                total += val[3]
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench-trl"))
    ap.add_argument("--iterations", type=int, default=4, help="of which 1.. are profiled")
    ap.add_argument("--top", type=int, default=45, help="functions in profile.txt")
    args = ap.parse_args()
    work = Path(args.work).resolve()
    if args.iterations < 2:
        sys.exit("--iterations must be >= 2 (iteration 0 is not profiled)")
    from flows.env import apply_defaults

    apply_defaults()
    import flows.iteration as flow_mod
    from flows.config import load_config

    task_file = work / "tasks.jsonl"
    run_id = f"profile-{int(time.time())}"
    import json

    cfg = load_config(ROOT / "bench" / "trl_workload.yaml", [
        "tasks.sources=" + json.dumps([{"file": str(task_file)}]),
        f"policy.model_path={work / 'warm'}", f"out_dir={work / 'runs'}", f"run_id={run_id}",
        f"iterations={args.iterations}"])
    prof = cProfile.Profile()
    seconds = {"run_iteration": 0.0}
    run_iteration = flow_mod.run_iteration

    def profiled(name, fn):
        def wrapper(cfg_, it, *a, **kw):
            if it < 1:
                return fn(cfg_, it, *a, **kw)
            t = time.perf_counter()
            prof.enable()
            try:
                return fn(cfg_, it, *a, **kw)
            finally:
                prof.disable()
                seconds[name] += time.perf_counter() - t
        return wrapper

    flow_mod.run_iteration = profiled("run_iteration", run_iteration)
    flow_mod.train_flow(cfg.model_dump(mode="json"))
    n = args.iterations - 1
    prof.dump_stats(str(work / "profile.pstats"))
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("cumulative").print_stats(args.top)
    (work / "profile.txt").write_text(buf.getvalue())

    total = seconds["run_iteration"] / n
    print(f"profile of {n} rollforge iterations (1..{n}) of bench/trl_workload.yaml, run "
          f"{cfg.run_dir}; seconds per iteration, cumulative (an item holds its callees)")
    print(f"  {'iteration, profiled (run_iteration)':<66}{total:8.3f}")
    for label, suffix, name in ITEMS:
        if name == "__call__:less_bodies":
            ct = _find(stats, suffix, "__call__")[0] - _find(stats, "flows/staging.py",
                                                              "journaled")[0]
            calls = None
        elif name == "grpo_update:load":
            ct = _callee_of(stats, ("training/trainer.py", "grpo_update"),
                            ("training/policy.py", "load_policy"))
            calls = None
        else:
            ct, calls = _find(stats, suffix, name)
        if ct == 0.0 and calls == 0:
            print(f"  {label:<66}{'(not called)':>8}")
            continue
        share = f"{100 * ct / n / total:5.1f}%" if total else ""
        print(f"  {label:<66}{ct / n:8.3f}  {share}")
    print(f"(whole profile: {work / 'profile.pstats'}; top {args.top} by cumulative time: "
          f"{work / 'profile.txt'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
