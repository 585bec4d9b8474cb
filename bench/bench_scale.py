"""Benchmark: the rollout path's cost per rollout as an iteration grows (issue 39, item 3).

At each size (default 1k, 10k and 50k rollouts an iteration), in a fresh process per size, on a
loopback Dask `LocalCluster` of several worker processes (the run's own `dask_client`):

- **flow**: the execution half of one iteration through the loop's own code, in a Prefect
  flow: `flows.iteration.collect` (`generate_tasks`: the curriculum sampler draws the batch from
  the pool; the episodes, `flows.episodes.play`, whose steps go out as `run_rollouts` shards on
  Dask, one Prefect task per shard, with queue sampling; `score_rollouts`: rows, rewards,
  advantages; dynamic sampling's mask; `write_trajectories`: the Parquet store), then the
  iteration's rollout and execution metrics (`flows.stages`). Only the policy's turn is
  replaced (`Play.sample`, and `Play.play`'s tokenizer, which would load the saved policy's);
- **plain**: the same executions (the same (environment, state, action) steps) as one plain
  `Client.map` + `gather` on the same warm cluster, before the flow.

The candidates are trivial on purpose, so the sandbox is not what is measured: each task's
reference solution (a one-line function of the procedural families: it returns at once). With
`--candidate sandbox` (default) it is executed and graded by the kind's real tests in the real
process sandbox on its cheapest path (the fork server: a fork of a warm zygote per execution,
no interpreter start); with `--candidate instant` the io kind's step runs as usual on the
worker but its execution is answered at once (every test passed, no sandbox run), which leaves
the loop's own cost alone. The policy's turn is not run: the completions are the references,
tokenised as the byte-level policy would (`Client.map` would not sample either). Every group is
solved alike, so dynamic sampling would refill every group: it is off, one round.

Prints per size: CPU seconds per 1000 rollouts of the flow and of the plain map (this process,
which holds the flow and the LocalCluster's scheduler, and every process under it: workers,
sandboxes, the temporary Prefect API) and their ratio, the figure that holds on a shared
machine; the same in wall seconds, with the flow's rollout stage and the rest of its stages;
the driver's peak memory (flow and scheduler) during the plain map and during the flow, and
the largest worker's; the scheduler's tasks still held after the flow (0: nothing kept); the
store's write rate (rows/s and MB/s of the write stage, Prefect's call included). The cost per
rollout should stay flat across sizes.

    .venv/bin/python bench/bench_scale.py [--sizes 1000,10000,50000] [--workers 4]
        [--group 32] [--shard-size 64] [--candidate sandbox|instant] [--profile DIR]

`--profile DIR` writes a cProfile of each size's flow (the flow's own thread: task drawing,
the episodes' bookkeeping, score and write; the sample and step calls and the shards run in
threads it does not see) to DIR/flow-<size>.prof and prints its top functions, for comparing
1k with 10k.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flows.env import apply_defaults  # noqa: E402

apply_defaults()
os.environ.setdefault("DS_ACCELERATOR", "cpu")

from envs.io.env import FunctionsEnv  # noqa: E402
from rewards.reports import TestReport  # noqa: E402

# ~2,000 distinct training tasks with references: the pool's limit, so the group is large
# enough that 50k rollouts need no task twice (1563 tasks x 32)
FAMILIES = "[add,mul,affine,sum_plus,repeat,count,prefix,filter_gt]"


class InstantEnv(FunctionsEnv):
    """The io kind with its execution answered at once (`--candidate instant`): every test
    passed, no sandbox run; the grade, the reward and everything around the step are the
    kind's own. At module level: workers unpickle it from this module (their main)."""

    def verify(self, task, answer, sandbox, limits, per_test_timeout_s):
        return TestReport(("passed",) * len(task.tests), (), "ok", None)


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and every process under it (the Dask
    workers and nannies, their sandboxes, the temporary Prefect API), those already reaped
    included: the work done, whatever else shares the machine."""
    import psutil

    total = 0.0
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


class Peak:
    """Peak resident memory (MB) of this process and of its largest child (a Dask worker or
    its nanny), sampled every 0.1 s in a thread while in the `with` block."""

    def __init__(self) -> None:
        import psutil

        self.me = psutil.Process()
        self.own = self.child = 0.0
        self._stop = threading.Event()

    def _sample(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                self.own = max(self.own, self.me.memory_info().rss / 2**20)
                for c in self.me.children(recursive=True):
                    try:
                        self.child = max(self.child, c.memory_info().rss / 2**20)
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
            self._stop.wait(0.1)

    def __enter__(self) -> "Peak":
        self._t = threading.Thread(target=self._sample, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()


def one_size(n: int, workers: int, group: int, shard_size: int, profile: str | None,
             candidate: str) -> dict:
    """One size, in this process: plain map, then the flow; the figures as a dict."""
    from distributed import wait
    from prefect import flow

    from flows import iteration, stages
    from flows.config import load_config
    from flows.episode_exec import step_episode
    from flows.episodes import play
    from flows.rollouts import close_clients, dask_client
    from flows.sampler import play_options
    from storage.trajectories import live_files, read_trajectories
    from training.generate import Sample
    from training.tokenizer import ByteTokenizer

    out_dir = tempfile.mkdtemp(prefix="bench-scale-")
    tasks_needed = -(-n // group)
    cfg = load_config(None, [
        f"out_dir={out_dir}", "run_id=scale", f"tasks.families={FAMILIES}",
        "tasks.difficulties=[1,2,3]", "tasks.tasks_per_family=400",
        f"tasks.tasks_per_iteration={tasks_needed}", "tasks.dynamic_sampling=false",
        f"sampling.group_size={group}", f"cluster.n_workers={workers}",
        "cluster.threads_per_worker=1", f"cluster.shard_size={shard_size}"])
    tok = ByteTokenizer()
    c = cfg.cluster
    client = dask_client(c.address, c.n_workers, c.threads_per_worker)

    def reference_policy(turn, contexts, eps, max_new_tokens, k):
        """The task's reference as the policy's completion (the byte tokenizer's ids)."""
        outs = []
        for ctx, e in zip(contexts, eps):
            ids = tok.encode(e.task.reference, bos=False) + [tok.eos_token_id]
            outs.append(Sample(list(ctx), ids, [-0.1] * len(ids), e.task.reference, True))
        return outs, 0.0

    @flow(name="bench-scale-warm-up")
    def warm_up() -> int:
        return 1

    warm_up()  # the temporary Prefect API's start is in neither figure
    opts = dict(result_storage=Path(cfg.run_dir).resolve() / ".prefect-results")
    ledger = stages.ledger_frame(cfg.run_dir, 0)
    tasks = stages.pick_tasks(cfg, 0, 0, tasks_needed, ledger, [])  # what the flow will draw
    if len(tasks) < tasks_needed:
        raise SystemExit(f"the pool holds {len(tasks)} training tasks, {tasks_needed} needed "
                         f"for {n} rollouts at group {group}: raise --group")
    run_env = stages.env_of(cfg)

    def env_of(t):  # the run's environment of the task, or the same kind answering at once
        env = run_env(t)
        if candidate == "instant":
            if not isinstance(env, FunctionsEnv):
                raise SystemExit(f"--candidate instant needs io tasks, got kind {env.name!r}")
            return InstantEnv(env.config)
        return env

    items = [(env_of(t), env_of(t).reset(t)[0], t.reference) for t in tasks for _ in range(group)]
    wait(client.map(step_episode, *zip(*items[:4 * workers]), sandbox_cfg=cfg.sandbox,
                    reward_cfg=cfg.rewards, pure=False))  # every worker's sandbox started

    with Peak() as plain_mem:
        c0 = cpu_seconds()
        t0 = time.perf_counter()
        plain = client.gather(client.map(step_episode, *zip(*items), sandbox_cfg=cfg.sandbox,
                                         reward_cfg=cfg.rewards, pure=False))
        plain_s = time.perf_counter() - t0
        plain_cpu = cpu_seconds() - c0
    plain_solved = sum(bool(s.info["grade"].solved) for s in plain)
    del plain

    class ReferencePlay(iteration.Play):
        """The loop's round of episodes with the references standing in for the policy."""

        def sample(self, turn, contexts, eps, max_new_tokens, k):
            return reference_policy(turn, contexts, eps, max_new_tokens, k)

        def play(self, tasks, group):  # the byte tokenizer the saved policy would load
            return play(tasks, [env_of(t) for t in tasks], group, 10**6, tok,
                        self.cfg.sampling.max_new_tokens, self.sample, self.step,
                        **play_options(self.cfg))

    # `collect` builds its rounds from the module's `Play`: this process only, a bench
    iteration.Play = ReferencePlay

    @flow(name="bench-scale-iteration")
    def execution_half() -> dict:
        col = iteration.collect(cfg, 0, opts, client)  # draw, episodes, score, write
        t = time.perf_counter()
        rows = col.rows
        metrics = {**stages.rollout_metrics(rows), **stages.execution_metrics(
            col.stepped, col.timings["time/run_rollouts_s"], workers, col.queue)}
        times = {k[5:-2]: v for k, v in col.timings.items()}
        times["metrics"] = time.perf_counter() - t
        return {"times": times, "rows": len(rows), "queue_samples": len(col.queue),
                "solved": sum(bool(r.solved) for r in rows),
                "per_s": metrics["rollout/per_s"]}

    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
    with Peak() as flow_mem:
        c0 = cpu_seconds()
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        info = execution_half()
        if prof:
            prof.disable()
        flow_s = time.perf_counter() - t0
        flow_cpu = cpu_seconds() - c0
    held = client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))
    files = live_files(cfg.run_dir, 0)
    nbytes = sum(os.path.getsize(f) for f in files)
    stored = len(read_trajectories(cfg.run_dir))
    close_clients()
    if prof:
        import io
        import pstats

        Path(profile).mkdir(parents=True, exist_ok=True)
        prof.dump_stats(f"{profile}/flow-{n}.prof")
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(15)
        print(s.getvalue(), file=sys.stderr)
    shutil.rmtree(out_dir, ignore_errors=True)
    w = info["times"]["write_trajectories"]
    return {"n": len(items), "tasks": len(tasks), "plain_s": plain_s, "flow_s": flow_s,
            "plain_cpu": plain_cpu, "flow_cpu": flow_cpu,
            "times": info["times"], "rows": info["rows"], "stored": stored,
            "solved_flow": info["solved"], "solved_plain": plain_solved,
            "files": len(files), "bytes": nbytes,
            "write_s": w, "queue_samples": info["queue_samples"], "scheduler_tasks_held": held,
            "driver_peak_mb_plain": plain_mem.own, "driver_peak_mb_flow": flow_mem.own,
            "worker_peak_mb": max(plain_mem.child, flow_mem.child),
            "load": os.getloadavg()[0]}


