"""Kind `openenv`: an OpenEnv environment server, written here with openenv-core's own server
classes (tests/unit/data/openenv/guess_env.py, a number guess), started by the kind as a real
HTTP server on loopback from its venv, played through the kind's reset and step."""
from __future__ import annotations

import math
import pickle
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from envs.base import EnvError, StepContext
from envs.openenv import server
from envs.openenv.client import ServerUnreachable, get_json
from envs.openenv.env import OpenEnvEnv
from envs.registry import make_env
from rewards.aggregate import RewardConfig
from tasks.record import Task

try:
    server.venv_python()
except EnvError as exc:  # `make test` builds it (envs/openenv/setup_venv.sh)
    pytest.skip(str(exc), allow_module_level=True)

DATA = str(Path(__file__).parent / "data" / "openenv")
APP = {"app": "guess_env:app", "python_path": [DATA]}


def target(seed: int) -> int:  # the guess env's own rule
    return random.Random(seed).randint(1, 10)


COMMAND = {"command": ["python", "-m", "uvicorn", "guess_env:app", "--host", "127.0.0.1",
                       "--port", "{port}"], "cwd": DATA}


@pytest.fixture(scope="module")
def guess():
    """The kind with its started server: 3 seeds, 3 turns. The `command` test's server starts
    meanwhile (each takes seconds of imports)."""
    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(lambda: make_env("openenv", {**COMMAND, "seeds": [4]}).url())
        env = make_env("openenv", {**APP, "seeds": [0, 1, 2], "max_turns": 3})
        tasks = env.generate()
        other.result()
    yield env, tasks
    server.stop_all()


def play(env, task, actions):
    ctx = StepContext(None, None, RewardConfig())
    state, _ = env.reset(task)
    for a in actions:
        r = env.step(state, a, ctx)
        if r.done:
            return r
        state = r.state
    raise AssertionError("the episode did not end")


def seed_of(task) -> int:
    return task.payload["reset_args"]["seed"]


def test_tasks_are_the_environments_first_observations(guess):
    env, tasks = guess
    assert [seed_of(t) for t in tasks] == [0, 1, 2]
    assert {t.prompt for t in tasks} == {"Guess my number from 1 to 10."}
    assert {t.kind for t in tasks} == {"openenv"} and len({t.task_id for t in tasks}) == 3
    for t in tasks:
        env.validate(t)


def test_episode_reward_is_the_environments_with_each_step_a_named_outcome(guess):
    env, tasks = guess
    t = tasks[0]
    wrong = str(target(0) % 10 + 1)  # another number from 1 to 10
    r = play(env, t, [wrong, str(target(0))])
    g = r.info["grade"]
    assert r.info["end_reason"] == "done" and r.info["step_rewards"] == [0.0, 1.0]
    assert g.reward == 1.0 and g.pass_fraction == 1.0 and not g.infra_error
    assert g.test_names == ("step 1: reward 0", "step 2: reward 1", "episode: reward 1")
    # the turn limit ends an episode the environment did not end, with its reward so far
    r = play(env, t, [wrong] * 3)
    assert r.info["end_reason"] == "max_turns" and r.info["grade"].reward == 0.0
    assert r.info["grade"].test_outcomes == ("passed",) * 3 + ("failed",)


def test_observation_after_a_step_is_the_next_prompt_and_states_pickle(guess):
    env, tasks = guess
    ctx = StepContext(None, None, RewardConfig())
    state, obs = env.reset(tasks[1])
    r = env.step(state, "0", ctx)
    assert not r.done and r.observation == "Higher."
    assert pickle.loads(pickle.dumps(r.state))["actions"] == ({"message": "0"},)
    again = pickle.loads(pickle.dumps(env))
    assert isinstance(again, OpenEnvEnv) and again.config == env.config
    # a group's episodes share the first state: a step never changes it
    assert state["actions"] == ()


def test_concurrent_steps_share_a_server_that_holds_one_session_at_a_time(guess):
    env, tasks = guess  # openenv-core's default: max_concurrent_envs=1, others told to wait

    def win(t):
        return play(env, t, ["0", str(target(seed_of(t)))]).info["grade"].reward

    with ThreadPoolExecutor(6) as pool:
        assert list(pool.map(win, tasks * 2)) == [1.0] * 6


def test_a_server_at_an_address_plays_the_same(guess):
    env, tasks = guess
    url = env.url()
    by_url = make_env("openenv", {"url": url, "seeds": [0, 1, 2], "max_turns": 3})
    assert [t.task_id for t in by_url.generate()] != []
    r = play(by_url, tasks[2], [str(target(2))])
    assert r.info["grade"].reward == 1.0


def test_a_command_the_run_starts_serves_on_the_port_it_is_given(guess):
    env = make_env("openenv", {**COMMAND, "seeds": [4]})
    (task,) = env.generate()
    assert play(env, task, [str(target(4))]).info["grade"].reward == 1.0


def test_wrong_url_is_a_named_error_and_an_unscored_step():
    port = server.free_port()  # nothing listens there
    env = make_env("openenv", {"url": f"http://127.0.0.1:{port}", "seeds": [0]})
    with pytest.raises(EnvError, match=f"127.0.0.1:{port}"):
        env.generate()
    state = {"task": _task({"seed": 0}), "actions": (), "rewards": (), "shas": ("0" * 64,)}
    r = env.step(state, "3", StepContext(None, None, RewardConfig()))
    g = r.info["grade"]
    assert r.done and g.infra_error and math.isnan(g.reward)
    assert "did not answer" in r.info["error"] and f"127.0.0.1:{port}" in r.info["error"]


def _task(args):  # a task as a task file would carry it
    return Task(task_id="openenv/x", suite="openenv", family="x", difficulty=0, split="train",
                prompt="p", kind="openenv", payload={"reset_args": args, "obs_sha": "0" * 64})


