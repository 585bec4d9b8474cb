"""`rollforge gateway [--config FILE] [--set K=V] [--version latest|N] [--follow] [--host H]
[--port P] [--chat-template FILE] [--records DIR] [--episodes]`: an OpenAI-compatible endpoint in
front of a run's policy (gateway/README.md); with `--follow` it moves to each newer version the
run publishes while it serves (a running `rollforge run` with `rl.gateway_rows` then trains on
fresh episodes); with `--episodes` it also serves the run's training tasks as
episodes that any client plays and the kinds' graders score into the store (gateway/play.py).
With `--rows EPISODE|all` it serves nothing: it prints the recorded episode's trajectory rows
as JSON lines (gateway/rows.py) and exits; with `--train` it updates the policy from the served
version on the graded episodes' rows (gateway/train.py) and exits. The key comes
from ROLLFORGE_GATEWAY_KEY or --key-file, never from the command line (where `ps` would show
it)."""
from __future__ import annotations

import argparse

KEY_ENV = "ROLLFORGE_GATEWAY_KEY"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "gateway", help="serve a run's policy over the OpenAI API, recording every request",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", default=None,
                   help="the run's YAML config (default: configs/default.yaml)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config field, as for `rollforge run`")
    p.add_argument("--version", default="latest", help="policy version to serve: latest or N")
    p.add_argument("--follow", action="store_true",
                   help="answer with each newer version the run publishes, from the moment it "
                        "appears (looked for before a request, at most once a second); each "
                        "turn is recorded with the version that sampled it")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default loopback; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=8100, help="port (default 8100; 0: any free one)")
    p.add_argument("--key-file", metavar="FILE", default=None,
                   help=f"file holding the API key (default: ${KEY_ENV})")
    p.add_argument("--chat-template", metavar="FILE", default=None,
                   help="Jinja chat template for /v1/chat/completions when the policy's "
                        "tokenizer has none")
    p.add_argument("--records", metavar="DIR", default=None,
                   help="where the turn records go (default: <run_dir>/gateway/episodes)")
    p.add_argument("--rows", metavar="EPISODE", default=None,
                   help="print this recorded episode's (or `all` episodes') trajectory rows as "
                        "JSON lines and exit")
    p.add_argument("--episodes", action="store_true",
                   help="also serve the run's training tasks as episodes: POST "
                        "/v1/rollforge/episodes, then .../episodes/ID/step (graded rows go to "
                        "<out_dir>/<run_id>-gateway)")
    p.add_argument("--train", action="store_true",
                   help="update the policy at --version on the graded episodes it sampled, "
                        "publish the next version, and exit")
    p.set_defaults(func=_run)


def _key(args) -> str:
    import os
    from pathlib import Path

    from flows.cli import UsageError

    if args.key_file:
        try:
            key = Path(args.key_file).read_text().strip()
        except OSError as exc:
            raise UsageError(f"--key-file {args.key_file}: {exc.strerror}") from None
    else:
        key = os.environ.get(KEY_ENV, "").strip()
    if not key:
        raise UsageError(f"no API key: set {KEY_ENV} or pass --key-file FILE (the gateway never "
                         "serves without one)")
    return key


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from engine.vllm_server import EngineError
    from flows.cli import UsageError
    from flows.config import ConfigError, load_config

    serving = args.rows is None and not args.train
    if args.follow and not serving:
        raise UsageError("--follow is for serving; --rows and --train read one version")
    key = _key(args) if serving else ""
    try:
        cfg = load_config(args.config, args.overrides)
        from flows.sampler import preflight

        if serving:
            preflight(cfg)
    except (ConfigError, EngineError) as exc:
        raise UsageError(str(exc)) from None
    from flows.env import apply_defaults

    apply_defaults()
    from training.export import resolve_version

    try:
        version = resolve_version(cfg.run_dir, args.version)
    except (FileNotFoundError, LookupError, ValueError) as exc:
        raise UsageError(f"--version {args.version}: {exc}") from None
    if args.rows is not None:
        return _print_rows(cfg, version, args)
    if args.train:
        return _train(cfg, version)
    template = None
    if args.chat_template:
        try:
            template = Path(args.chat_template).read_text()
        except OSError as exc:
            raise UsageError(f"--chat-template {args.chat_template}: {exc.strerror}") from None
    return _serve(cfg, version, key, template, args)


def _records(cfg, args):
    from pathlib import Path

    from gateway.records import EpisodeLog

    return EpisodeLog(Path(args.records or Path(cfg.run_dir) / "gateway" / "episodes"))


def _print_rows(cfg, version: int, args) -> int:
    import json

    from flows.cli import UsageError
    from flows.sampler import policy_tokenizer
    from gateway.rows import episode_rows

    log = _records(cfg, args)
    episodes = log.episodes() if args.rows == "all" else [args.rows]
    tok = policy_tokenizer(cfg.run_dir, version)  # for the rows' text only
    for ep in episodes:
        try:
            turns = log.turns(ep)
        except ValueError as exc:
            raise UsageError(f"--rows: {exc}") from None
        if not turns:
            raise UsageError(f"--rows {ep}: no recorded turns under {log.root / ep}")
        for row in episode_rows(turns, tok, cfg.run_id, config_hash=cfg.hash()):
            print(json.dumps(row.as_dict()))
    return 0


def _train(cfg, version: int) -> int:
    from flows.cli import UsageError
    from gateway.train import train_on_gateway

    try:
        metrics = train_on_gateway(cfg, version)
    except ValueError as exc:
        raise UsageError(f"--train: {exc}") from None
    print(f"rollforge gateway --train: v{version} -> v{version + 1} on "
          f"{metrics['gateway/samples']} rows ({metrics['gateway/informative']} with a non-zero "
          f"advantage); loss {metrics.get('train/loss', float('nan')):.4f}", flush=True)
    return 0


def _serve(cfg, version: int, key: str, template: str | None, args) -> int:
    import uvicorn

    from flows.sampler import close_engines
    from gateway.app import Gateway
    from flows.cli import UsageError
    from gateway.server import bind, make_app

    records = _records(cfg, args)
    play = None
    if args.episodes:
        from flows.sampler import policy_tokenizer
        from gateway.play import Episodes

        try:
            play = Episodes(cfg, records, policy_tokenizer(cfg.run_dir, version))
        except ValueError as exc:
            raise UsageError(f"--episodes: {exc}") from None
    gw = Gateway(cfg, version, key, records, template, play, follow=args.follow)
    records = gw.records.root
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    host, port = sock.getsockname()[:2]
    follows = ", following new versions" if args.follow else ""
    print(f"rollforge gateway: policy {cfg.run_id} v{version}{follows} "
          f"({cfg.sampling.engine} engine) at http://{host}:{port}/v1, models "
          f"{', '.join(gw.models)}; records: {records}", flush=True)
    try:
        uvicorn.Server(uvicorn.Config(make_app(gw), log_level="info")).run(sockets=[sock])
    finally:
        close_engines()  # a managed vLLM server never outlives the gateway
    return 0
