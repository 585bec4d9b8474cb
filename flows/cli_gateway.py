"""`rollforge gateway [--config FILE] [--set K=V] [--version latest|N] [--host H] [--port P]
[--chat-template FILE] [--records DIR]`: an OpenAI-compatible endpoint in front of a run's
policy (gateway/README.md). The key comes from ROLLFORGE_GATEWAY_KEY or --key-file, never
from the command line (where `ps` would show it)."""
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

    key = _key(args)
    try:
        cfg = load_config(args.config, args.overrides)
        from flows.sampler import preflight

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
    template = None
    if args.chat_template:
        try:
            template = Path(args.chat_template).read_text()
        except OSError as exc:
            raise UsageError(f"--chat-template {args.chat_template}: {exc.strerror}") from None
    return _serve(cfg, version, key, template, args)


def _serve(cfg, version: int, key: str, template: str | None, args) -> int:
    from pathlib import Path

    import uvicorn

    from flows.sampler import close_engines
    from gateway.app import Gateway
    from gateway.records import EpisodeLog
    from gateway.server import bind, make_app

    records = Path(args.records or Path(cfg.run_dir) / "gateway" / "episodes")
    gw = Gateway(cfg, version, key, EpisodeLog(records), template)
    from flows.cli import UsageError

    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    host, port = sock.getsockname()[:2]
    print(f"rollforge gateway: policy {cfg.run_id} v{version} ({cfg.sampling.engine} engine) at "
          f"http://{host}:{port}/v1, models {', '.join(gw.models)}; records: {records}", flush=True)
    try:
        uvicorn.Server(uvicorn.Config(make_app(gw), log_level="info")).run(sockets=[sock])
    finally:
        close_engines()  # a managed vLLM server never outlives the gateway
    return 0
