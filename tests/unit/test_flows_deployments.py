"""What operators touch: deployments/prefect.yaml agrees with the flows and with
`rollforge serve`; the server and serve commands refuse what they cannot do safely; a hung
rollout shard is cancelled at its deadline; the iteration's artifacts render."""
import argparse
import inspect
import math
import os
from pathlib import Path

import pandas as pd
import pytest
import yaml

from flows.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def prefect_yaml():
    return yaml.safe_load((ROOT / "deployments/prefect.yaml").read_text())


def test_prefect_yaml_entrypoints_are_flows_whose_signatures_take_its_parameters(prefect_yaml):
    import importlib

    from prefect import Flow

    names = set()
    for d in prefect_yaml["deployments"]:
        path, fn = d["entrypoint"].split(":")
        assert (ROOT / path).is_file(), d["entrypoint"]
        flow = getattr(importlib.import_module(path[:-3].replace("/", ".")), fn)
        assert isinstance(flow, Flow)
        assert set(d["parameters"]) <= set(inspect.signature(flow.fn).parameters)
        # the transfer is run on demand; the others on a schedule
        assert bool(d.get("schedules")) == (d["name"] != "eval-transfer")
        assert all(s["cron"] for s in d.get("schedules", []))
        names.add(f"{flow.name}/{d['name']}")
    assert names == {"rollforge-train/train", "rollforge-evaluate/evaluate",
                     "rollforge-evaluate-model/evaluate-model",
                     "rollforge-eval-transfer/eval-transfer"}


def _serve_args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{
        "config": "configs/default.yaml", "run_id": None, "overrides": [],
        "train_cron": "0 2 * * *", "train_interval": None, "eval_cron": "0 */6 * * *",
        "eval_run_dir": None, "no_schedules": False, **kw})


def test_serve_registers_the_same_deployments_as_prefect_yaml(prefect_yaml):
    from flows.cli_serve import build_deployments
    from flows.iteration import FORM_DEFAULT, train_flow

    served = {d.name: d for d in build_deployments(_serve_args())}
    # prefect.yaml's train deployment takes the flow's default config (configs/default.yaml);
    # serve writes the same file's config out whole
    flow_defaults = {"train": {"config": FORM_DEFAULT.model_dump(mode="json")}, "evaluate": {},
                     "evaluate-model": {}, "eval-transfer": {}}
    assert set(served) == {d["name"] for d in prefect_yaml["deployments"]}
    for d in prefect_yaml["deployments"]:
        s = served[d["name"]]
        assert s.parameters == {**flow_defaults[d["name"]], **d["parameters"]}
        assert [x.schedule.cron for x in s.schedules] == [x["cron"] for x in
                                                          d.get("schedules", [])]
        assert s.entrypoint.endswith(d["entrypoint"].split(":")[1])
    schema = served["train"]._parameter_openapi_schema.model_dump()
    assert set(schema["properties"]) == {"config", "config_file", "overrides"}
    assert schema["properties"]["config"]["default"] == FORM_DEFAULT.model_dump(mode="json")
    assert train_flow.validate_parameters({})["config"] == FORM_DEFAULT
    model_form = served["evaluate-model"]._parameter_openapi_schema.model_dump()["properties"]
    assert {"model", "sources", "n", "split", "seed", "store", "chunk_size"} <= set(model_form)
    transfer_form = served["eval-transfer"]._parameter_openapi_schema.model_dump()
    assert set(transfer_form["required"]) == {"base", "runs", "sources", "out"}
    from flows.eval_model import parse_source  # the form's default sources are ones it takes
    from flows.config import load_config, task_sources
    assert [parse_source(x) for x in served["eval-transfer"].parameters["sources"]] == \
        task_sources(load_config("configs/default.yaml"))


def _defs(schema: dict) -> dict:
    return schema.get("definitions") or schema["$defs"]


