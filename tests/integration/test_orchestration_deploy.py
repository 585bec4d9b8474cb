"""Deployments on a real Prefect server: `rollforge server` on loopback (temporary
PREFECT_HOME), `rollforge serve` registers the training and evaluation deployments, a run is
triggered through the REST API with a typed parameter set, and it completes with its
artifacts (metrics table, reward curve); then a schedule added to the evaluation deployment
fires and its run completes with its artifact. The server's scheduler loop and the runner's
polling are shortened (2 s) so a schedule fires within the test."""
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from flows.env import standalone_env
from storage.registry import finished_iterations

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
ROOT = Path(__file__).resolve().parents[2]
ROLLFORGE = [sys.executable, "-m", "flows.cli"]



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(base: str, method: str, path: str, body=None, attempts: int = 8):
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


def _wait(what: str, check, timeout_s: float, procs=()):
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


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    base = f"http://127.0.0.1:{port}/api"
    env = {**standalone_env(), "PREFECT_HOME": str(home), "PREFECT_API_URL": base,
           "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2", "PREFECT_RUNNER_POLL_FREQUENCY": "2"}
    log = open(home / "server.log", "w")
    proc = subprocess.Popen([*ROLLFORGE, "server", "--port", str(port), "--no-ui"], cwd=ROOT,
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait("the Prefect server", lambda: _api(base, "GET", "/health"), 180, [proc])
        yield base, env, home
    finally:
        _stop(proc)
        log.close()


def test_triggered_deployment_run_completes_with_its_artifacts(server, tmp_path):
    base, env, home = server
    serve_log = open(tmp_path / "serve.log", "w")
    out = tmp_path / "runs"
    # crons 12 hours from now: the defaults (02:00, every 6 h) could fire during the test and
    # start runs of their own beside the ones it waits for
    far = (datetime.datetime.now(datetime.timezone.utc).hour + 12) % 24
    crons = {"train": f"0 {far} * * *", "eval": f"30 {far} * * *"}
    serve = subprocess.Popen([*ROLLFORGE, "serve", "--config", "configs/tiny.yaml",
                              "--train-cron", crons["train"], "--eval-cron", crons["eval"],
                              "--eval-run-dir", str(out / "tiny")], cwd=ROOT,
                             env=env, stdout=serve_log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        train = _wait("the train deployment", lambda: _api(
            base, "GET", "/deployments/name/rollforge-train/train"), 120, [serve])
        # serve registers the two one after the other: wait for the second as well
        evaluation = _wait("the evaluate deployment", lambda: _api(
            base, "GET", "/deployments/name/rollforge-evaluate/evaluate"), 60, [serve])
        # typed parameters (the UI's form) and schedules are registered
        schema = train["parameter_openapi_schema"]
        assert set(schema["properties"]) == {"config", "config_file", "overrides"}
        rl = schema["definitions"]["RLConfig"]["properties"]
        assert rl["algorithm"]["enum"] == ["grpo", "ppo", "rloo"] and rl["lr"]["description"]
        assert set(train["parameters"]) == {"config"}  # the whole tiny config
        assert (train["parameters"]["config"]["run_id"], train["parameters"]["config"]["sft"]
                ["steps"]) == ("tiny", 5)
        assert [s["schedule"]["cron"] for s in train["schedules"]] == [crons["train"]]
        assert [s["schedule"]["cron"] for s in evaluation["schedules"]] == [crons["eval"]]
        assert set(evaluation["parameter_openapi_schema"]["properties"]) == {"run_dir", "version"}

        # the deployment's config (tiny), two fields changed by overrides
        run = _api(base, "POST", f"/deployments/{train['id']}/create_flow_run", {
            "parameters": {"overrides": ["iterations=1", f"out_dir={out}"]}})
        state = _wait("the triggered run to finish", lambda: (
            s := _api(base, "GET", f"/flow_runs/{run['id']}")["state"]["type"]) in (
            "COMPLETED", "FAILED", "CRASHED", "CANCELLED") and s, 300, [serve])
        assert state == "COMPLETED", (tmp_path / "serve.log").read_text()[-4000:]
        assert finished_iterations(str(out / "tiny")) == [0]

        arts = _api(base, "POST", "/artifacts/filter",
                    {"flow_runs": {"id": {"any_": [run["id"]]}}})
        by_key = {a["key"]: a for a in arts}
        table = by_key["rollforge-tiny-metrics"]
        assert table["type"] == "table"
        rows = json.loads(table["data"]) if isinstance(table["data"], str) else table["data"]
        assert [r["iteration"] for r in rows] == [0]
        assert -1.0 <= rows[0]["reward"] <= 1.0
        curve = by_key["rollforge-tiny-reward-curve"]
        assert curve["type"] == "markdown" and "data:image/png;base64," in curve["data"]
        link = by_key["rollforge-tiny-reward-curve-file"]
        assert (out / "tiny" / "plots" / "reward_curve.png").is_file()
        assert "reward_curve.png" in link["data"]

        # a schedule fires: every 10 s for the evaluation deployment, on the run just made
        _api(base, "POST", f"/deployments/{evaluation['id']}/schedules",
             [{"schedule": {"interval": 10.0}, "active": True}])

        def scheduled_eval_done():
            runs = _api(base, "POST", "/flow_runs/filter", {
                "deployments": {"id": {"any_": [evaluation["id"]]}},
                "flow_runs": {"state": {"type": {"any_": ["COMPLETED", "FAILED", "CRASHED"]}}}})
            return [r for r in runs if r["auto_scheduled"]]
        fired = _wait("a scheduled evaluation run", scheduled_eval_done, 180, [serve])[0]
        assert fired["state"]["type"] == "COMPLETED", (tmp_path / "serve.log").read_text()[-4000:]
        assert fired["parameters"] == {"run_dir": str(out / "tiny")}
        arts = _api(base, "POST", "/artifacts/filter", {"flow_runs": {"id": {"any_": [fired["id"]]}}})
        assert [a["key"] for a in arts] == ["rollforge-tiny-evaluation"]
    finally:
        _stop(serve)
        serve_log.close()
