"""The sampling boundary: typed requests refused at the door, and the local sampler behind it
(token ids in; ids, log-probs and a finish reason out) on the project's tiny default policy.
The vLLM engine answers the same request in tests/integration/test_engine_vllm.py."""
import threading

import pytest
import torch

from engine.boundary import Completion, LocalSampler, SampleRequest, Sampler, as_samples
from engine.vllm_sampler import VLLMSampler, parse_token
from engine.vllm_server import EngineError, ServerSettings, VLLMServer, engine_python
from training.batch import make_batch, token_logprobs
from training.config import PolicyConfig
from training.policy import build_policy

PROMPTS = ["def add(a, b):\n", "x = ", "# sum of a list\ndef s(xs):\n"]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_policy(PolicyConfig()).eval()  # the tiny default: byte GPT-2, 4 x 192


@pytest.fixture(scope="module")
def prompt_ids(model):
    return [model.rollforge_tokenizer.encode_prompt(p) for p in PROMPTS]


@pytest.mark.parametrize("field,value,named", [
    ("prompts", [], "prompts is empty"), ("prompts", [[1], []], "prompts[1] is empty"),
    ("n", 0, "n=0"), ("temperature", 0.0, "temperature=0.0"), ("top_p", 1.5, "top_p=1.5"),
    ("max_new_tokens", 0, "max_new_tokens=0"), ("stop", ["ok", ""], "empty string"),
])
def test_a_bad_request_is_refused_naming_the_field_and_value(field, value, named):
    args = {"prompts": [[1, 2, 3]], field: value}
    with pytest.raises(ValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
        SampleRequest(**args)


def test_a_request_freezes_its_prompts_so_it_can_be_hashed():
    r = SampleRequest([[1, 2], [3]], n=4, stop=["\n"])
    assert r.prompts == ((1, 2), (3,)) and r.stop == ("\n",) and r.size == 8
    assert hash(r) == hash(SampleRequest(((1, 2), (3,)), n=4, stop=("\n",)))


def test_a_completion_with_more_ids_than_logprobs_is_refused():
    with pytest.raises(ValueError, match="2 token ids but 1 log-probs"):
        Completion(0, (1, 2), (-0.5,), "length", "ab")


def test_both_engines_are_samplers():
    assert isinstance(LocalSampler(None), Sampler)
    assert issubclass(VLLMSampler, Sampler)


def test_local_sampler_returns_n_completions_per_prompt_prompt_major(model, prompt_ids):
    req = SampleRequest(prompt_ids, n=3, max_new_tokens=12, seed=0)
    out = LocalSampler(model).sample(req)
    assert len(out) == 9 == req.size
    assert [c.prompt_index for c in out] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    tok = model.rollforge_tokenizer
    for c in out:
        assert len(c.token_ids) == len(c.logprobs) <= 12
        assert all(lp <= 0 for lp in c.logprobs)
        assert c.finish_reason in ("stop", "length")
        ends_eos = c.token_ids[-1] == tok.eos_token_id
        assert (c.finish_reason == "stop") == ends_eos  # no stop strings: only EOS stops
        assert c.finish_reason == "stop" or len(c.token_ids) == 12
        assert c.text == tok.decode(list(c.token_ids))  # decoded, never the other way round


def test_the_same_seed_gives_the_same_completions_and_another_seed_others(model, prompt_ids):
    s = LocalSampler(model)
    a = s.sample(SampleRequest(prompt_ids, n=2, max_new_tokens=10, seed=7))
    b = s.sample(SampleRequest(prompt_ids, n=2, max_new_tokens=10, seed=7))
    c = s.sample(SampleRequest(prompt_ids, n=2, max_new_tokens=10, seed=8))
    assert a == b and a != c


def test_local_logprobs_are_the_trainers_on_the_same_ids(model, prompt_ids):
    """What the boundary reports is what the RL loss recomputes (fp32, same banned ids)."""
    req = SampleRequest(prompt_ids, n=2, temperature=0.8, max_new_tokens=10, seed=1)
    out = LocalSampler(model).sample(req)
    b = make_batch([list(req.prompts[c.prompt_index]) for c in out],
                   [list(c.token_ids) for c in out], 256)
    with torch.no_grad():
        lp = token_logprobs(model, b, temperature=0.8, banned=model.rollforge_tokenizer.banned_ids)
    for row, c in enumerate(out):
        start = len(req.prompts[c.prompt_index]) - 1
        torch.testing.assert_close(lp[row, start:start + len(c.token_ids)],
                                   torch.tensor(c.logprobs), atol=1e-4, rtol=0)


def test_a_stop_string_ends_the_completion_at_the_token_that_completes_it(model, prompt_ids):
    s = LocalSampler(model)
    free = s.sample(SampleRequest(prompt_ids[:1], max_new_tokens=24, greedy=True))[0]
    assert len(free.text) >= 6, free.text
    stop = free.text[3:5]
    cut = s.sample(SampleRequest(prompt_ids[:1], max_new_tokens=24, greedy=True, stop=[stop]))[0]
    assert cut.finish_reason == "stop"
    assert cut.text == free.text[:free.text.find(stop)]
    assert cut.token_ids == free.token_ids[:len(cut.token_ids)]
    tok = model.rollforge_tokenizer
    assert stop in tok.decode(list(cut.token_ids)) and stop not in tok.decode(list(cut.token_ids[:-1]))


def test_as_samples_gives_the_loops_records(model, prompt_ids):
    req = SampleRequest(prompt_ids[:2], n=2, max_new_tokens=6, seed=3)
    out = LocalSampler(model).sample(req)
    rows = as_samples(req, out)
    assert [r.prompt_ids for r in rows] == [prompt_ids[0]] * 2 + [prompt_ids[1]] * 2
    assert [r.completion_ids for r in rows] == [list(c.token_ids) for c in out]
    assert [r.finished for r in rows] == [c.finish_reason == "stop" for c in out]


def test_parse_token_reads_vllms_token_names():
    assert parse_token("token_id:49151") == 49151
    with pytest.raises(EngineError, match="token_id:N"):
        parse_token("Ġhello")


def test_the_vllm_payload_sends_ids_bans_and_no_seed():
    server = VLLMServer(base_url="http://127.0.0.1:9", model_name="policy")
    s = VLLMSampler(server, banned_ids=[1])
    body = s.payload(SampleRequest([[5, 6]], n=4, temperature=0.7, top_p=0.9, max_new_tokens=32,
                                   stop=["\n\n"], seed=3), [5, 6])
    assert body["prompt"] == [5, 6] and body["n"] == 4 and body["max_tokens"] == 32
    assert body["temperature"] == 0.7 and body["top_p"] == 0.9 and body["stop"] == ["\n\n"]
    assert body["logprobs"] == 0 and body["return_tokens_as_token_ids"] is True
    assert body["logit_bias"] == {"1": -100.0} and "seed" not in body
    greedy = s.payload(SampleRequest([[5]], greedy=True), [5])
    assert greedy["temperature"] == 0.0


def test_an_unreachable_engine_is_retried_then_named(monkeypatch):
    server = VLLMServer(base_url="http://127.0.0.1:9", model_name="policy")  # discard port: refused
    s = VLLMSampler(server, retries=2, backoff_s=0.0)
    with pytest.raises(EngineError, match="after 3 attempt"):
        s.sample(SampleRequest([[5, 6]]))
    assert s.retried == 2


@pytest.mark.timeout(120)
def test_a_stop_ends_an_engines_requests_without_their_retries():
    """The run's stop closes its engine: the requests in flight must end at once with
    SamplingStopped (a stop, not the engine failing), not be retried through the back-off (here
    10 minutes, which the test's timeout would catch)."""
    from engine.stopping import SamplingStopped, stop_sampling

    server = VLLMServer(base_url="http://127.0.0.1:9", model_name="policy")  # refused
    s = VLLMSampler(server, retries=3, backoff_s=600.0)
    timer = threading.Timer(0.5, stop_sampling.set)  # the signal, once the first try failed
    timer.start()
    try:
        with pytest.raises(SamplingStopped, match="the process is stopping"):
            s.sample(SampleRequest([[5, 6]]))
        assert s.retried == 1  # it was waiting to try again when the stop came
        with pytest.raises(SamplingStopped):  # and a new request is not sent at all
            s.sample(SampleRequest([[7]]))
    finally:
        timer.join()
        stop_sampling.clear()


def test_a_missing_engine_venv_says_to_run_make_engine(tmp_path):
    with pytest.raises(EngineError, match="make engine"):
        engine_python(tmp_path / "nowhere")
    with pytest.raises(EngineError, match="make engine"):
        VLLMServer(ServerSettings("some-model", venv=str(tmp_path / "nowhere"))).start()


def test_the_server_command_carries_the_tuned_settings():
    s = ServerSettings("/m", threads=3, kv_cache_gib=2, max_num_seqs=16, max_model_len=1024)
    cmd = s.command("/py", 8123)
    assert cmd[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert flags["--dtype"] == "float32" and flags["--max-num-seqs"] == "16"
    assert flags["--max-model-len"] == "1024" and flags["--host"] == "127.0.0.1"
    assert flags["--logprobs-mode"] == "processed_logprobs" and "--enforce-eager" in cmd
    assert "--enforce-eager" not in ServerSettings("/m", eager=False).command("/py", 1)
    env = s.environment()
    assert env["OMP_NUM_THREADS"] == "3" and env["VLLM_CPU_KVCACHE_SPACE"] == "2"



_STARTER = """
import os, subprocess, sys, threading, time
from engine.vllm_server import watched
def start():  # from a thread, as a run's sample stage starts its server
    p = subprocess.Popen(watched([sys.executable, "-m", "http.server", "0"], os.getpid()),
                         start_new_session=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    print(p.pid, flush=True)
t = threading.Thread(target=start)
t.start()
t.join()
time.sleep(600)
"""


def _running(pid: int) -> bool:
    """A process that has not exited (an exited one may linger as a zombie until reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_started_server_dies_with_the_process_that_started_it_even_from_a_thread():
    """The server runs in a session of its own; a SIGKILLed run must not leave it behind."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    starter = subprocess.Popen([sys.executable, "-c", _STARTER], stdout=subprocess.PIPE, text=True,
                               cwd=Path(__file__).resolve().parents[2])
    child = int(starter.stdout.readline())
    assert _running(child)
    starter.kill()
    starter.wait()
    deadline = time.monotonic() + 60  # the watch polls each second; generous under load
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.2)
    survived = _running(child)
    if survived:
        os.kill(child, signal.SIGKILL)
    assert not survived, "the server outlived the process that started it"
