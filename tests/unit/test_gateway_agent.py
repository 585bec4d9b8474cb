"""An unmodified agent as the policy's client (issue 38 item 5): examples/agent_client.py, which
imports only `openai` and the standard library, run as a subprocess against a real gateway
(uvicorn on loopback) serving a freshly initialised tiny policy with `--episodes`, plays the
run's own `io` tasks: its rows land in the store with the reward the kind's grader gives in the
sandbox and the tokens the sampler drew; an update on those rows publishes the next version
with other weights; a wrong key, an unknown episode or task, and an episode the policy was
never asked in are named errors."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import openai
import pytest
import torch

from envs.base import StepContext
from flows.config import load_config
from flows.sampler import policy_tokenizer
from gateway.app import Gateway
from gateway.play import Episodes, store_dir
from gateway.records import EpisodeLog
from gateway.server import Served
from sandbox.registry import make_sandbox
from storage import trajectories
from training import checkpoints
from training.policy import build_policy, load_policy, save_policy

ROOT = Path(__file__).resolve().parents[2]
KEY = "agent-key-5678"
AGENT = ROOT / "examples" / "agent_client.py"


def _overrides(out_dir) -> list[str]:
    return ["run_id=agentrun", f"out_dir={out_dir}", "tasks.families=[add]",
            "tasks.difficulties=[1]", "tasks.tasks_per_family=4"]


def _run_at_v0(out_dir):
    """The run's config, with a freshly initialised tiny policy published as version 0."""
    cfg = load_config(ROOT / "configs/tiny.yaml", _overrides(out_dir))
    torch.manual_seed(0)
    staging = checkpoints.staging_dir(cfg.run_dir, 0)
    save_policy(build_policy(cfg.policy).eval(), str(staging / "model"))
    checkpoints.publish(staging, checkpoints.checkpoint_dir(cfg.run_dir, 0), {"version": 0})
    return cfg


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A gateway with --episodes on a fresh tiny policy (version 0) of a run of `add` tasks."""
    cfg = _run_at_v0(tmp_path_factory.mktemp("runs"))
    records = EpisodeLog(Path(cfg.run_dir) / "gateway" / "episodes")
    play = Episodes(cfg, records, policy_tokenizer(cfg.run_dir, 0))
    srv = Served(Gateway(cfg, 0, KEY, records, None, play))
    yield srv, play
    srv.stop()


def _agent(srv, *args, key=KEY):
    env = {**os.environ, "ROLLFORGE_GATEWAY_KEY": key}
    return subprocess.run([sys.executable, str(AGENT), "--base-url", srv.url, "--model",
                           "agentrun", "--max-tokens", "12", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def _client(srv, key=KEY):
    return openai.OpenAI(base_url=srv.url, api_key=key, max_retries=0)


def test_the_agent_imports_only_openai_and_the_standard_library():
    import ast

    tree = ast.parse(AGENT.read_text())
    tops = {(a.name if isinstance(n, ast.Import) else n.module).split(".")[0]
            for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in (n.names if isinstance(n, ast.Import) else [n])}
    assert tops - set(sys.stdlib_module_names) == {"openai"}


def test_the_agents_episodes_are_graded_by_the_kind_and_stored_token_for_token(served):
    srv, play = served
    task_id = sorted(play.tasks)[0]
    proc = _agent(srv, "--episodes", "2", "--task-id", task_id)
    assert proc.returncode == 0, proc.stderr[-2000:]
    played = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [p["task_id"] for p in played] == [task_id] * 2
    assert all(p["kind"] == "io" and p["rows"] >= 1 for p in played)
    df = trajectories.read_trajectories(store_dir(play.cfg), 0)
    task = play.tasks[task_id]
    sandbox = make_sandbox(play.cfg.sandbox)
    try:
        for p in played:
            rows = df[df["episode_id"] == p["episode_id"]]
            turn, = play.records.turns(p["episode_id"])
            choice, = turn["choices"]
            row = rows.iloc[0]
            # the tokens and log-probs the sampler drew, as the gateway recorded them
            assert list(row["prompt_token_ids"]) == turn["prompts"][0]
            assert list(row["completion_token_ids"]) == choice["token_ids"]
            assert [float(x) for x in row["sampling_logprobs"]] == [  # the store's float32
                float(np.float32(x)) for x in choice["logprobs"]]
            # the reward is the io kind's own grade of the reply the agent sent
            want, _ = play.env_of(task).grade(task, choice["text"], StepContext(
                sandbox, play.cfg.sandbox.limits(), play.cfg.rewards))
            assert row["reward"] == want.reward == p["reward"]
            assert row["status"] == want.status == p["status"]
            assert (row["kind"], row["task_id"], row["group_id"]) == (
                "io", task_id, f"gateway:{task_id}")
            assert list(row["test_outcomes"]) == list(want.test_outcomes)
    finally:
        sandbox.close()


def test_an_update_on_the_gateways_rows_publishes_new_weights(served):
    """A group with an outcome that differs: the test, a client too, plays the same task and
    sends the task's reference, which the grader pays 1; the CLI's update then trains."""
    srv, play = served
    task_id = sorted(play.tasks)[1]
    assert _agent(srv, "--task-id", task_id).returncode == 0
    client = _client(srv)
    ep = client.post("/rollforge/episodes", cast_to=object, body={"task_id": task_id})
    client.completions.create(model="agentrun", prompt=ep["observation"], max_tokens=8,
                              extra_headers={"X-Episode-Id": ep["episode_id"]})
    done = client.post(f"/rollforge/episodes/{ep['episode_id']}/step", cast_to=object,
                       body={"action": play.tasks[task_id].reference})
    assert done["done"] and done["reward"] == 1.0 and done["solved"] is True
    cfg = play.cfg
    args = [a for o in _overrides(cfg.out_dir) for a in ("--set", o)]
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "gateway", "--config",
                           str(ROOT / "configs/tiny.yaml"), *args, "--version", "0", "--train"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "v0 -> v1" in proc.stdout
    assert checkpoints.versions(cfg.run_dir)[-1] == 1
    before = load_policy(str(checkpoints.checkpoint_dir(cfg.run_dir, 0) / "model"))
    after = load_policy(str(checkpoints.checkpoint_dir(cfg.run_dir, 1) / "model"))
    moved = [not torch.equal(a, b) for a, b in zip(before.parameters(), after.parameters())]
    assert any(moved)


def test_a_wrong_key_is_a_named_error_of_the_agent(served):
    srv, _ = served
    proc = _agent(srv, key="not-the-key")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "401 invalid_api_key" in proc.stderr


def test_an_unknown_episode_or_task_is_a_named_404(served):
    client = _client(served[0])
    with pytest.raises(openai.NotFoundError) as exc:
        client.post("/rollforge/episodes/ep-nosuch/step", cast_to=object, body={"action": "x"})
    assert exc.value.code == "episode_not_found"
    with pytest.raises(openai.NotFoundError) as exc:
        client.post("/rollforge/episodes", cast_to=object, body={"task_id": "nosuch"})
    assert exc.value.code == "task_not_found"


def test_an_episode_the_policy_was_never_asked_in_is_refused_and_stays_open(served):
    client = _client(served[0])
    ep = client.post("/rollforge/episodes", cast_to=object, body={})
    with pytest.raises(openai.ConflictError) as exc:
        client.post(f"/rollforge/episodes/{ep['episode_id']}/step", cast_to=object,
                    body={"action": "x"})
    assert exc.value.code == "no_policy_turns"
    with pytest.raises(openai.BadRequestError) as exc:  # and a step needs a text action
        client.post(f"/rollforge/episodes/{ep['episode_id']}/step", cast_to=object,
                    body={"action": 3})
    assert exc.value.code == "invalid_action"


def test_a_gateway_without_episodes_says_how_to_serve_them(tmp_path):
    cfg = _run_at_v0(tmp_path)
    srv = Served(Gateway(cfg, 0, KEY, EpisodeLog(tmp_path / "rec")))
    try:
        with pytest.raises(openai.NotFoundError) as exc:
            _client(srv).post("/rollforge/episodes", cast_to=object, body={})
        assert exc.value.code == "episodes_not_served"
    finally:
        srv.stop()


def _publish(cfg, version: int) -> None:
    staging = checkpoints.staging_dir(cfg.run_dir, version)
    torch.manual_seed(version)
    save_policy(build_policy(cfg.policy).eval(), str(staging / "model"))
    checkpoints.publish(staging, checkpoints.checkpoint_dir(cfg.run_dir, version),
                        {"version": version})


def test_an_episode_a_following_gateway_moved_to_a_new_version_in_is_stored_under_its_first(
        tmp_path, monkeypatch):
    """A gateway started at v0 with `--follow`: v1 is published before an episode's first turn
    and v2 before its second. The episode's rows go whole into the shard of v1, the version that
    began it (a take is by episode: gateway/train.py), each row with the version that sampled
    it."""
    from gateway import app as gateway_app

    monkeypatch.setattr(gateway_app, "FOLLOW_CHECK_S", 0.0)
    cfg = _run_at_v0(tmp_path)
    records = EpisodeLog(tmp_path / "rec")
    play = Episodes(cfg, records, policy_tokenizer(cfg.run_dir, 0))
    srv = Served(Gateway(cfg, 0, KEY, records, None, play, follow=True))
    try:
        client = _client(srv)
        ep = client.post("/rollforge/episodes", cast_to=object, body={})
        ask = dict(model="agentrun", max_tokens=6, extra_headers={"X-Episode-Id": ep["episode_id"]})
        _publish(cfg, 1)
        client.completions.create(prompt=ep["observation"], **ask)
        _publish(cfg, 2)
        client.completions.create(prompt=ep["observation"] + "\n# again\n", **ask)
        done = client.post(f"/rollforge/episodes/{ep['episode_id']}/step", cast_to=object,
                           body={"action": "def f(x):\n    return x\n"})
        assert done["done"] and done["rows"] == 2
        assert trajectories.iterations_written(store_dir(cfg)) == [1]
        df = trajectories.read_trajectories(store_dir(cfg), 1)
        assert sorted(df["policy_version"]) == [1, 2]
        assert set(df["episode_id"]) == {ep["episode_id"]}
    finally:
        srv.stop()


def test_a_restarted_gateway_takes_up_the_episodes_left_open(tmp_path):
    """Episodes open when a gateway stops (one asked, one not yet) are stepped to the end at a
    new gateway on the same records folder; a finished one stays finished."""
    cfg = _run_at_v0(tmp_path)
    records = EpisodeLog(tmp_path / "rec")

    def serve():
        return Served(Gateway(cfg, 0, KEY, records, None,
                              Episodes(cfg, records, policy_tokenizer(cfg.run_dir, 0))))
    srv = serve()
    client = _client(srv)
    asked, fresh, done = (client.post("/rollforge/episodes", cast_to=object, body={})
                          for _ in range(3))
    for ep in (asked, done):
        client.completions.create(model="agentrun", prompt=ep["observation"], max_tokens=4,
                                  extra_headers={"X-Episode-Id": ep["episode_id"]})
    client.post(f"/rollforge/episodes/{done['episode_id']}/step", cast_to=object,
                body={"action": "x"})
    srv.stop()
    srv = serve()
    try:
        client = _client(srv)
        client.completions.create(model="agentrun", prompt=fresh["observation"], max_tokens=4,
                                  extra_headers={"X-Episode-Id": fresh["episode_id"]})
        for ep in (asked, fresh):
            out = client.post(f"/rollforge/episodes/{ep['episode_id']}/step", cast_to=object,
                              body={"action": "def f(x):\n    return x\n"})
            assert out["done"] and out["rows"] == 1
        with pytest.raises(openai.NotFoundError):
            client.post(f"/rollforge/episodes/{done['episode_id']}/step", cast_to=object,
                        body={"action": "x"})
        df = trajectories.read_trajectories(store_dir(cfg), 0)
        assert set(df["episode_id"]) == {asked["episode_id"], fresh["episode_id"],
                                         done["episode_id"]}
        assert not list((tmp_path / "rec").glob("*/open.pkl"))
    finally:
        srv.stop()