def test_an_environment_that_raises_is_named_and_not_scored(guess):
    env, tasks = guess
    exploding = make_env("openenv", {**APP, "seeds": [0], "reset_args": {"explode": True}})
    with pytest.raises(EnvError, match="exploded on reset"):
        exploding.generate()
    r = play(env, tasks[0], ["boom"])
    assert r.info["end_reason"] == "infra_error" and math.isnan(r.info["grade"].reward)
    assert "exploded on a step" in r.info["error"]


def test_an_environment_that_does_not_replay_is_not_scored(guess):
    env, _ = guess
    fresh = make_env("openenv", {**APP, "seeds": [0], "reset_args": {"nonce": True},
                                 "max_turns": 3})
    r = play(fresh, fresh.generate()[0], ["1", "2", "3"])
    assert math.isnan(r.info["grade"].reward) and "did not replay" in r.info["error"]


def test_action_formats_the_environment_does_not_take_are_named(guess):
    env, tasks = guess
    with pytest.raises(EnvError, match=r"action_field='guess'.*\['message', 'metadata'\]"):
        make_env("openenv", {**APP, "seeds": [0], "action_field": "guess"}).generate()
    with pytest.raises(EnvError, match="action"):
        make_env("openenv", {**APP, "action": "xml"})
    with pytest.raises(EnvError, match="name one server"):
        make_env("openenv", {**APP, "url": "http://127.0.0.1:1"})
    # action: json -- text that is no action, or an action of the wrong shape, is the model's
    as_json = make_env("openenv", {**APP, "seeds": [0], "action": "json"})
    for text, err in [("7", "BadAction"), ("not json", "BadAction"),
                      ('{"guess": 7}', "ActionRefused")]:
        r = play(as_json, tasks[0], [text])
        g = r.info["grade"]
        assert r.info["end_reason"] == "bad_action" and g.reward == 0.0 and not g.infra_error
        assert g.error_type == err, (text, g)
    for right in [f'{{"message": "{target(0)}"}}', f'```json\n{{"message": "{target(0)}"}}\n```']:
        assert play(as_json, tasks[0], [right]).info["grade"].reward == 1.0


def test_eval_samples_grades_with_the_options_the_tasks_were_made_with(guess, tmp_path):
    """`rollforge eval --samples --kind openenv --options ...`: the source's options name the
    server, so its samples are scored (by default options they would name none)."""
    import json

    from flows.cli_eval import evaluate_file
    from tasks.files import save_tasks

    _, tasks = guess
    samples = tmp_path / "samples.jsonl"
    lines = [{"task_id": t.task_id, "completion": str(target(seed_of(t)))} for t in tasks]
    lines.append({"task_id": tasks[0].task_id, "completion": str(target(0) % 10 + 1)})
    samples.write_text("".join(json.dumps(x) + "\n" for x in lines))
    opts = json.dumps({**APP, "seeds": [0, 1, 2], "max_turns": 3})
    _, results, _ = evaluate_file(str(samples), workers=2, ks=(1,), kind="openenv",
                                  options=opts)
    assert [r.breakdown.reward for r in results] == [1.0, 1.0, 1.0, 0.0]
    assert not any(r.breakdown.infra_error for r in results)
    # a task file of the kind's tasks, played by the kind with those options (`--tasks --kind`)
    task_file = save_tasks(tasks, tmp_path / "tasks.jsonl")
    _, results, _ = evaluate_file(str(samples), workers=2, ks=(1,), kind="openenv",
                                  options=opts, tasks_file=str(task_file))
    assert [r.breakdown.reward for r in results] == [1.0, 1.0, 1.0, 0.0]


def test_no_server_named_is_refused_by_name_and_hacks_need_none():
    with pytest.raises(EnvError, match="name no server"):
        make_env("openenv", {"seeds": [0]}).generate()
    assert make_env("openenv").attack_tasks() == []  # `rollforge hacks` with every kind


def test_started_servers_stop(guess):
    urls = [make_env("openenv", {**o, "seeds": [5]}).url() for o in (APP, COMMAND)]
    procs = [s.proc for s in server._servers.values()]
    server.stop_all()
    assert len(procs) == 2 and all(p.poll() is not None for p in procs)
    for url in urls:  # the command's own process too
        with pytest.raises(ServerUnreachable):
            get_json(url, "/health", 1.0)


def test_a_server_whose_port_was_taken_before_its_bind_starts_on_another(tmp_path):
    """The port is picked free and bound by the server after its imports; a server that
    exits saying it is in use is started again on another port (a stand-in server here)."""
    fake = tmp_path / "fake_server.py"
    fake.write_text(
        "import http.server, sys\n"
        "port, marker = int(sys.argv[1]), sys.argv[2]\n"
        "with open(marker, 'a') as fh:\n"
        "    fh.write(f'{port}\\n')\n"
        "if len(open(marker).read().split()) == 1:\n"
        "    sys.exit(f'[Errno 98] error while attempting to bind on {port}: address already "
        "in use')\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.send_header('Content-Type', 'application/json')\n"
        "        self.end_headers(); self.wfile.write(b'{}')\n"
        "http.server.HTTPServer(('127.0.0.1', port), H).serve_forever()\n")
    marker = tmp_path / "ports"
    srv = server.Server(["command", "python", str(fake), "{port}", str(marker)], "stand-in", None,
                        [], 60)
    try:
        ports = marker.read_text().split()
        assert len(ports) == 2 and ports[0] != ports[1]
        assert srv.url == f"http://127.0.0.1:{ports[1]}"
        assert get_json(srv.url, "/health", 5.0) == {}
    finally:
        srv.stop()