def table(results: list[dict], workers: int, group: int, shard_size: int,
          candidate: str) -> str:
    what = ("references run by the fork-server sandbox" if candidate == "sandbox" else
            "references, execution answered at once (no sandbox run)")
    lines = [f"rollouts per iteration on a LocalCluster of {workers} worker processes x 1 "
             f"thread, group {group}, shard size {shard_size}; candidates: {what}; load "
             f"average {os.getloadavg()[0]:.1f} at the end", ""]
    head = ("| rollouts | flow CPU s/1k | plain CPU s/1k | CPU flow / plain | flow s/1k | "
            "plain Client.map s/1k | flow / plain | rollout stage s/1k | rest of the flow s/1k | "
            "driver peak MB (plain / flow) | worker peak MB | "
            "scheduler tasks held after | store rows/s | store MB/s |")
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        k = r["n"] / 1000
        t = r["times"]
        rest = r["flow_s"] - t["run_rollouts"]
        lines.append(
            f"| {r['n']} | {r['flow_cpu'] / k:.2f} | {r['plain_cpu'] / k:.2f} | "
            f"{r['flow_cpu'] / r['plain_cpu']:.2f}x | {r['flow_s'] / k:.2f} | "
            f"{r['plain_s'] / k:.2f} | "
            f"{r['flow_s'] / r['plain_s']:.2f}x | {t['run_rollouts'] / k:.2f} | {rest / k:.2f} | "
            f"{r['driver_peak_mb_plain']:.0f} / {r['driver_peak_mb_flow']:.0f} | "
            f"{r['worker_peak_mb']:.0f} | {r['scheduler_tasks_held']} | "
            f"{r['rows'] / r['write_s']:.0f} | {r['bytes'] / 2**20 / r['write_s']:.2f} |")
    lines.append("")
    for r in results:
        t = r["times"]
        lines.append(f"{r['n']}: {r['tasks']} tasks; stages s: " + ", ".join(
            f"{k} {v:.2f}" for k, v in t.items()) + f"; rows {r['rows']}, stored {r['stored']}, "
            f"solved {r['solved_flow']} (plain {r['solved_plain']}); {r['files']} files, "
            f"{r['bytes'] / 2**20:.1f} MB; {r['queue_samples']} queue samples; load average "
            f"{r['load']:.1f} at its end")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,50000",
                    help="rollouts per iteration, comma-separated (default 1000,10000,50000)")
    ap.add_argument("--workers", type=int, default=4, help="Dask worker processes (default 4)")
    ap.add_argument("--group", type=int, default=32,
                    help="episodes per task (default 32: the pool's ~2,000 tasks cover 50k)")
    ap.add_argument("--shard-size", type=int, default=64, help="rollouts per Prefect task")
    ap.add_argument("--candidate", choices=("sandbox", "instant"), default="sandbox",
                    help="sandbox (default): each reference run by the process sandbox's fork "
                    "server; instant: the io kind's step with its execution answered at once "
                    "(no sandbox run), the loop's own cost alone")
    ap.add_argument("--profile", metavar="DIR", help="cProfile each size's flow into DIR")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: this size only
    args = ap.parse_args()
    for name in ("workers", "group", "shard_size"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.one is not None:
        res = one_size(args.one, args.workers, args.group, args.shard_size, args.profile,
                       args.candidate)
        print("RESULT " + json.dumps(res))
        return 0
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--sizes: expected comma-separated integers, got {args.sizes!r}")
    if not sizes or min(sizes) < 1:
        ap.error(f"--sizes: expected positive sizes, got {args.sizes!r}")
    results = []
    for n in sizes:  # a process per size: its peak memory is its own, nothing carried over
        cmd = [sys.executable, __file__, "--one", str(n), "--workers", str(args.workers),
               "--group", str(args.group), "--shard-size", str(args.shard_size),
               "--candidate", args.candidate]
        if args.profile:
            cmd += ["--profile", args.profile]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        found = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if p.returncode or not found:
            print(p.stdout[-3000:], file=sys.stderr)
            print(f"size {n}: the child failed (exit {p.returncode})", file=sys.stderr)
            return 1
        results.append(json.loads(found[-1][len("RESULT "):]))
        print(found[-1], file=sys.stderr)  # the figures of a size, kept if a later one fails
        print(f"size {n} done: flow {results[-1]['flow_s']:.1f} s, plain "
              f"{results[-1]['plain_s']:.1f} s", file=sys.stderr)
    print(table(results, args.workers, args.group, args.shard_size, args.candidate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
