"""The OpenAI-compatible gateway (gateway/), served for real (uvicorn on loopback) in front of a
freshly initialised tiny policy and driven by the real `openai` client: what it records is, token
for token, what the sampler (flows/sampler.py) returned; a wrong key is 401; bad requests are
named 400s and record nothing; a multi-turn conversation becomes one masked row when the client
re-sends a prefix-stable history, and splits (saying so) when it does not."""
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
import torch

from flows import sampler
from flows.config import load_config
from gateway.app import Gateway
from gateway.records import EpisodeLog
from gateway.rows import episode_rows
from gateway.server import Served
from storage.schema import rows_to_table
from training import checkpoints
from training.config import PolicyConfig
from training.policy import TOKENIZER_ATTR, build_policy, save_policy
from training.tokenizer import HFTokenizer, byte_tokenizer_hf

ROOT = Path(__file__).resolve().parents[2]
KEY = "test-key-1234"
# A prefix-stable template: a turn's rendering is the previous turn's rendering + the reply +
# the EOS the template closes the reply with + the new message + the generation prompt.
# (Newlines as expressions: transformers renders with trim_blocks, which eats one after a tag.)
TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}"
            "{% if m['role'] == 'assistant' %}</s>{% else %}{{ '\\n' }}{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}<s>assistant\n{% endif %}")


