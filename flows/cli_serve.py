"""`rollforge serve`: register the training and evaluation deployments with a Prefect server
and run the flow runs it schedules (or that operators start from the UI), until stopped.

Four deployments, each with typed parameters that the UI shows as a form:
  rollforge-train/train        config (the typed run config, a section per stage; default: the
                               --config file with --run-id and --set applied), config_file,
                               overrides                                 (default: daily 02:00 UTC)
  rollforge-evaluate/evaluate  run_dir, version                          (default: every 6 hours)
  rollforge-evaluate-model/evaluate-model
                               model, sources, n, split, seed, store, ... (default: every 6 hours)
  rollforge-eval-transfer/eval-transfer
                               base, runs, sources, out, n, split, ...    (on demand only)
Each flow run executes in its own subprocess of this process. The equivalent for Prefect
work pools and workers is `deployments/prefect.yaml` (see docs/operators.md).
"""
from __future__ import annotations

import argparse

DEFAULT_TRAIN_CRON = "0 2 * * *"
DEFAULT_EVAL_CRON = "0 */6 * * *"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="register the train/evaluate deployments with a Prefect server and run them",
        description="Register the training deployment (rollforge-train/train), the evaluation "
        "deployments (rollforge-evaluate/evaluate, rollforge-evaluate-model/evaluate-model) and "
        "the transfer matrix's (rollforge-eval-transfer/eval-transfer, on demand) with the "
        "Prefect server at PREFECT_API_URL, "
        "with schedules and typed parameters, then execute the runs the server hands out "
        "(scheduled ones and those started from the UI or API) until Ctrl-C. Schedules stay "
        "active when this process stops.",
        epilog="example: PREFECT_API_URL=http://127.0.0.1:4200/api rollforge serve "
        "--config configs/default.yaml --train-cron '0 2 * * *'")
    p.add_argument("--config", default="configs/default.yaml", metavar="FILE",
                   help="the training deployment's config: the defaults of its form and what "
                   "its scheduled runs run (default: %(default)s)")
    p.add_argument("--run-id", default=None,
                   help="run_id of that config (default: the config's run_id)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="change one field of that config, e.g. --set out_dir=/data/runs "
                   "(repeatable)")
    g = p.add_argument_group("schedules (cron strings are in UTC)")
    g.add_argument("--train-cron", default=DEFAULT_TRAIN_CRON,
                   help="when the training deployment runs (default: %(default)r)")
    g.add_argument("--train-interval", type=float, default=None, metavar="SECONDS",
                   help="run training every SECONDS instead of on --train-cron")
    g.add_argument("--eval-cron", default=DEFAULT_EVAL_CRON,
                   help="when the evaluation deployment runs (default: %(default)r)")
    g.add_argument("--eval-run-dir", default=None, metavar="DIR",
                   help="the run the evaluation deployments' forms start at (run_dir, model, "
                   "the transfer's runs) (default: <out_dir>/<run_id> of --config)")
    g.add_argument("--no-schedules", action="store_true",
                   help="register the deployments without schedules (runs only on demand)")
    p.add_argument("--limit", type=int, default=1,
                   help="flow runs executed at once by this process (default: %(default)s)")
    p.add_argument("--register-only", action="store_true",
                   help="register (or update) the deployments and exit without serving")
    p.set_defaults(func=_serve)


def build_deployments(args: argparse.Namespace) -> list:
    """The RunnerDeployments (not yet registered)."""
    from prefect.types.entrypoint import EntrypointType

    from flows.iteration import CODE_VERSION, resolve_config, train_flow
    from flows.rounds import evaluate_flow

    overrides = list(getattr(args, "overrides", []) or [])
    cfg = resolve_config(config_file=args.config, run_id=args.run_id, overrides=overrides)
    # The whole resolved config is the deployment's default: the form shows it, field by
    # field, and a scheduled run runs exactly what the deployment page shows.
    train_params: dict = {"config": cfg.model_dump(mode="json")}
    train_sched: dict = {}
    eval_sched: dict = {}
    if not args.no_schedules:
        train_sched = ({"interval": args.train_interval} if args.train_interval
                       else {"cron": args.train_cron})
        eval_sched = {"cron": args.eval_cron}
    common = dict(version=CODE_VERSION, tags=["rollforge"],
                  entrypoint_type=EntrypointType.MODULE_PATH)
    train = train_flow.to_deployment(
        name="train", parameters=train_params, description=(
            f"RL post-training run: SFT warm start, then GRPO iterations (config "
            f"{args.config}); resumes a run whose folder holds finished iterations."),
        **train_sched, **common)
    evaluation = evaluate_flow.to_deployment(
        name="evaluate", parameters={"run_dir": args.eval_run_dir or cfg.run_dir},
        description="Held-out pass rates of a run's newest (or given) checkpoint.",
        **eval_sched, **common)
    from flows.eval_model import evaluate_model_flow

    model_eval = evaluate_model_flow.to_deployment(
        name="evaluate-model", parameters={"model": args.eval_run_dir or cfg.run_dir},
        description="rollforge eval --model: a checkpoint, run or model on any sources into "
        "the store's evaluations table (docs/evaluation.md).", **eval_sched, **common)
    return [train, evaluation, model_eval, transfer_deployment(cfg, args, common)]


def transfer_deployment(cfg, args: argparse.Namespace, common: dict):
    """`rollforge eval transfer` as a deployment run on demand from the UI (no schedule): its
    form starts at the config's run against its base on the config's own sources; the matrix
    is written under the run and published as the `rollforge-transfer-matrix` artifact."""
    import json

    from flows.config import task_sources
    from flows.eval_transfer_flow import transfer_flow

    run_dir = args.eval_run_dir or cfg.run_dir
    sources = [json.dumps(s.model_dump(mode="json", exclude_defaults=True), sort_keys=True)
               for s in task_sources(cfg)]
    return transfer_flow.to_deployment(
        name="eval-transfer", parameters={
            "base": cfg.policy.model_path or f"{run_dir}:0", "runs": [run_dir],
            "sources": sources, "out": f"{run_dir}/transfer"},
        description="rollforge eval transfer: the base and runs' final checkpoints on every "
        "source; the matrix (pass@1 and its change from the base, with intervals) as "
        "transfer.md/.csv/.png under `out` and the rollforge-transfer-matrix artifact "
        "(docs/evaluation.md).", **common)


def _serve(args: argparse.Namespace) -> int:
    from flows.cli import UsageError
    from flows.env import apply_defaults

    apply_defaults()
    import os

    if not os.environ.get("PREFECT_API_URL"):
        raise UsageError("PREFECT_API_URL is not set: start a server (`rollforge server`) and "
                         "export PREFECT_API_URL=http://127.0.0.1:4200/api first; deployments "
                         "registered with a temporary API would vanish with it")
    if args.limit < 1:
        raise UsageError(f"--limit {args.limit}: expected at least 1")
    if args.train_interval is not None and args.train_interval <= 0:
        raise UsageError(f"--train-interval {args.train_interval}: expected seconds > 0")
    from flows.config import ConfigError

    try:
        deployments = build_deployments(args)
    except (ConfigError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if args.register_only:
        for d in deployments:
            d_id = d.apply()
            print(f"registered {d.flow_name}/{d.name} ({d_id})")
        return 0
    from prefect import serve

    serve(*deployments, pause_on_shutdown=False, limit=args.limit)
    return 0
