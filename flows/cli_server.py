"""`rollforge server`: a Prefect server (API + UI) on loopback, for operators.

The default `rollforge run` needs none (it starts a temporary local API). A server is what
makes runs, deployments, schedules and artifacts visible in the Prefect UI and lets
`rollforge serve` take runs from it. Its database is SQLite under PREFECT_HOME (default
~/.prefect), or PostgreSQL with `--database postgresql+asyncpg://...` (Prefect's choice for a
server that runs for months: no single-writer lock, so no "database is locked" 503s under
load). Nothing phones home: analytics are off and DO_NOT_TRACK is set.
"""
from __future__ import annotations

import argparse

LOOPBACK = ("127.0.0.1", "localhost", "::1")
# Prefect reads the first of these that is set; both are written so an old one cannot win.
DATABASE_VARS = ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL")
DRIVERS = {"postgresql": "postgresql+asyncpg", "postgres": "postgresql+asyncpg",
           "postgresql+asyncpg": "postgresql+asyncpg", "sqlite": "sqlite+aiosqlite",
           "sqlite+aiosqlite": "sqlite+aiosqlite"}
CONNECT_TIMEOUT_S = 10.0


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
                   help="PREFECT_HOME for this server (the SQLite database lives there unless "
                   "--database says otherwise); default: the environment's PREFECT_HOME or "
                   "~/.prefect")
    p.add_argument("--database", default=None, metavar="URL",
                   help="the server's database, as a SQLAlchemy URL: "
                   "postgresql+asyncpg://USER[:PASSWORD]@HOST:PORT/DATABASE (the user must own "
                   "the database; without a password in the URL, PGPASSWORD or ~/.pgpass "
                   "supplies it) or sqlite+aiosqlite:///PATH; postgresql:// and sqlite:/// "
                   "are accepted too. PostgreSQL is checked before the server starts. Default: "
                   "$PREFECT_SERVER_DATABASE_CONNECTION_URL, else SQLite under PREFECT_HOME")
    p.add_argument("--no-ui", action="store_true", help="serve the API only")
    p.set_defaults(func=_server)


def server_command(host: str, port: int, ui: bool = True) -> list[str]:
    import os
    import sys

    prefect = os.path.join(os.path.dirname(sys.executable), "prefect")
    return [prefect, "server", "start", "--host", host, "--port", str(port), "--analytics-off",
            "--ui" if ui else "--no-ui"]


def database_url(url: str, source: str = "--database") -> str:
    """`url` with the async driver Prefect's server needs (asyncpg, aiosqlite); `source` names
    where it came from, for the message when it is not one."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from flows.cli import UsageError

    try:
        u = make_url(url)
    except ArgumentError:
        raise UsageError(f"{source} {redacted(url)}: expected a URL such as "
                         "postgresql+asyncpg://USER:PASSWORD@127.0.0.1:5432/prefect") from None
    if u.drivername not in DRIVERS:
        raise UsageError(f"{source} {redacted(url)}: the scheme {u.drivername!r} is not one "
                         f"Prefect's server runs on; expected postgresql+asyncpg:// or "
                         "sqlite+aiosqlite://")
    return u.set(drivername=DRIVERS[u.drivername]).render_as_string(hide_password=False)


def redacted(url: str) -> str:
    """`url` with its password as ***, for messages and logs."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL at all: show only its scheme, if it has one
        return url.split("://", 1)[0] + "://..." if "://" in url else repr(url)


def check_postgres(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str:
    """The server version of the PostgreSQL database at `url`, or a UsageError naming the URL
    (without its password) and why it cannot be reached. Prefect's server would otherwise
    start, fail its migrations and exit with a long traceback."""
    import asyncio

    import asyncpg
    from sqlalchemy.engine import make_url

    from flows.cli import UsageError

    u = make_url(url)

    async def probe() -> str:
        conn = await asyncpg.connect(u.set(drivername="postgresql").render_as_string(
            hide_password=False), timeout=timeout_s)
        try:
            return await conn.fetchval("SHOW server_version")
        finally:
            await conn.close()

    try:
        return asyncio.run(asyncio.wait_for(probe(), timeout_s + 1))
    except Exception as exc:  # refused, timed out, bad password, no such database, ...
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if u.password:
            why = why.replace(u.password, "***")
        raise UsageError(f"cannot reach the database {redacted(url)} ({why}); check that "
                         "PostgreSQL runs there and that the user, password and database "
                         "are right") from None


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
    source = "--database" if args.database else next((v for v in DATABASE_VARS if env.get(v)), None)
    database = "SQLite under " + env.get("PREFECT_HOME", "~/.prefect")
    if source:
        db_url = database_url(args.database or env[source], source)
        database = redacted(db_url)
        if db_url.startswith("postgresql"):
            database += f" (PostgreSQL {check_postgres(db_url)})"
        env.update({v: db_url for v in DATABASE_VARS})
    host = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{host}:{args.port}"
    print(f"rollforge server: Prefect API {url}/api" + ("" if args.no_ui else f", UI {url}"),
          flush=True)
    print(f"  database: {database}", flush=True)
    print(f"  in other shells: export PREFECT_API_URL={url}/api", flush=True)
    cmd = server_command(args.host, args.port, not args.no_ui)
    os.execve(cmd[0], cmd, env)  # the server takes this process's place (and its signals)
    return 0  # not reached