def _run(tmp_path_factory, run_id: str, template: str | None):
    cfg = load_config(ROOT / "configs/tiny.yaml", [f"run_id={run_id}"])
    cfg = cfg.model_copy(update={"out_dir": str(tmp_path_factory.mktemp("runs"))})
    torch.manual_seed(0)
    model = build_policy(PolicyConfig()).eval()
    if template is not None:  # the byte vocabulary as Hugging Face files, with a chat template
        hf = byte_tokenizer_hf()
        hf.chat_template = template
        setattr(model, TOKENIZER_ATTR, HFTokenizer(hf))
    staging = checkpoints.staging_dir(cfg.run_dir, 0)
    save_policy(model, str(staging / "model"))
    checkpoints.publish(staging, checkpoints.checkpoint_dir(cfg.run_dir, 0), {"version": 0})
    return cfg


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A gateway on the byte-level policy (no chat template)."""
    cfg = _run(tmp_path_factory, "gw", None)
    gw = Gateway(cfg, 0, KEY, EpisodeLog(Path(cfg.run_dir) / "gateway"))
    srv = Served(gw)
    yield srv, gw
    srv.stop()


@pytest.fixture(scope="module")
def served_chat(tmp_path_factory):
    """A gateway on the same weights with a chat template in the tokenizer."""
    cfg = _run(tmp_path_factory, "gwchat", TEMPLATE)
    gw = Gateway(cfg, 0, KEY, EpisodeLog(Path(cfg.run_dir) / "gateway"))
    srv = Served(gw)
    yield srv, gw
    srv.stop()


def _client(srv, key=KEY, episode=None):
    headers = {"X-Episode-Id": episode} if episode else None
    return openai.OpenAI(base_url=srv.url, api_key=key, max_retries=0, default_headers=headers)


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
    assert [m.id for m in _client(srv).models.list()] == ["gw", "gw-v0"]


def test_the_record_and_the_rows_are_token_for_token_what_the_sampler_returned(served, spy):
    srv, gw = served
    resp = _client(srv, episode="exact-1").completions.create(
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
    assert [r["completion_token_ids"] for r in rows] == [list(c.token_ids) for c in sampled]
    assert [r["sampling_logprobs"] for r in rows] == [list(c.logprobs) for c in sampled]
    assert all(r["prompt_token_ids"] == list(request.prompts[0]) for r in rows)
    assert rows_to_table(rows, 0, 0).num_rows == 3  # the store's schema takes them as they are


def test_token_id_prompts_are_sampled_as_given(served, spy):
    srv, gw = served
    ids = gw.tok.encode("x = ")
    _client(srv, episode="ids-1").completions.create(model="gw-v0", prompt=ids, max_tokens=4)
    assert spy[0][0].prompts == (tuple(ids),)
    assert gw.records.turns("ids-1")[0]["prompts"] == [ids]


def test_a_batch_of_prompts_records_which_prompt_each_choice_continues(served, spy):
    srv, gw = served
    resp = _client(srv, episode="batch-1").completions.create(
        model="gw", prompt=["a = ", "bb = "], n=2, max_tokens=3)
    rec, = gw.records.turns("batch-1")
    assert [c["prompt_index"] for c in rec["choices"]] == [0, 0, 1, 1]
    rows = episode_rows([rec], gw.tok, "gw")
    assert [r["prompt"] for r in rows] == ["a = ", "a = ", "bb = ", "bb = "]
    assert [c.model_extra["token_ids"] for c in resp.choices] == [
        list(c.token_ids) for c in spy[0][1]]


def test_a_wrong_or_missing_key_is_401_and_records_nothing(served):
    srv, gw = served
    with pytest.raises(openai.AuthenticationError) as err:
        _client(srv, key="not-the-key", episode="nokey").completions.create(
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
        _client(srv, episode="bad-1").completions.create(**args)
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
        _client(srv, episode="bad-2").chat.completions.create(model="gwchat", messages=messages,
                                                              max_tokens=2)
    assert err.value.code == "invalid_messages" and err.value.body["param"] == param
    assert gw.records.turns("bad-2") == []


def test_chat_against_a_policy_without_a_chat_template_is_a_named_400(served):
    srv, gw = served
    with pytest.raises(openai.BadRequestError) as err:
        _client(srv, episode="notemplate").chat.completions.create(
            model="gw", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert err.value.code == "chat_template_missing"
    assert "--chat-template" in err.value.message
    assert gw.records.turns("notemplate") == []


def test_a_gateway_chat_template_serves_a_policy_without_one(served):
    srv, gw = served
    gw.chat_template = TEMPLATE
    try:
        resp = _client(srv, episode="gwtemplate").chat.completions.create(
            model="gw", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    finally:
        gw.chat_template = None
    rec, = gw.records.turns("gwtemplate")
    # the byte vocabulary: <s> is BOS (257); the template's text otherwise byte for byte
    assert rec["prompts"] == [[257, *b"user\nhi\n", 257, *b"assistant\n"]]
    assert resp.choices[0].model_extra["token_ids"] == rec["choices"][0]["token_ids"]


def _chat_turn(client, history):
    resp = client.chat.completions.create(model="gwchat", messages=history, temperature=0,
                                          max_tokens=6, logprobs=True)
    return resp, resp.choices[0].message.content


def test_a_prefix_stable_chat_conversation_becomes_one_masked_row(served_chat):
    srv, gw = served_chat
    client = _client(srv, episode="chat-1")
    history = [{"role": "user", "content": "hi"}]
    replies = []
    for follow_up in ("go on", "and?"):
        resp, text = _chat_turn(client, history)
        replies.append(resp.choices[0])
        # the client re-sends the reply as text: it must survive the trip for the row to join
        assert gw.tok.encode(text, bos=False) == [t for t in resp.choices[0].model_extra[
            "token_ids"] if t != gw.tok.eos_token_id], "the greedy reply is not plain text"
        history += [{"role": "assistant", "content": text}, {"role": "user", "content": follow_up}]
    resp, _ = _chat_turn(client, history)
    replies.append(resp.choices[0])
    turns = gw.records.turns("chat-1")
    row, = episode_rows(turns, gw.tok, "gwchat")
    first = turns[0]["prompts"][0]
    assert row["prompt_token_ids"] == first and row["turns"] == 3 and row["end_reason"] == "client"
    # prompt + completion is the last turn's prompt + its reply, exactly as sent and sampled
    assert first + row["completion_token_ids"] == turns[2]["prompts"][0] + turns[2]["choices"][0][
        "token_ids"]
    want_mask, want_lp = [], []
    for k, t in enumerate(turns):
        if k:  # what the client's re-sent history added: context, not trained on
            gap = len(t["prompts"][0]) - len(first) - len(want_mask)
            want_mask += [0] * gap
            want_lp += [0.0] * gap
        want_mask += [1] * len(t["choices"][0]["token_ids"])
        want_lp += t["choices"][0]["logprobs"]
    assert row["completion_mask"] == want_mask and row["sampling_logprobs"] == want_lp
    assert want_lp[-len(replies[-1].logprobs.content):] == [
        x.logprob for x in replies[-1].logprobs.content]
    assert rows_to_table([row], 0, 0).num_rows == 1


def test_an_edited_history_splits_the_episode_and_says_so(served_chat):
    srv, gw = served_chat
    client = _client(srv, episode="chat-split")
    history = [{"role": "user", "content": "hi"}]
    _, text = _chat_turn(client, history)
    # the client rewrote the reply: turn 2's prompt no longer begins with turn 1's ids
    history += [{"role": "assistant", "content": "(edited) " + text},
                {"role": "user", "content": "go on"}]
    _chat_turn(client, history)
    turns = gw.records.turns("chat-split")
    rows = episode_rows(turns, gw.tok, "gwchat")
    assert [r["end_reason"] for r in rows] == ["split", "client"]
    assert [r["prompt_token_ids"] for r in rows] == [t["prompts"][0] for t in turns]
    assert [r["turns"] for r in rows] == [1, 1] and rows[1]["completion_mask"] is None


def test_a_token_id_conversation_keeps_each_branch_of_n(served):
    srv, gw = served
    client = _client(srv, episode="ids-multi")
    p1 = gw.tok.encode("a = 1\n")
    r1 = client.completions.create(model="gw", prompt=p1, n=2, max_tokens=5, seed=1)
    s1 = r1.choices[1].model_extra["token_ids"]
    obs = gw.tok.encode("\n# ok\n", bos=False)
    r2 = client.completions.create(model="gw", prompt=p1 + s1 + obs, max_tokens=5, seed=2)
    rows = episode_rows(gw.records.turns("ids-multi"), gw.tok, "gw")
    assert len(rows) == 2  # the branch not continued, and the conversation
    branch, conv = rows
    assert branch["completion_token_ids"] == r1.choices[0].model_extra["token_ids"]
    s2 = r2.choices[0].model_extra["token_ids"]
    assert conv["completion_token_ids"] == s1 + obs + s2
    assert conv["completion_mask"] == [1] * len(s1) + [0] * len(obs) + [1] * len(s2)


def _turn(turn, version, prompt, ids, lps):
    return {"episode_id": "v", "turn": turn, "policy_version": version, "prompts": [prompt],
            "choices": [{"prompt_index": 0, "token_ids": ids, "logprobs": lps, "text": ""}]}


def test_a_turn_sampled_by_another_policy_version_starts_a_row_of_its_own(served):
    _, gw = served
    # turn 1 continues turn 0's ids exactly, but a newer version sampled it: one row per version
    turns = [_turn(0, 0, [257, 97], [98, 99], [-1.0, -2.0]),
             _turn(1, 1, [257, 97, 98, 99, 100], [101], [-0.5]),
             _turn(2, 1, [257, 97, 98, 99, 100, 101, 102], [103], [-0.25])]
    rows = episode_rows(turns, gw.tok, "gw")
    assert [(r["policy_version"], r["end_reason"], r["turns"]) for r in rows] == [
        (0, "split", 1), (1, "client", 2)]
    assert rows[1]["completion_token_ids"] == [101, 102, 103]
    assert rows[1]["completion_mask"] == [1, 0, 1]
    assert rows[1]["sampling_logprobs"] == [-0.5, 0.0, -0.25]


def test_streamed_answers_are_the_recorded_ones(served):
    srv, gw = served
    stream = _client(srv, episode="stream-1").completions.create(
        model="gw", prompt="x", n=2, max_tokens=5, seed=3, stream=True)
    got = {c.choices[0].index: c.choices[0].text for c in stream}
    rec, = gw.records.turns("stream-1")
    assert got == {c["index"]: c["text"] for c in rec["choices"]}


def test_concurrent_requests_of_one_episode_each_get_a_whole_turn(served):
    srv, gw = served
    client = _client(srv, episode="concurrent")
    threads = [threading.Thread(target=client.completions.create,
                                kwargs={"model": "gw", "prompt": f"v{i} = ", "max_tokens": 3})
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    turns = gw.records.turns("concurrent")
    assert [t["turn"] for t in turns] == [0, 1, 2, 3]
    assert sorted(bytes(t["prompts"][0][1:]).decode() for t in turns) == [f"v{i} = " for i in range(4)]


def _wait_for(cond):
    """Until `cond()` (synchronisation between the test's threads, not a timing assertion)."""
    while not cond():
        time.sleep(0.01)


def test_requests_queued_while_the_boundary_is_busy_are_sampled_in_one_call(served, monkeypatch):
    srv, gw = served
    gate, calls, outs = threading.Event(), [], []
    real = sampler.sample

    def gated(cfg, version, request, progress=None):
        calls.append(request)
        if len(calls) == 1:
            gate.wait(120)  # the first call holds the boundary until the others have queued
        outs.append(real(cfg, version, request, progress))
        return outs[-1]
    monkeypatch.setattr(sampler, "sample", gated)

    def ask(episode, prompt, **kw):
        _client(srv, episode=episode).completions.create(model="gw", prompt=prompt, n=2,
                                                         max_tokens=3, **kw)
    threads = [threading.Thread(target=ask, args=("q-first", "first = "))]
    threads[0].start()
    _wait_for(lambda: len(calls) == 1)
    for i, p in enumerate(["a = ", "bb = ", "ccc = "]):
        threads.append(threading.Thread(target=ask, args=(f"q-{i}", p)))
        threads[-1].start()
    _wait_for(lambda: len(gw.batcher.queue) == 3)
    threads.append(threading.Thread(target=ask, args=("q-other", "d = "),
                                    kwargs={"temperature": 0.5}))  # other settings: its own call
    threads[-1].start()
    _wait_for(lambda: len(gw.batcher.queue) == 4)
    gate.set()
    for t in threads:
        t.join()
    assert len(calls) == 3
    merged, out, other = calls[1], outs[1], calls[2]
    assert len(merged.prompts) == 3 and merged.n == 2 and other.temperature == 0.5
    for i, p in enumerate(["a = ", "bb = ", "ccc = "]):
        rec, = gw.records.turns(f"q-{i}")
        assert rec["prompts"] == [gw.tok.encode(p)]
        k = merged.prompts.index(tuple(gw.tok.encode(p)))  # its place in the merged call
        assert [c["token_ids"] for c in rec["choices"]] == [list(c.token_ids)
                                                             for c in out[2 * k:2 * k + 2]]
        assert [c["logprobs"] for c in rec["choices"]] == [list(c.logprobs)
                                                           for c in out[2 * k:2 * k + 2]]
        assert [c["prompt_index"] for c in rec["choices"]] == [0, 0]


def _publish(cfg, version: int, seed: int) -> None:
    torch.manual_seed(seed)
    staging = checkpoints.staging_dir(cfg.run_dir, version)
    save_policy(build_policy(PolicyConfig()).eval(), str(staging / "model"))
    checkpoints.publish(staging, checkpoints.checkpoint_dir(cfg.run_dir, version),
                        {"version": version})


def test_a_following_gateway_answers_with_each_new_version_from_the_moment_it_appears(
        tmp_path_factory, monkeypatch):
    """`--follow`: v1 published while an episode is open; the episode's next turn, and the
    listing, are v1's; each turn is recorded with the version that sampled it (a row each,
    gateway/rows.py). A gateway that does not follow keeps v0."""
    from gateway import app as gateway_app

    monkeypatch.setattr(gateway_app, "FOLLOW_CHECK_S", 0.0)
    versions, real = [], sampler.sample

    def spied(cfg, version, request, progress=None):
        versions.append(version)
        return real(cfg, version, request, progress)
    monkeypatch.setattr(sampler, "sample", spied)
    cfg = _run(tmp_path_factory, "gwf", None)
    records = EpisodeLog(Path(cfg.run_dir) / "gateway")
    following, fixed = Gateway(cfg, 0, KEY, records, follow=True), Gateway(cfg, 0, KEY, records)
    srv, srv_fixed = Served(following), Served(fixed)
    try:
        client = _client(srv, episode="f-1")
        first = client.completions.create(model="gwf", prompt="x = ", max_tokens=4)
        assert first.model_extra["rollforge"]["policy_version"] == 0
        _publish(cfg, 1, seed=1)
        bos = len(following.tok.encode(""))
        prompt = (first.model_extra["prompt_token_ids"][0] + first.choices[0].model_extra[
            "token_ids"] + following.tok.encode(" + 1")[bos:])
        second = client.completions.create(model="gwf", prompt=prompt, max_tokens=4)
        assert second.model_extra["rollforge"]["policy_version"] == 1
        assert versions == [0, 1]
        assert [m.id for m in _client(srv).models.list().data] == ["gwf", "gwf-v1"]
        with pytest.raises(openai.BadRequestError, match="follows the run's newest version"):
            client.completions.create(model="gwf-v0", prompt="x = ", max_tokens=2)
        turns = records.turns("f-1")
        assert [t["policy_version"] for t in turns] == [0, 1]
        rows = episode_rows(turns, following.tok, "gwf")
        assert [(r["policy_version"], r["end_reason"]) for r in rows] == [(0, "split"),
                                                                          (1, "client")]
        still = _client(srv_fixed, episode="f-2").completions.create(
            model="gwf-v0", prompt="x = ", max_tokens=2)
        assert still.model_extra["rollforge"]["policy_version"] == 0 and versions[-1] == 0
    finally:
        srv.stop()
        srv_fixed.stop()


def test_the_batcher_never_merges_requests_for_different_versions():
    from engine.boundary import Completion, SampleRequest
    from gateway.batching import Batcher

    gate, calls = threading.Event(), []

    def call(request, version):
        calls.append((version, len(request.prompts)))
        if len(calls) == 1:
            gate.wait(120)
        return [Completion(i, (1,), (-0.1,), "length", "a") for i in range(request.size)]

    b = Batcher(call)
    req = lambda p: SampleRequest([[p]], 1, 1.0, 1.0, 1)  # noqa: E731
    threads = [threading.Thread(target=b.submit, args=(req(1), 0))]
    threads[0].start()
    _wait_for(lambda: len(calls) == 1)
    for p, v in [(2, 0), (3, 1), (4, 0)]:
        threads.append(threading.Thread(target=b.submit, args=(req(p), v)))
        threads[-1].start()
        _wait_for(lambda n=len(threads) - 1: len(b.queue) == n)
    gate.set()
    for t in threads:
        t.join()
    assert calls == [(0, 1), (0, 2), (1, 1)]


def test_two_writers_on_one_folder_never_overwrite_a_turn(tmp_path):
    a, b = EpisodeLog(tmp_path), EpisodeLog(tmp_path)  # two gateways sharing the records
    got = [log.append("ep", {"who": who}) for log, who in ((a, "a"), (b, "b"), (a, "a2"))]
    assert got == [0, 1, 2]
    assert [t["who"] for t in a.turns("ep")] == ["a", "b", "a2"]
    assert not list(tmp_path.glob("ep/.tmp-*"))


def test_a_bad_episode_id_is_a_named_400(served):
    srv, _ = served
    with pytest.raises(openai.BadRequestError) as err:
        _client(srv, episode="../escape").completions.create(model="gw", prompt="x", max_tokens=2)
    assert err.value.code == "invalid_episode_id"


def test_an_untagged_request_gets_an_episode_id_back(served):
    srv, gw = served
    raw = _client(srv).completions.with_raw_response.create(model="gw", prompt="x", max_tokens=2)
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
    _client(srv, episode="cli-rows").completions.create(model="gw", prompt="y = ", n=2,
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
    assert [r["completion_token_ids"] for r in got] == [r["completion_token_ids"] for r in want]
    assert [r["sampling_logprobs"] for r in got] == [r["sampling_logprobs"] for r in want]


def test_errors_come_in_openais_shape(served):
    srv, _ = served
    r = httpx.post(f"{srv.url}/nowhere", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 404 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = httpx.post(f"{srv.url}/completions", content=b"{not json",
                   headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    json.dumps(r.json())
