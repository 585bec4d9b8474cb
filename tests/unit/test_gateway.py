"""The OpenAI-compatible gateway (gateway/) as an API, served for real (uvicorn on loopback) in
front of a freshly initialised tiny policy and driven by the real `openai` client: what it
records is, token for token, what the sampler (flows/sampler.py) returned; a wrong key is 401;
bad requests are named 400s in OpenAI's error shape and record nothing; streamed answers are the
recorded ones; the command refuses to serve without a key and prints an episode's rows.

Conversations made into rows: test_gateway_episodes.py; the calls to the sampler (batching,
`--follow`): test_gateway_sampling.py."""
import json
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from flows import sampler
from gateway.rows import episode_rows
from storage.schema import rows_to_table

# served, served_chat: fixtures, imported so that the tests can request them by name
from gateway_common import KEY, TEMPLATE, connect, served, served_chat  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def spy(monkeypatch):
    """What flows/sampler.sample returned to the gateway, call by call (the real sampler)."""
    calls = []
    real = sampler.sample

    def wrapped(cfg, version, request, progress=None):
        out = real(cfg, version, request, progress)
        calls.append((request, out))
        return out
    monkeypatch.setattr(sampler, "sample", wrapped)
    return calls


def test_models_lists_the_runs_policy(served):
    srv, gw = served
    assert [m.id for m in connect(srv).models.list()] == ["gw", "gw-v0"]


def test_the_record_and_the_rows_are_token_for_token_what_the_sampler_returned(served, spy):
    srv, gw = served
    resp = connect(srv, episode="exact-1").completions.create(
        model="gw", prompt="def add(a, b):\n", n=3, max_tokens=12, temperature=1.0, seed=7,
        logprobs=0)
    (request, sampled), = spy
    assert request.prompts == (tuple(gw.tok.encode("def add(a, b):\n")),)
    assert request.n == 3 and request.max_new_tokens == 12 and request.seed == 7
    rec, = gw.records.turns("exact-1")
    assert rec["prompts"] == [list(request.prompts[0])] and rec["policy_version"] == 0
    assert [c["token_ids"] for c in rec["choices"]] == [list(c.token_ids) for c in sampled]
    assert [c["logprobs"] for c in rec["choices"]] == [list(c.logprobs) for c in sampled]
    assert [c["finish_reason"] for c in rec["choices"]] == [c.finish_reason for c in sampled]
    # what the client got is the same
    assert [c.model_extra["token_ids"] for c in resp.choices] == [list(c.token_ids) for c in sampled]
    assert [c.logprobs.token_logprobs for c in resp.choices] == [list(c.logprobs) for c in sampled]
    assert [c.text for c in resp.choices] == [c.text for c in sampled]
    rows = episode_rows(gw.records.turns("exact-1"), gw.tok, "gw")
    assert [r.completion_token_ids for r in rows] == [list(c.token_ids) for c in sampled]
    assert [r.sampling_logprobs for r in rows] == [list(c.logprobs) for c in sampled]
    assert all(r.prompt_token_ids == list(request.prompts[0]) for r in rows)
    assert rows_to_table(rows, 0, 0).num_rows == 3  # the store's schema takes them as they are


def test_token_id_prompts_are_sampled_as_given(served, spy):
    srv, gw = served
    ids = gw.tok.encode("x = ")
    connect(srv, episode="ids-1").completions.create(model="gw-v0", prompt=ids, max_tokens=4)
    assert spy[0][0].prompts == (tuple(ids),)
    assert gw.records.turns("ids-1")[0]["prompts"] == [ids]


def test_a_batch_of_prompts_records_which_prompt_each_choice_continues(served, spy):
    srv, gw = served
    resp = connect(srv, episode="batch-1").completions.create(
        model="gw", prompt=["a = ", "bb = "], n=2, max_tokens=3)
    rec, = gw.records.turns("batch-1")
    assert [c["prompt_index"] for c in rec["choices"]] == [0, 0, 1, 1]
    rows = episode_rows([rec], gw.tok, "gw")
    assert [r.prompt for r in rows] == ["a = ", "a = ", "bb = ", "bb = "]
    assert [c.model_extra["token_ids"] for c in resp.choices] == [
        list(c.token_ids) for c in spy[0][1]]