def test_the_train_form_is_the_typed_config_with_the_config_files_values():
    """Prefect's form is built from this schema: a section per stage, every field described,
    enums as choices, bounds; the deployment's parameters fill it with the config file."""
    import re

    from pydantic import BaseModel

    from flows.cli_serve import build_deployments
    from flows.config import RunConfig, load_config

    train, evaluation, *_ = build_deployments(_serve_args(config="configs/tiny.yaml",
                                                         overrides=["rl.lr=1e-4"]))
    schema = train._parameter_openapi_schema.model_dump()
    defs = _defs(schema)
    sections = {k for k, f in RunConfig.model_fields.items() if isinstance(f.default, BaseModel)}
    assert sections == {"tasks", "cluster", "sandbox", "rewards", "policy", "sampling", "sft",
                        "rl", "episodes", "threads"}
    assert set(defs["RunConfig"]["properties"]) == set(RunConfig.model_fields)
    for name, d in defs.items():
        for field, p in d["properties"].items():
            desc = p.get("description", "")
            assert desc, f"{name}.{field} has no description"
            # the UI renders descriptions as Markdown: a bare <tag> would vanish
            assert not re.search(r"<[A-Za-z/]", re.sub(r"`[^`]*`", "", desc)), (name, field)
    rl = defs["RLConfig"]["properties"]
    assert rl["algorithm"]["enum"] == ["grpo", "ppo", "rloo"]
    assert rl["lr"]["exclusiveMinimum"] == 0
    assert defs["SandboxConfig"]["properties"]["backend"]["enum"] == ["process", "docker"]
    assert defs["SamplingConfig"]["properties"]["top_p"]["maximum"] == 1
    for p in ("config", "config_file", "overrides"):
        assert schema["properties"][p]["description"]
    expected = load_config("configs/tiny.yaml", ["rl.lr=1e-4"]).model_dump(mode="json")
    assert train.parameters == {"config": expected}
    assert evaluation.parameters == {"run_dir": "runs/tiny"}
    version = evaluation._parameter_openapi_schema.model_dump()["properties"]["version"]
    assert version["anyOf"][0]["minimum"] == 0 and version["description"]


def test_form_values_are_checked_and_a_partial_config_is_refused_naming_what_is_missing():
    from prefect.exceptions import ParameterTypeError

    from flows.config import ConfigError
    from flows.iteration import FORM_DEFAULT, train_flow
    from flows.rounds import evaluate_flow
    from flows.parameters import config_dict

    whole = FORM_DEFAULT.model_dump(mode="json")
    bad = {**whole, "rl": {**whole["rl"], "lr": -1.0}}
    with pytest.raises(ParameterTypeError, match="lr"):
        train_flow.validate_parameters({"config": bad})
    with pytest.raises(ParameterTypeError, match="algorithm"):
        train_flow.validate_parameters({"config": {**whole, "rl": {**whole["rl"],
                                                                   "algorithm": "dpo"}}})
    with pytest.raises(ParameterTypeError, match="version"):
        evaluate_flow.validate_parameters({"run_dir": "runs/tiny", "version": -1})
    # task sources, each with its kind's free options, go through the form's type
    src = [{"kind": "io", "options": {"families": ["add"], "tasks_per_family": 4}, "weight": 2}]
    given = train_flow.validate_parameters(
        {"config": {**whole, "tasks": {**whole["tasks"], "sources": src}}})["config"]
    assert given.tasks.sources[0].options == src[0]["options"]
    assert config_dict(given)["tasks"]["sources"][0]["weight"] == 2
    partial = train_flow.validate_parameters({"config": {"iterations": 4, "rl": {"lr": 1e-4}}})
    with pytest.raises(ConfigError,
                       match=r"not given: run_id, out_dir, .*tasks, .*overrides=\[\"iterations=4\""):
        config_dict(partial["config"])


def test_server_refuses_an_address_other_than_loopback(capsys):
    assert main(["server", "--host", "0.0.0.0"]) == 2
    assert "expected a loopback address" in capsys.readouterr().err


