"""`rollforge server --database postgresql+asyncpg://...` against a real PostgreSQL: a
throw-away cluster of its own (initdb into a tmp folder, `pg_ctl start` on a free loopback
port, password authentication over TCP), the server's health, a flow run recorded through the
API found in PostgreSQL's `flow_run` table (and no SQLite file made), and a wrong password
refused before the server starts, with exit 2 and the URL named without it (a URL without
one takes it from PGPASSWORD). The PostgreSQL
programs come from scripts/setup_postgres.sh (Debian's `postgresql`); the test skips with that
script's reason only when they could not be installed."""
from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from dask_cluster import free_port
from prefect_server import ROLLFORGE, ROOT, prefect_server, wait

from flows.env import standalone_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
STATUS = Path(os.environ.get("ROLLFORGE_POSTGRES_LOG_DIR", "/tmp/rollforge-postgres")) / "status"
USER, PASSWORD, DATABASE = "rollforge", "s3cret-pw", "prefect"
PROBE_FLOW = """
from prefect import flow

@flow(name="postgres-probe")
def probe() -> int:
    return 42

assert probe() == 42
"""


def _bindir() -> Path | None:
    """The newest installed PostgreSQL's server programs."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    return found[-1].parent if found else None


@pytest.fixture(scope="module")
def pg_bin() -> Path:
    """PostgreSQL's bin folder; the set-up script runs first if it is missing."""
    if _bindir() is None:
        subprocess.run(["bash", str(ROOT / "scripts/setup_postgres.sh")], check=False)
    bindir = _bindir()
    if bindir is None or (os.geteuid() == 0 and not _has_user("postgres")):
        reason = STATUS.read_text().strip() if STATUS.is_file() else "unknown"
        pytest.skip(f"no PostgreSQL server: {reason} (scripts/setup_postgres.sh)")
    return bindir


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@contextlib.contextmanager
def postgres_cluster(bindir: Path):
    """A throw-away PostgreSQL cluster on a free loopback port with a database owned by a
    password-authenticated user; yields the port, and stops and deletes it on the way out.
    initdb refuses root, so as root the cluster belongs to the `postgres` user (its folder is
    made under /tmp, which that user can reach)."""
    folder = Path(tempfile.mkdtemp(prefix="rollforge-pg-"))
    as_owner: list[str] = []
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(folder, pw.pw_uid, pw.pw_gid)
        as_owner = ["runuser", "-u", "postgres", "--"]
    data = folder / "data"

    def run(*cmd: str | Path, timeout: float = 120, check: bool = True) -> bool:
        out = subprocess.run([*as_owner, *map(str, cmd)], capture_output=True, text=True,
                             timeout=timeout)
        assert out.returncode == 0 or not check, \
            f"{cmd[0]} failed: {out.stdout[-2000:]}{out.stderr[-2000:]}"
        return out.returncode == 0

    run(bindir / "initdb", "-D", data, "-U", "postgres", "-E", "UTF8", "--no-instructions",
        "--auth-local=trust", "--auth-host=scram-sha-256")
    try:
        port = _start_on_a_free_port(run, bindir, data, folder)
        psql = [bindir / "psql", "-h", folder, "-p", str(port), "-U", "postgres", "-d",
                "postgres", "-v", "ON_ERROR_STOP=1", "-q"]
        run(*psql, "-c", f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'",
            "-c", f"CREATE DATABASE {DATABASE} OWNER {USER}")
        yield port
    finally:
        subprocess.run([*as_owner, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "-w", "-t", "60", "stop"], capture_output=True, timeout=90)
        shutil.rmtree(folder, ignore_errors=True)


def _start_on_a_free_port(run, bindir: Path, data: Path, folder: Path, tries: int = 3) -> int:
    """Start the cluster on a port found free; a port another process took before the server
    bound it (a free port is only free when it is looked at) is replaced by another, up to
    `tries` times. Returns the port it listens on."""
    log = folder / "postgres.log"
    for attempt in range(tries):
        port = free_port()
        # -w: pg_ctl itself waits until the server accepts connections (or -t passes).
        start = [bindir / "pg_ctl", "-D", data, "-l", log, "-w", "-t", "90", "-o",
                 f"-k {folder} -h 127.0.0.1 -p {port} -c fsync=off", "start"]
        if run(*start, check=False):
            return port
        if "already in use" not in _tail(log):
            break  # not the port: no other port would help
    raise AssertionError(f"pg_ctl start failed ({attempt + 1} tries): {_tail(log)}")


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-4000:]
    except OSError:
        return ""


def _flow_runs(port: int) -> list[tuple[str, str]]:
    """(flow name, state type) of every flow run in the PostgreSQL database."""
    import asyncpg

    async def query():
        conn = await asyncpg.connect(host="127.0.0.1", port=port, user=USER, password=PASSWORD,
                                     database=DATABASE, timeout=30)
        try:
            rows = await conn.fetch("SELECT f.name, r.state_type::text FROM flow_run r "
                                    "JOIN flow f ON f.id = r.flow_id")
        finally:
            await conn.close()
        return [(r[0], r[1]) for r in rows]

    return asyncio.run(query())


def test_server_on_postgresql_records_flow_runs_there_and_refuses_a_wrong_password(
        pg_bin, tmp_path, monkeypatch):
    from flows.cli_server import check_postgres

    with postgres_cluster(pg_bin) as port:
        with monkeypatch.context() as m:  # a URL without its password: PGPASSWORD gives it
            m.setenv("PGPASSWORD", PASSWORD)
            assert check_postgres(f"postgresql+asyncpg://{USER}@127.0.0.1:{port}/{DATABASE}")
        url = f"postgresql+asyncpg://{USER}:{PASSWORD}@127.0.0.1:{port}/{DATABASE}"
        bad = subprocess.run([*ROLLFORGE, "server", "--no-ui", "--port", str(free_port()),
                              "--database", url.replace(PASSWORD, "wrong-pw")],
                             cwd=ROOT, env={**standalone_env(), "PREFECT_HOME": str(tmp_path)},
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2, bad.stdout + bad.stderr
        assert f"{USER}:***@127.0.0.1:{port}/{DATABASE}" in bad.stderr
        assert "password authentication failed" in bad.stderr and "wrong-pw" not in bad.stderr

        home = tmp_path / "prefect-home"
        home.mkdir()
        with prefect_server(home, args=("--database", url)) as (base, env):
            probe = subprocess.run([sys.executable, "-c", PROBE_FLOW], cwd=tmp_path, env=env,
                                   capture_output=True, text=True, timeout=180)
            assert probe.returncode == 0, probe.stdout[-3000:] + probe.stderr[-3000:]
            runs = wait("the flow run in PostgreSQL", lambda: [
                r for r in _flow_runs(port) if r == ("postgres-probe", "COMPLETED")], 60)
            assert runs == [("postgres-probe", "COMPLETED")]
        log = (home / "server.log").read_text()
        assert f"database: postgresql+asyncpg://{USER}:***@127.0.0.1:{port}" in log
        assert PASSWORD not in log
        assert not list(home.rglob("*.db")), "the server made a SQLite database as well"
