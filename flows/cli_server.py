"""`rollforge server`: a Prefect server (API + UI) on loopback, for operators.

The default `rollforge run` needs none (it starts a temporary local API). A server is what
makes runs, deployments, schedules and artifacts visible in the Prefect UI and lets
`rollforge serve` take runs from it. Its database is SQLite under PREFECT_HOME (default
~/.prefect). Nothing phones home: analytics are off and DO_NOT_TRACK is set.
"""
from __future__ import annotations

import argparse

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "server", help="start a Prefect server (API and UI) on loopback",
        description="Start a Prefect server on this machine's loopback interface (equivalent to "
        "`prefect server start --host 127.0.0.1 --port PORT --analytics-off`). Point other "
        "shells at it with the PREFECT_API_URL this prints, then `rollforge serve` or "
        "`rollforge run`. Stop it with Ctrl-C.",
        epilog="example: rollforge server --port 4200 & export PREFECT_API_URL=http://127.0.0.1:4200/api")
    p.add_argument("--port", type=int, default=4200, help="TCP port (default: %(default)s)")
    p.add_argument("--host", default="127.0.0.1",
                   help="loopback address to bind (default: %(default)s; only 127.0.0.1, "
                   "localhost or ::1 are accepted: the API has no authentication)")
    p.add_argument("--home", default=None, metavar="DIR",
                   help="PREFECT_HOME for this server (its SQLite database lives there); "
                   "default: the environment's PREFECT_HOME or ~/.prefect")
    p.add_argument("--no-ui", action="store_true", help="serve the API only")
    p.set_defaults(func=_server)


def server_command(host: str, port: int, ui: bool = True) -> list[str]:
    import os
    import sys

    prefect = os.path.join(os.path.dirname(sys.executable), "prefect")
    return [prefect, "server", "start", "--host", host, "--port", str(port), "--analytics-off",
            "--ui" if ui else "--no-ui"]


def _server(args: argparse.Namespace) -> int:
    import os

    from flows.cli import UsageError
    from flows.env import apply_defaults

    if args.host not in LOOPBACK:
        raise UsageError(f"--host {args.host!r}: expected a loopback address (127.0.0.1, "
                         "localhost or ::1); the Prefect API has no authentication, put an "
                         "authenticating proxy in front of it to reach it from elsewhere")
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: expected 1..65535")
    apply_defaults()
    env = dict(os.environ)
    if args.home:
        os.makedirs(args.home, exist_ok=True)
        env["PREFECT_HOME"] = os.path.abspath(args.home)
    host = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{host}:{args.port}"
    print(f"rollforge server: Prefect API {url}/api" + ("" if args.no_ui else f", UI {url}"),
          flush=True)
    print(f"  in other shells: export PREFECT_API_URL={url}/api", flush=True)
    cmd = server_command(args.host, args.port, not args.no_ui)
    os.execve(cmd[0], cmd, env)  # the server takes this process's place (and its signals)
    return 0  # not reached
