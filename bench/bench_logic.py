"""The logic kind's cost: steps checked per second through the environment (`env.grade` on the
reference chains: parse, citations, the z3 check of every step, the goal's equivalence, the
report and the reward) against the bare z3 calls of the same step checks (terms built before the
clock starts: a solver, the cited formulas, the step's negation, `check()`), in one run.

    .venv/bin/python bench/bench_logic.py [--per-family 20] [--repeat 3]
    .venv/bin/python bench/bench_logic.py --run /tmp/logic-runs/logic   # a run's checkpoints

With `--run`, instead: per family, the held-out greedy pass rate, share of valid steps (valid
steps over steps written) and mean chain length of the run's first checkpoint (the SFT start)
and its last, graded by the kind (the run's own held-out evaluation keeps pass rates only).

Also prints, per answer of the task check (`env.trivial_answers`: the hack suite's `TASK_CHECK`
in envs/logic/hacks.py, the old cheats, the issue-34 chain and the curried chain), the highest
reward any task gave it (must be 0.000) and the share of tasks that flagged it (1.000 for
each, the empty answer too: `no_steps`). The whole suite is `rollforge hacks logic`.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("OMP_NUM_THREADS", "1")


def bare_checks(tasks, timeout_ms: int):
    """Per task, the (cited terms, step term) of each reference step, in one z3 context."""
    from envs.logic.checker import Z3Terms, task_sorts  # noqa: PLC0415
    from envs.logic.syntax import parse_formula, parse_step  # noqa: PLC0415

    import z3  # noqa: PLC0415

    z = Z3Terms(z3.Context())  # one context for every task, made before the clock starts
    out = []
    for t in tasks:
        sorts = task_sorts(t.payload["premises"], t.payload["goal"])
        prem = [z.term(parse_formula(p, sorts)[0]) for p in t.payload["premises"]]
        steps: list = []
        for line in t.reference.splitlines():
            s = parse_step(line)
            f, sorts = parse_formula(s.formula, sorts)
            cited = [prem[k - 1] if kind == "P" else steps[k - 1][1] for kind, k in s.cites]
            steps.append((cited, z.term(f)))
        out.append((z.ctx, steps))
    return out


def heldout_by_family(run_dir: str) -> None:
    """Greedy answers of the first and last checkpoint of a run on its held-out tasks."""
    from collections import defaultdict  # noqa: PLC0415

    from envs.base import StepContext  # noqa: PLC0415
    from envs.registry import env_for_task  # noqa: PLC0415
    from flows.config import validate_config  # noqa: PLC0415
    from flows.stages import heldout_tasks  # noqa: PLC0415
    from storage.registry import read_run_config  # noqa: PLC0415
    from training.checkpoints import checkpoint_dir, versions  # noqa: PLC0415
    from training.generate import sample  # noqa: PLC0415
    from training.policy import load_policy  # noqa: PLC0415

    p = Path(run_dir)
    cfg = validate_config({**read_run_config(run_dir), "out_dir": str(p.parent), "run_id": p.name})
    tasks = heldout_tasks(cfg)
    ctx = StepContext(None, cfg.sandbox.limits(), cfg.rewards)
    vs = versions(run_dir)
    table: dict[str, dict[int, tuple[float, float, float]]] = defaultdict(dict)
    for v in (vs[0], vs[-1]):
        model = load_policy(str(checkpoint_dir(run_dir, v) / "model"))
        out = sample(model, [t.prompt for t in tasks], cfg.sampling.max_new_tokens, greedy=True)
        per: dict[str, list] = defaultdict(list)
        for t, s in zip(tasks, out):
            b, _ = env_for_task(t).grade(t, s.text, ctx)
            steps = b.tests_total - 1  # the last outcome is the goal
            valid = sum(o == "passed" for o in b.test_outcomes[:-1])
            per[t.family].append((b.solved, valid, steps))
            per["all"].append((b.solved, valid, steps))
        for fam, rows in per.items():
            written = sum(r[2] for r in rows)
            table[fam][v] = (sum(r[0] for r in rows) / len(rows),
                             sum(r[1] for r in rows) / written if written else 0.0,
                             written / len(rows))
    print(f"{run_dir}: {len(tasks)} held-out tasks, greedy; pass / share of valid steps / "
          f"mean steps")
    print(f"{'family':<28}{'SFT start (v' + str(vs[0]) + ')':<24}after RL (v{vs[-1]})")
    for fam in sorted(table, key=lambda f: (f == "all", f)):
        cells = ["{:.3f} / {:.3f} / {:.1f}".format(*table[fam][v]) for v in (vs[0], vs[-1])]
        n = sum(t.family == fam for t in tasks) if fam != "all" else len(tasks)
        print(f"{fam + f' ({n})':<28}{cells[0]:<24}{cells[1]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-family", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--run", default=None, help="a logic run's folder: per-family held-out "
                    "figures of its first and last checkpoint instead")
    args = ap.parse_args()
    if args.run:
        heldout_by_family(args.run)
        return 0

    import z3  # noqa: PLC0415

    from envs.base import StepContext  # noqa: PLC0415
    from envs.registry import make_env  # noqa: PLC0415
    from rewards.aggregate import RewardConfig  # noqa: PLC0415
    from sandbox.base import Limits  # noqa: PLC0415

    env = make_env("logic", {"tasks_per_family": args.per_family})
    tasks = env.generate()
    cfg = RewardConfig(per_test_timeout_s=0.5)
    ctx = StepContext(None, Limits(timeout_s=5), cfg)
    timeout_ms = int(cfg.per_test_timeout_s * 1000)
    steps = sum(len(t.reference.splitlines()) for t in tasks)
    for t in tasks:  # warm: imports, and the premises' consistency (cached per task)
        assert env.grade(t, t.reference, ctx)[0].solved, t.task_id
    t0 = time.perf_counter()
    for _ in range(args.repeat):
        for t in tasks:
            env.grade(t, t.reference, ctx)
    env_s = (time.perf_counter() - t0) / args.repeat

    prepared = bare_checks(tasks, timeout_ms)
    t0 = time.perf_counter()
    for _ in range(args.repeat):
        for zctx, chain in prepared:
            for cited, claim in chain:
                s = z3.Solver(ctx=zctx)
                s.set("timeout", timeout_ms)
                s.add(*cited, z3.Not(claim))
                assert s.check() == z3.unsat
    bare_s = (time.perf_counter() - t0) / args.repeat

    n = len(tasks)
    print(f"{n} tasks, {steps} reference steps, {args.repeat} repeats, z3 {z3.get_version_string()}")
    print(f"{'':<28}{'episodes/s':>12}{'steps/s':>10}{'ms/step':>9}")
    print(f"{'env.grade (whole answer)':<28}{n / env_s:>12.0f}{steps / env_s:>10.0f}"
          f"{1000 * env_s / steps:>9.2f}")
    print(f"{'bare z3 step checks':<28}{n / bare_s:>12.0f}{steps / bare_s:>10.0f}"
          f"{1000 * bare_s / steps:>9.2f}")
    print(f"the environment takes {env_s / bare_s:.2f}x the time of the bare checks")

    # a case applies to some tasks only (prove and determine tasks have different ones): each
    # is graded, and its flagged share counted, over the tasks it applies to
    answers = [env.trivial_answers(t) for t in tasks]
    names = list(dict.fromkeys(name for a in answers for name in a))
    print(f"\n{'hack case':<26}{'tasks':>6}{'max reward':>11}{'flagged':>9}")
    for name in names:
        got = [env.grade(t, a[name], ctx)[0] for t, a in zip(tasks, answers) if name in a]
        print(f"{name:<26}{len(got):>6}{max(b.reward for b in got):>11.3f}"
              f"{sum(bool(b.hack_flags) for b in got) / len(got):>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