def test_a_wrong_or_missing_key_is_401_and_records_nothing(served):
    srv, gw = served
    with pytest.raises(openai.AuthenticationError) as err:
        connect(srv, key="not-the-key", episode="nokey").completions.create(
            model="gw", prompt="x", max_tokens=2)
    assert err.value.status_code == 401 and err.value.code == "invalid_api_key"
    r = httpx.post(f"{srv.url}/completions", json={"model": "gw", "prompt": "x"},
                   headers={"X-Episode-Id": "nokey"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    assert httpx.get(f"{srv.url}/models").status_code == 401
    assert gw.records.turns("nokey") == []


@pytest.mark.parametrize("kwargs,code,param", [
    ({"model": "gpt-4o"}, "model_not_found", "model"),
    ({"n": 0}, "invalid_value", "n"),
    ({"temperature": 3}, "invalid_value", "temperature"),
    ({"presence_penalty": 0.5}, "unsupported_parameter", "presence_penalty"),
    ({"prompt": []}, "invalid_prompt", "prompt"),
    ({"prompt": [[1, 2], "ok", 3]}, "invalid_prompt", "prompt"),
    ({"prompt": [999999]}, "invalid_prompt", "prompt"),
    ({"prompt": "x" * 5000}, "context_length_exceeded", "max_tokens"),
])
def test_a_bad_completion_request_is_a_named_400_and_records_nothing(served, kwargs, code, param):
    srv, gw = served
    args = {"model": "gw", "prompt": "x", "max_tokens": 2, **kwargs}
    with pytest.raises(openai.BadRequestError) as err:
        connect(srv, episode="bad-1").completions.create(**args)
    assert err.value.code == code and err.value.body["param"] == param
    assert gw.records.turns("bad-1") == []


@pytest.mark.parametrize("messages,param", [
    ([], "messages"),
    ([{"role": "wizard", "content": "hi"}], "messages[0].role"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
     "messages[0].content"),
    ([{"role": "user", "content": None}], "messages[0].content"),
])
def test_bad_messages_are_a_named_400(served_chat, messages, param):
    srv, gw = served_chat
    with pytest.raises(openai.BadRequestError) as err:
        connect(srv, episode="bad-2").chat.completions.create(model="gwchat", messages=messages,
                                                              max_tokens=2)
    assert err.value.code == "invalid_messages" and err.value.body["param"] == param
    assert gw.records.turns("bad-2") == []


def test_chat_against_a_policy_without_a_chat_template_is_a_named_400(served):
    srv, gw = served
    with pytest.raises(openai.BadRequestError) as err:
        connect(srv, episode="notemplate").chat.completions.create(
            model="gw", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert err.value.code == "chat_template_missing"
    assert "--chat-template" in err.value.message
    assert gw.records.turns("notemplate") == []


def test_a_gateway_chat_template_serves_a_policy_without_one(served):
    srv, gw = served
    gw.chat_template = TEMPLATE
    try:
        resp = connect(srv, episode="gwtemplate").chat.completions.create(
            model="gw", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    finally:
        gw.chat_template = None
    rec, = gw.records.turns("gwtemplate")
    # the byte vocabulary: <s> is BOS (257); the template's text otherwise byte for byte
    assert rec["prompts"] == [[257, *b"user\nhi\n", 257, *b"assistant\n"]]
    assert resp.choices[0].model_extra["token_ids"] == rec["choices"][0]["token_ids"]


def test_streamed_answers_are_the_recorded_ones(served):
    srv, gw = served
    stream = connect(srv, episode="stream-1").completions.create(
        model="gw", prompt="x", n=2, max_tokens=5, seed=3, stream=True)
    got = {c.choices[0].index: c.choices[0].text for c in stream}
    rec, = gw.records.turns("stream-1")
    assert got == {c["index"]: c["text"] for c in rec["choices"]}


def test_a_bad_episode_id_is_a_named_400(served):
    srv, _ = served
    with pytest.raises(openai.BadRequestError) as err:
        connect(srv, episode="../escape").completions.create(model="gw", prompt="x", max_tokens=2)
    assert err.value.code == "invalid_episode_id"


def test_an_untagged_request_gets_an_episode_id_back(served):
    srv, gw = served
    raw = connect(srv).completions.with_raw_response.create(model="gw", prompt="x", max_tokens=2)
    episode = raw.headers["X-Episode-Id"]
    assert raw.parse().model_extra["rollforge"]["episode_id"] == episode
    assert len(gw.records.turns(episode)) == 1


def test_the_command_refuses_to_serve_without_a_key(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "gateway", "--set",
                           f"out_dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, proc.stderr
    assert "ROLLFORGE_GATEWAY_KEY" in proc.stderr


def test_the_command_prints_an_episodes_rows(served):
    srv, gw = served
    connect(srv, episode="cli-rows").completions.create(model="gw", prompt="y = ", n=2,
                                                         max_tokens=3)
    cfg = gw.cfg
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "gateway", "--config",
                           str(ROOT / "configs/tiny.yaml"), "--set", f"out_dir={cfg.out_dir}",
                           "--set", f"run_id={cfg.run_id}", "--records", str(gw.records.root),
                           "--rows", "cli-rows"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = [json.loads(line) for line in proc.stdout.splitlines()]
    want = episode_rows(gw.records.turns("cli-rows"), gw.tok, cfg.run_id)
    assert [r["completion_token_ids"] for r in got] == [r.completion_token_ids for r in want]
    assert [r["sampling_logprobs"] for r in got] == [r.sampling_logprobs for r in want]
    assert [list(r) for r in got] == [list(r.as_dict()) for r in want]  # every column, named


def test_errors_come_in_openais_shape(served):
    srv, _ = served
    r = httpx.post(f"{srv.url}/nowhere", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 404 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = httpx.post(f"{srv.url}/completions", content=b"{not json",
                   headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    json.dumps(r.json())
