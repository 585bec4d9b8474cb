"""A real Prefect server on loopback for the tests that need one (its own PREFECT_HOME,
analytics off), `rollforge serve` against it, and the REST calls and waits around them."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from dask_cluster import free_port
from flows.env import standalone_env

ROOT = Path(__file__).resolve().parents[2]
ROLLFORGE = [sys.executable, "-m", "flows.cli"]
FINAL_STATES = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def own_api(env: dict[str, str]) -> dict[str, str]:
    """`env` without a configured Prefect API: a run started with it starts its temporary API
    itself (flows/stop.py), the path a run on a laptop takes (tests/conftest.py may have
    pointed the session's runs at a shared server)."""
    return {k: v for k, v in env.items() if k != "PREFECT_API_URL"}


def api(base: str, method: str, path: str, body=None, attempts: int = 8):
    """One REST call. A 503 is the server's "retry me" answer (Prefect maps SQLite's
    SQLITE_BUSY to it, common on a loaded 2-core machine); Prefect's own client retries it
    with backoff, and so does this, honouring Retry-After."""
    data = None if body is None else json.dumps(body).encode()
    for attempt in range(attempts):
        req = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            if e.code != 503 or attempt == attempts - 1:
                raise
            retry_after = e.headers.get("Retry-After")
            time.sleep(float(retry_after) if retry_after and retry_after.isdigit()
                       else min(2.0 ** attempt, 10.0))


def wait(what: str, check, timeout_s: float, procs=()):
    """Poll `check` until it returns something true; fail early if one of `procs` exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"{p.args[:4]} exited with {p.returncode} while waiting "
                                     f"for {what}")
        try:
            out = check()
            if out:
                return out
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(1.0)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def final_state(base: str, run_id: str, timeout_s: float, procs=()) -> str:
    """The flow run's state type once it is final."""
    return wait(f"flow run {run_id} to finish", lambda: (
        s := api(base, "GET", f"/flow_runs/{run_id}")["state"]["type"]) in FINAL_STATES and s,
        timeout_s, procs)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@contextlib.contextmanager
def prefect_server(home: Path, ui: bool = False, args: tuple[str, ...] = ()):
    """(api base URL, env for processes that talk to it); the server is stopped on the way
    out. The scheduler loop and the runner's polling are shortened (2 s). `args`: more
    `rollforge server` options (`--database URL`)."""
    for attempt in range(3):
        # the port is bound by the server seconds after it is picked: another process can take
        # it in between, and then the server is started again on another one
        port = free_port()
        base = f"http://127.0.0.1:{port}/api"
        env = {**standalone_env(), "PREFECT_HOME": str(home), "PREFECT_API_URL": base,
               "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
               "PREFECT_RUNNER_POLL_FREQUENCY": "2"}
        log = open(home / "server.log", "w")
        proc = subprocess.Popen([*ROLLFORGE, "server", "--port", str(port), *args]
                                + ([] if ui else ["--no-ui"]),
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            wait("the Prefect server", lambda: api(base, "GET", "/health"), 180, [proc])
            break
        except AssertionError:
            stop(proc)
            log.close()
            taken = "already in use" in (home / "server.log").read_text()  # the port
            if not taken or attempt == 2:
                raise
    try:
        yield base, env
    finally:
        stop(proc)
        log.close()


@contextlib.contextmanager
def rollforge_serve(env: dict, log_path: Path, *args: str):
    """`rollforge serve ARGS` against the server in `env`, stopped on the way out."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen([*ROLLFORGE, "serve", *args], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield proc
        finally:
            stop(proc)
