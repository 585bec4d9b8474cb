"""`rollforge run`: run (or resume) the RL loop on a config."""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run", help="run or resume the RL loop (SFT warm start, then GRPO iterations)",
        description="Run the iteration loop as a Prefect flow: generate tasks, sample "
        "completions, execute them in sandboxes on a Dask cluster, score, write Parquet "
        "trajectories, update the policy with DeepSpeed, checkpoint. A run whose folder already "
        "holds finished iterations resumes after the last one; under a config that computes "
        "something else (not only `iterations`, `out_dir`, `eval_every`, `keep_checkpoints`, "
        "`cluster`, `rl.processes`, `tracking`) it is refused (exit 2) unless --set "
        "resume_changed=true.")
    p.add_argument("--config", metavar="FILE", default=None,
                   help="YAML run config (default: configs/default.yaml)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config field by its dotted path, e.g. --set rl.lr=1e-4 "
                   "(repeatable); the value is read as YAML: --set 'tracking=[tensorboard, "
                   "mlflow]', --set sft.until_pass=null, --set 'tasks.sources=[{kind: io}]'")
    p.add_argument("--tasks", metavar="FILE", action="append", default=[],
                   help="train on a task file (.jsonl or .parquet, any kind; each record graded "
                   "by its own `kind`) instead of the config's sources; repeat for several "
                   "files (equal weights)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from flows.cli import UsageError
    from engine.vllm_server import EngineError
    from flows.config import ConfigError, load_config

    import json

    overrides = list(args.overrides)
    if args.tasks:
        overrides.append("tasks.sources=" + json.dumps([{"file": f} for f in args.tasks]))
    from flows.resume import check_resume

    try:
        cfg = load_config(args.config, overrides)
        check_resume(cfg)  # before anything starts; the flow checks again
        from flows.sampler import preflight

        preflight(cfg)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    except EngineError as exc:  # sampling.engine: vllm, and the engine is not built
        raise UsageError(str(exc)) from None
    from flows.env import apply_defaults

    apply_defaults()

    from flows.stop import Stopped, prefect_api, report_stop, stop_on_signals

    try:
        with stop_on_signals(), prefect_api():
            from flows.iteration import train_flow

            result = train_flow(cfg.model_dump(mode="json"))
    except Stopped as exc:
        return report_stop(exc, f"rollforge run: stopped by {exc.name}; the same command "
                           f"resumes the run ({cfg.run_dir})")
    from flows.report import summary
    from storage.registry import read_metrics

    print()
    print(summary(result, read_metrics(cfg.run_dir)))
    print()
    print(f"trajectories: {cfg.run_dir}/trajectories/  (query: rollforge query --store "
          f"{cfg.out_dir} \"SELECT ...\")")
    print(f"checkpoints:  {cfg.run_dir}/checkpoints/   metrics: {cfg.run_dir}/metrics/   "
          f"config: {cfg.run_dir}/config.yaml")
    from pathlib import Path

    curve = Path(cfg.run_dir) / "plots" / "reward_curve.png"
    if curve.is_file():
        print(f"reward curve: {curve}")
    return 0