def test_server_refuses_a_database_prefect_cannot_run_on(capsys):
    assert main(["server", "--database", "mysql://op:hunter2@127.0.0.1/prefect"]) == 2
    err = capsys.readouterr().err
    assert "'mysql' is not one Prefect's server runs on" in err and "hunter2" not in err


def test_server_names_an_unreachable_database_without_its_password(capsys):
    import socket  # noqa: PLC0415

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["server", "--database", f"postgresql://op:hunter2@127.0.0.1:{port}/prefect"]) == 2
    err = capsys.readouterr().err
    assert f"cannot reach the database postgresql+asyncpg://op:***@127.0.0.1:{port}/prefect" in err
    assert "hunter2" not in err


def test_serve_without_a_server_says_how_to_start_one(capsys, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert main(["serve"]) == 2
    assert "rollforge server" in capsys.readouterr().err


def test_train_flow_takes_a_config_file_with_overrides_or_a_dict_not_both():
    from flows.iteration import resolve_config

    cfg = resolve_config(config_file="configs/tiny.yaml", run_id="nightly", iterations=5,
                         overrides=["rl.lr=1e-4"])
    assert (cfg.run_id, cfg.iterations, cfg.rl.lr) == ("nightly", 5, 1e-4)
    again = resolve_config(config=cfg.model_dump(mode="json"), overrides=["iterations=6"])
    assert again.iterations == 6 and again.run_id == "nightly"
    with pytest.raises(ValueError, match="not both"):
        resolve_config(config=cfg.model_dump(mode="json"), config_file="configs/tiny.yaml")


def test_hung_rollout_shard_is_cancelled_at_its_deadline():
    from distributed import Client, LocalCluster

    from envs.io.procedural import generate_suite
    from envs.registry import env_for_task
    from flows.episode_exec import step_many
    from flows.rollouts import ShardTimeout
    from rewards.aggregate import RewardConfig
    from sandbox.config import SandboxConfig

    task = generate_suite(["add"], [1], 1)[0]
    hang = "    import time\n    time.sleep(30)\n    return 0\n"
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        with pytest.raises(ShardTimeout, match="1 of 1 episode steps unfinished") as exc:
            step_many(client, [(env_for_task(task), task, hang)], SandboxConfig(timeout_s=4),
                      RewardConfig(per_test_timeout_s=30), timeout_s=1.0)
    # the message says where the step was: on the one worker, running, heard from
    assert "1 x processing on " in str(exc.value) and "(running, last heard" in str(exc.value)


def test_artifacts_render_the_metrics_table_and_the_reward_curve(tmp_path):
    from flows.artifacts import artifact_key, curve_series, metrics_table, reward_curve_png, sparkline

    m = pd.DataFrame({"iteration": [0, 1], "rollout/mean_reward": [0.25, 0.5],
                      "heldout/pass_greedy": [math.nan, 0.5]})
    assert artifact_key("Default_Run.2", "metrics") == "rollforge-default-run-2-metrics"
    assert metrics_table(m) == [
        {"iteration": 0, "reward": 0.25, "held-out greedy": None},
        {"iteration": 1, "reward": 0.5, "held-out greedy": 0.5}]
    assert sparkline([0.0, 0.5, 1.0]) == "▁▄█"
    start = {"heldout/pass_greedy": 0.25, "heldout/pass_sampled": 0.125}
    assert curve_series(m, start) == {  # held-out from the SFT start (at -1) on
        "mean reward": ([0, 1], [0.25, 0.5]), "held-out greedy": ([-1, 1], [0.25, 0.5]),
        "held-out sampled": ([-1], [0.125])}
    assert curve_series(m)["held-out greedy"] == ([1], [0.5])
    png = reward_curve_png(m, tmp_path / "plots" / "curve.png", start)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "plots" / "curve.png").read_bytes() == png
    assert not [p for p in os.listdir(tmp_path / "plots") if p.startswith(".")]
