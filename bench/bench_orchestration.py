"""Benchmark: orchestration overhead of the flow. The execution half of one iteration — 1,000
trivial rollouts (the `add` family's reference solutions, run and tested in the process
sandbox) — through the flow's own path (rollout shards as Prefect tasks with explicit cache
keys and persisted results, queue sampling, the score stage building trajectory rows, the
write stage writing Parquet), against the same executions as one plain Dask `Client.map`, on
the same warm LocalCluster, in one run (plain before and after the flow, averaged). Prints
both times and the ratio (target <= 1.3x).

    .venv/bin/python bench/bench_orchestration.py [--rollouts N] [--workers W] [--shard-size S]

Not measured: the temporary Prefect API's start (a trivial flow runs first to start it) and
the policy's work (sampling, update), which `Client.map` would not do either.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flows.env import apply_defaults  # noqa: E402

apply_defaults()
os.environ.setdefault("DS_ACCELERATOR", "cpu")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rollouts", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shard-size", type=int, default=64)
    ap.add_argument("--keep", action="store_true", help="keep the temporary store afterwards")
    args = ap.parse_args()

    from distributed import wait
    from prefect import flow

    from flows import iteration
    from flows.config import load_config
    from envs.registry import env_for_task
    from flows.episode_exec import step_episode
    from flows.episodes import play
    from flows.rollouts import close_clients, dask_client
    from storage.trajectories import read_trajectories
    from envs.io.procedural import generate_suite
    from training.generate import Sample
    from training.tokenizer import ByteTokenizer

    out = tempfile.mkdtemp(prefix="bench-orch-")
    cfg = load_config(None, [f"out_dir={out}", "run_id=bench", "tasks.families=[add]",
                             f"cluster.n_workers={args.workers}",
                             f"cluster.shard_size={args.shard_size}", "sampling.group_size=8"])
    G = cfg.sampling.group_size
    tasks = [t for t in generate_suite(["add"], [1], 200) if t.reference]
    tok = ByteTokenizer()
    batch = [tasks[i % len(tasks)] for i in range(-(-args.rollouts // G))]  # tasks repeat
    samples = [Sample(tok.encode(t.prompt), tok.encode(t.reference, bos=False), [-0.1] * len(
        tok.encode(t.reference, bos=False)), t.reference, True) for t in batch for _ in range(G)]
    env = env_for_task(batch[0])
    items = [(batch[i // G], s.text) for i, s in enumerate(samples)]  # whole groups
    c = cfg.cluster
    client = dask_client(c.address, c.n_workers, c.threads_per_worker)
    print(f"{len(items)} rollouts ({len(batch)} add tasks x G={G}, reference solutions) on "
          f"{args.workers} workers x 1 thread, shard size {args.shard_size}; store {out}")

    @flow(name="bench-warm-up")
    def warm_up() -> int:
        return 1

    warm_up()  # starts the temporary Prefect API: not part of either figure
    warm = client.map(step_episode, [env] * 8, [t for t, _ in items[:8]], [x for _, x in items[:8]],
                      sandbox_cfg=cfg.sandbox, reward_cfg=cfg.rewards, pure=False)
    wait(warm)  # every worker's sandbox is started before either measurement

    def plain_map() -> tuple[list, float]:
        t0 = time.perf_counter()
        futures = client.map(step_episode, [env] * len(items), [t for t, _ in items],
                             [x for _, x in items], sandbox_cfg=cfg.sandbox,
                             reward_cfg=cfg.rewards, pure=False)
        out = client.gather(futures)
        return out, time.perf_counter() - t0

    plain, plain_before_s = plain_map()

    @flow(name="bench-iteration-execution")
    def execution_half() -> dict:
        from prefect import get_run_logger

        opts = dict(result_storage=Path(cfg.run_dir).resolve() / ".prefect-results")
        stage = iteration.Play(cfg, 0, 0, 0, False, opts, client)
        given = iter(samples)  # the fixed completions stand in for the policy's turn

        def sample_fn(turn, contexts, eps, max_new_tokens, k):
            return [next(given) for _ in contexts], 0.0

        eps = play(batch, [env] * len(batch), G, 10 ** 6, tok, 40, sample_fn, stage.step)
        rollouts_s = stage.times["run_rollouts"]
        rows = iteration.score_rollouts.with_options(**opts)(
            cfg=cfg, iteration=0, version=0, round_=0, episodes=eps, group_offset=0)
        iteration.write_trajectories.with_options(**opts)(cfg=cfg, iteration=0, version=0,
                                                          rows=rows)
        get_run_logger().info(f"{len(rows)} rows written")
        return {"rollouts_s": rollouts_s, "rows": len(rows), "queue_samples": len(stage.queue),
                "solved": sum(bool(e.grade and e.grade.solved) for e in eps)}

    t0 = time.perf_counter()
    info = execution_half()
    flow_s = time.perf_counter() - t0
    stored = len(read_trajectories(cfg.run_dir))
    # Plain again after the flow: the baseline is the mean of the runs before and after, so
    # load that drifts during the run (a shared machine) biases neither side.
    _, plain_after_s = plain_map()
    plain_s = (plain_before_s + plain_after_s) / 2
    close_clients()

    solved_plain = sum(e.breakdown.solved for e in plain)
    print(f"plain Client.map + gather:              {plain_s:7.2f} s  ({len(plain)} rollouts, "
          f"{solved_plain} solved, {len(plain) / plain_s:.0f} rollouts/s; mean of "
          f"{plain_before_s:.2f} s before and {plain_after_s:.2f} s after the flow)")
    print(f"flow (shards + score + write Parquet):  {flow_s:7.2f} s  ({info['rows']} rows, "
          f"{info['solved']} solved, {stored} stored, {info['queue_samples']} queue samples)")
    print(f"  of which the rollout stage (shards):  {info['rollouts_s']:7.2f} s")
    print(f"ratio flow / plain:                     {flow_s / plain_s:7.2f}x   (target <= 1.30x)")
    print(f"ratio rollout stage / plain:            {info['rollouts_s'] / plain_s:7.2f}x")
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
