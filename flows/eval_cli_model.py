"""`rollforge eval --model`'s command line: check the inputs before anything starts (exit 2),
run flows.eval_model's flow under the same temporary Prefect API and signal handling as
`rollforge run`, then print the pass@k table of the evaluation's rows (all chunks, this run's
and earlier ones)."""
from __future__ import annotations

import argparse
import sys


def run_model_eval(args: argparse.Namespace, ks: tuple[int, ...]) -> int:
    from flows.env import apply_defaults

    apply_defaults()  # before Prefect is first imported (by flows.eval_model): it reads them once
    from engine.vllm_server import EngineError
    from flows.cli import UsageError
    from flows.eval_model import EvalInputError, plan

    kwargs = dict(model=args.model, sources=args.sources, n=args.n, split=args.split,
                  seed=args.seed, store=args.store, config_file=args.config_file,
                  overrides=list(args.overrides), chunk_size=args.chunk_size, engine=args.engine)
    try:
        p = plan(**kwargs)
        from flows.sampler import preflight

        preflight(p.cfg)
    except (EvalInputError, EngineError) as exc:
        raise UsageError(str(exc)) from None
    if not args.quiet:
        print(f"evaluation {p.eval_id}: {p.ref.label} (v{p.ref.version}) on "
              f"{p.spec['tasks']} {args.split} tasks in {len(p.chunks)} chunks, 1 greedy + "
              f"{p.n} sampled a task, seed {p.cfg.seed}")
    from flows.stop import Stopped, prefect_api, report_stop, stop_on_signals

    try:
        with stop_on_signals(), prefect_api():
            from flows.eval_model import evaluate_model_flow

            counts = evaluate_model_flow(**kwargs)
    except Stopped as exc:
        return report_stop(exc, f"rollforge eval: stopped by {exc.name}; the same command "
                           f"resumes the evaluation {p.eval_id}")
    return report(p, counts, ks, args.quiet)


def report(p, counts: dict, ks: tuple[int, ...], quiet: bool = False) -> int:
    from flows.eval_stats import format_table, summarize, tool_call_summary
    from storage.evaluations import read_evaluation

    rows = read_evaluation(p.store, p.eval_id).to_pylist()
    table = summarize(rows, ks, seed=p.cfg.seed)
    for k, (est, lo, hi) in table[0].pass_k.items():
        print(f"pass@{k}: {est:.4f} [{lo:.4f}, {hi:.4f}]")
    if not quiet:
        print(format_table(table, ks))
        tools = tool_call_summary(rows)
        if tools:
            print(tools)
        print(f"chunks: {counts['chunks_reused']} reused, {counts['chunks_run']} run now (of "
              f"{counts['chunks']}); sequences generated now {counts['sequences_generated']}, "
              f"from the stage cache {counts['sequences_from_cache']}; steps graded now "
              f"{counts['steps_graded']}")
        print(f"rows: {len(rows)} in {p.store}/_evaluations/{p.eval_id}/rows/  (query: rollforge "
              f"query --store {p.store} \"SELECT * FROM evaluations WHERE eval_id = "
              f"'{p.eval_id}'\")")
    unscored = sum(r["passed"] is None for r in rows)
    if unscored:
        print(f"rollforge eval: {unscored} samples could not be scored (infra_error); they are "
              "left out of pass@k", file=sys.stderr)
        return 1
    return 0
