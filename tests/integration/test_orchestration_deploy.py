"""Deployments on a real Prefect server: `rollforge server` on loopback (temporary
PREFECT_HOME), `rollforge serve` registers the training and evaluation deployments, a run is
triggered through the REST API with a typed parameter set, and it completes with its
artifacts (metrics table, reward curve); then a schedule added to the evaluation deployment
fires and its run completes with its artifact. The server's scheduler loop and the runner's
polling are shortened (2 s) so a schedule fires within the test."""
import datetime
import json

import pytest
from prefect_server import api, final_state, prefect_server, rollforge_serve, wait

from storage.registry import finished_iterations

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-home")
    with prefect_server(home) as (base, env):
        yield base, env, home


def test_triggered_deployment_run_completes_with_its_artifacts(server, tmp_path):
    base, env, home = server
    out = tmp_path / "runs"
    # crons 12 hours from now: the defaults (02:00, every 6 h) could fire during the test and
    # start runs of their own beside the ones it waits for
    far = (datetime.datetime.now(datetime.timezone.utc).hour + 12) % 24
    crons = {"train": f"0 {far} * * *", "eval": f"30 {far} * * *"}
    with rollforge_serve(env, tmp_path / "serve.log", "--config", "configs/tiny.yaml",
                         "--train-cron", crons["train"], "--eval-cron", crons["eval"],
                         "--eval-run-dir", str(out / "tiny")) as serve:
        train = wait("the train deployment", lambda: api(
            base, "GET", "/deployments/name/rollforge-train/train"), 120, [serve])
        # serve registers the two one after the other: wait for the second as well
        evaluation = wait("the evaluate deployment", lambda: api(
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
        transfer = wait("the eval-transfer deployment", lambda: api(
            base, "GET", "/deployments/name/rollforge-eval-transfer/eval-transfer"), 60, [serve])
        assert transfer["schedules"] == []  # on demand
        assert transfer["parameters"]["runs"] == [str(out / "tiny")]

        # the deployment's config (tiny), two fields changed by overrides
        run = api(base, "POST", f"/deployments/{train['id']}/create_flow_run", {
            "parameters": {"overrides": ["iterations=1", f"out_dir={out}"]}})
        state = final_state(base, run["id"], 300, [serve])
        assert state == "COMPLETED", (tmp_path / "serve.log").read_text()[-4000:]
        assert finished_iterations(str(out / "tiny")) == [0]

        arts = api(base, "POST", "/artifacts/filter",
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
        api(base, "POST", f"/deployments/{evaluation['id']}/schedules",
            [{"schedule": {"interval": 10.0}, "active": True}])

        def scheduled_eval_done():
            runs = api(base, "POST", "/flow_runs/filter", {
                "deployments": {"id": {"any_": [evaluation["id"]]}},
                "flow_runs": {"state": {"type": {"any_": ["COMPLETED", "FAILED", "CRASHED"]}}}})
            return [r for r in runs if r["auto_scheduled"]]
        fired = wait("a scheduled evaluation run", scheduled_eval_done, 180, [serve])[0]
        assert fired["state"]["type"] == "COMPLETED", (tmp_path / "serve.log").read_text()[-4000:]
        assert fired["parameters"] == {"run_dir": str(out / "tiny")}
        arts = api(base, "POST", "/artifacts/filter", {"flow_runs": {"id": {"any_": [fired["id"]]}}})
        assert [a["key"] for a in arts] == ["rollforge-tiny-evaluation"]
