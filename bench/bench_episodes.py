"""Does a second turn help? Held-out pass rate on the edge-case families at max_turns=1 against
max_turns=3, for one policy, through the real environment, Dask and the hidden-test grader.

    .venv/bin/python bench/bench_episodes.py                      # warm-started tiny policy
    .venv/bin/python bench/bench_episodes.py --policy scripted    # the scripted reference

`--policy sft` (default) warm-starts the tiny policy of configs/episodes.yaml on its action-
format demonstrations (the run's own SFT stage; reused from `--out` when already there) and
plays greedy episodes. `--policy scripted` is NOT a model: it writes the family's naive first
attempt and runs the visible tests; after an observation with a FAIL it writes the task's
reference and submits, otherwise it submits. It shows what the environment lets a policy that
reads the observation gain.

`--compare-turns` measures instead how episodes take turns (`sampling.turns`, flows/episodes.py
`play`): the same episodes (held-out edge tasks x `--group`, `--turns` max turns, sampled at
the config's temperature through the run's sampler: `--set sampling.engine=vllm` for the
engine) played turn-synchronously and per episode, one after the other in one run (`--rounds`
alternations), wall seconds and episodes/s side by side and as a ratio. `--step-delay-s M`
adds to every step a delay drawn from an exponential of mean M seconds, fixed by the step's
action and turn (a stand-in for tools that take long and unequal times; the steps themselves
run for real on Dask), so that the modes differ by what they do with unequal steps.

    .venv/bin/python bench/bench_episodes.py --compare-turns --out runs/bench-turns --turns 3 \
        --group 4 --tasks 8 --rounds 4 --set policy.n_head=3 --set sft.steps=20 \
        --set sampling.engine=vllm --step-delay-s 2

(vLLM's CPU attention needs heads of 32 and up: `policy.n_head=3` of configs/episodes.yaml's
96 wide; docs/benchmarks.md has the figures.)
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/episodes.yaml")
    ap.add_argument("--out", default="runs/bench-episodes", help="store root of the warm start")
    ap.add_argument("--policy", choices=["sft", "scripted"], default="sft")
    ap.add_argument("--turns", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--set", action="append", default=[], help="config override key=value")
    ap.add_argument("--compare-turns", action="store_true",
                    help="synchronous against per-episode turns (see above)")
    ap.add_argument("--group", type=int, default=4, help="--compare-turns: episodes per task")
    ap.add_argument("--tasks", type=int, default=0, help="--compare-turns: at most this many "
                    "held-out tasks (0: all)")
    ap.add_argument("--rounds", type=int, default=1, help="--compare-turns: alternations")
    ap.add_argument("--step-delay-s", type=float, default=0.0,
                    help="--compare-turns: mean of the exponential delay added to each step")
    args = ap.parse_args()
    if args.compare_turns and args.policy == "scripted":
        ap.error("--compare-turns samples from the policy (--policy sft)")
    if args.group < 1 or args.rounds < 1 or args.step_delay_s < 0 or args.tasks < 0:
        ap.error("--group and --rounds take a count >= 1, --tasks >= 0, --step-delay-s >= 0")

    from envs.io.families.edges import EDGES  # noqa: PLC0415
    from envs.io.procedural import first_attempts  # noqa: PLC0415
    from envs.registry import make_env  # noqa: PLC0415
    from flows.config import load_config  # noqa: PLC0415
    from flows.episode_exec import step_deadline_s, step_many  # noqa: PLC0415
    from flows.episodes import play, solved  # noqa: PLC0415
    from flows.scoring import episode_metrics  # noqa: PLC0415
    from flows.scripted import scripted_policy  # noqa: PLC0415
    from flows.iteration import sft_stage  # noqa: PLC0415
    from flows.rollouts import close_clients, dask_client, total_threads  # noqa: PLC0415
    from flows.stages import heldout_tasks  # noqa: PLC0415
    from training import checkpoints  # noqa: PLC0415
    from training.episodes import sample_actions  # noqa: PLC0415
    from training.tokenizer import ByteTokenizer  # noqa: PLC0415
    from training.trainer import policy_for_sampling  # noqa: PLC0415

    cfg = load_config(args.config, [f"out_dir={args.out}", *args.set])
    edge_names = {f.name for f in EDGES}
    tasks = [t for t in heldout_tasks(cfg) if t.family in edge_names]
    c = cfg.cluster
    client = dask_client(c.address, c.n_workers, c.threads_per_worker)
    try:
        sft_s = 0.0
        if args.policy == "sft":
            if not checkpoints.exists(cfg.run_dir, 0):
                t0 = time.perf_counter()
                info = sft_stage.fn(cfg, 0)
                sft_s = time.perf_counter() - t0
                print(f"warm start: {info.get('sft/examples')} demonstrations "
                      f"({info.get('sft/demos_multi_turn')} multi-turn), {info.get('sft/steps')} "
                      f"steps in {info.get('sft/seconds', 0):.0f}s, final loss {info.get('sft/final_loss'):.4f}; {sft_s:.0f}s in all")
            else:
                print(f"warm start: reusing {checkpoints.checkpoint_dir(cfg.run_dir, 0)}")
            model = policy_for_sampling(cfg.run_dir, 0)
            from training.policy import tokenizer_of  # noqa: PLC0415
            tok = tokenizer_of(model)
        else:
            tok = ByteTokenizer()
            tc = cfg.tasks
            naive = first_attempts(tc.families, tc.difficulties, tc.tasks_per_family, tc.seed)
        if args.compare_turns:
            return compare_turns(cfg, tasks[:args.tasks or None], tok, client, args)
        results, episodes_by_turns = {}, {}
        for m in args.turns:
            def step_fn(turn, items):
                return step_many(client, items, cfg.sandbox, cfg.rewards,
                                 timeout_s=step_deadline_s(items, cfg.sandbox,
                                                           total_threads(client)))
            if args.policy == "sft":
                def sample_fn(turn, contexts, _episodes, max_new_tokens, _k):
                    t = time.perf_counter()
                    out = sample_actions(model, contexts, max_new_tokens,
                                         greedy=True, batch_size=cfg.sampling.batch_size)
                    return out, time.perf_counter() - t
            else:
                sample_fn = scripted_policy(naive, tok)
            env = make_env("agent", {**cfg.episodes.model_dump(mode="json"), "max_turns": m})
            t0 = time.perf_counter()
            eps = play(tasks, [env] * len(tasks), 1, cfg.policy.max_len, tok,
                       cfg.sampling.max_new_tokens, sample_fn, step_fn)
            results[m] = (episode_metrics(eps), time.perf_counter() - t0)
            episodes_by_turns[m] = eps
    finally:
        close_clients()
    label = ("tiny policy warm-started on the demonstrations (greedy)" if args.policy == "sft"
             else "SCRIPTED policy (not a model: naive attempt, reference after a FAIL)")
    print(f"\nheld-out edge tasks: {len(tasks)} ({', '.join(sorted(edge_names))}); policy: {label}")
    print(f"{'max_turns':>9}  {'pass rate':>9}  {'mean turns':>10}  {'submitted':>9}  "
          f"{'policy tok':>10}  {'env tok':>7}  {'seconds':>7}")
    for m, (r, s) in results.items():
        print(f"{m:>9}  {r['episode/pass_rate']:>9.3f}  {r['episode/turns_mean']:>10.2f}  "
              f"{r['episode/end_submit']:>9.2f}  {r['episode/policy_tokens_mean']:>10.1f}  "
              f"{r['episode/env_tokens_mean']:>7.1f}  {s:>7.1f}")
    for m, eps in episodes_by_turns.items():
        fams = sorted({e.task.family for e in eps})
        print(f"max_turns={m} pass rate by family: " + ", ".join(
            f"{f} {np.mean([bool(solved(e)) for e in eps if e.task.family == f]):.2f} "
            f"({sum(e.task.family == f for e in eps)})" for f in fams))
        if m > 1:  # does the second turn depend on what the first observation said?
            after = {"FAIL": [], "no FAIL": []}
            for e in eps:
                if len(e.actions) >= 2 and e.observations:
                    key = "FAIL" if "FAIL" in e.observations[0] else "no FAIL"
                    after[key].append("<write" in e.actions[1])
            print(f"max_turns={m} turn 2 rewrites solution.py: after a FAIL "
                  f"{_share(after['FAIL'])}, after an observation without FAIL "
                  f"{_share(after['no FAIL'])}")
    if len(results) >= 2:
        lo, hi = min(results), max(results)
        print(f"second-turn gain: pass@{hi} turns - pass@{lo} turn = "
              f"{results[hi][0]['episode/pass_rate'] - results[lo][0]['episode/pass_rate']:+.3f}")
    return 0


def compare_turns(cfg, tasks, tok, client, args) -> int:
    """The same episodes under synchronous and per-episode turns (module docstring)."""
    import hashlib  # noqa: PLC0415
    import math  # noqa: PLC0415
    import threading  # noqa: PLC0415

    from envs.registry import make_env  # noqa: PLC0415
    from flows.episode_exec import step_deadline_s, step_many  # noqa: PLC0415
    from flows.episodes import play  # noqa: PLC0415
    from flows.iteration import sample_completions  # noqa: PLC0415
    from flows.rollouts import total_threads  # noqa: PLC0415
    from flows.sampler import close_engines, play_options  # noqa: PLC0415

    m = max(args.turns)
    env = make_env("agent", {**cfg.episodes.model_dump(mode="json"), "max_turns": m})
    concurrent = play_options(cfg)["concurrent"]

    def delay(turn, action) -> float:
        u = int(hashlib.sha256(f"{turn}:{action}".encode()).hexdigest()[:12], 16) / 16 ** 12
        return -args.step_delay_s * math.log(1 - u)

    def run(turns: str, rnd: int):
        calls, lock = [], threading.Lock()

        def sample_fn(turn, contexts, _episodes, max_new_tokens, k):
            with lock:
                calls.append(len(contexts))
            return sample_completions.fn(cfg, 0, 0, f"bench-{turns}-{rnd}", turn, k, contexts,
                                         max_new_tokens, False)

        def step_fn(turn, items):
            out = step_many(client, items, cfg.sandbox, cfg.rewards,
                            timeout_s=step_deadline_s(items, cfg.sandbox, total_threads(client)))
            # the items ran side by side on the cluster: the call lasts as long as its longest
            time.sleep(max(delay(turn, a) for _, _, a in items))
            return out

        t0 = time.perf_counter()
        eps = play(tasks, [env] * len(tasks), args.group, cfg.policy.max_len, tok,
                   cfg.sampling.max_new_tokens, sample_fn, step_fn, turns=turns,
                   concurrent=concurrent)
        wall = time.perf_counter() - t0
        return wall, eps, calls

    print(f"\n{len(tasks)} held-out edge tasks x {args.group} episodes, max_turns={m}, sampler "
          f"{cfg.sampling.engine} ({'concurrent calls' if concurrent else 'one call at a time'}), "
          f"step delay mean {args.step_delay_s:g}s")
    print(f"{'round':>5}  {'turns':>12}  {'wall s':>7}  {'episodes/s':>10}  {'mean turns':>10}  "
          f"{'sample calls':>12}  {'mean batch':>10}")
    walls: dict[str, list[float]] = {"synchronous": [], "per_episode": []}
    try:
        # the engine starts (minutes) and syncs before anything is timed
        sample_completions.fn(cfg, 0, 0, "bench-warmup", 1, 0, [tok.encode_prompt(tasks[0].prompt)],
                              8, False)
        for rnd in range(args.rounds):
            for turns in (("synchronous", "per_episode") if rnd % 2 == 0
                          else ("per_episode", "synchronous")):
                wall, eps, calls = run(turns, rnd)
                walls[turns].append(wall)
                print(f"{rnd:>5}  {turns:>12}  {wall:>7.1f}  {len(eps) / wall:>10.3f}  "
                      f"{np.mean([e.turns for e in eps]):>10.2f}  {len(calls):>12}  "
                      f"{np.mean(calls):>10.1f}", flush=True)
    finally:
        close_engines()
    sync, each = sum(walls["synchronous"]), sum(walls["per_episode"])
    print(f"per_episode / synchronous: episodes/s x{sync / each:.2f} (wall {each:.1f}s against "
          f"{sync:.1f}s over {args.rounds} round(s))")
    return 0


def _share(flags: list[bool]) -> str:
    return f"{sum(flags)}/{len(flags)}" if flags else "-"


if __name__ == "__main__":
    raise SystemExit(main())
