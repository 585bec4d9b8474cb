"""The sampler's own KV cache (`FilledLayer`: buffers filled in place, not concatenated anew at
every token) and its shared prefill (a prompt repeated in a batch is prefilled once): the same
samples as the model's own cache with every row prefilled, on a byte GPT-2 and a byte Llama."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

from training import generate
from training.config import PolicyConfig
from training.generate import FilledLayer, filled_cache, sample_batch
from training.policy import TOKENIZER_ATTR, build_policy
from training.tokenizer import ByteTokenizer

PROMPTS = ["def add(a, b):\n", "x = ", "# sum of a list\ndef s(xs):\n", "def f(x):\n    return"]


def _byte_model(cls, config_cls, **shape):
    torch.manual_seed(5)
    B = ByteTokenizer
    m = cls(config_cls(vocab_size=B.vocab_size, bos_token_id=B.bos_token_id,
                       eos_token_id=B.eos_token_id, pad_token_id=B.pad_token_id,
                       hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=128, **shape)).eval()
    setattr(m, TOKENIZER_ATTR, ByteTokenizer())
    return m


MODELS = {
    "gpt2": lambda: build_policy(PolicyConfig(n_layer=2, n_embd=32, n_head=2, max_len=128,
                                              seed=3)).eval(),
    "llama": lambda: _byte_model(LlamaForCausalLM, LlamaConfig),
}


def _run(model, prompt_ids, greedy, seed=11, n=20, use_cache=True):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        return sample_batch(model, prompt_ids, n, 1.0, 1.0, greedy, g, use_cache,
                            getattr(model, TOKENIZER_ATTR))


def _same(a, b, exact: bool):
    assert [s.completion_ids for s in a] == [s.completion_ids for s in b]
    assert [s.text for s in a] == [s.text for s in b]
    for x, y in zip(a, b):
        if exact:
            assert x.logprobs == y.logprobs
        else:
            torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs),
                                       atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("greedy", [True, False])
def test_the_filled_cache_samples_what_the_models_own_cache_does(monkeypatch, name, greedy):
    """Distinct prompts (no shared prefill): the attention sees the same keys and values in the
    same shape, so the samples and log-probs are equal bit for bit."""
    m = MODELS[name]()
    ids = [m.rollforge_tokenizer.encode_prompt(p) for p in PROMPTS]
    assert isinstance(filled_cache(m, 64).layers[0], FilledLayer)
    ours = _run(m, ids, greedy)
    monkeypatch.setattr(generate, "filled_cache", lambda model, capacity: None)
    _same(ours, _run(m, ids, greedy), exact=True)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("greedy", [True, False])
def test_repeated_prompts_prefilled_once_sample_what_every_row_prefilled_does(
        monkeypatch, name, greedy):
    """A group's copies of a prompt side by side, as the loop lays them out: each distinct
    prompt prefilled once and its keys, values and logits given to every copy. A row's prefill
    does not depend on the other rows, up to the rounding of a matrix product over another
    row count (bit for bit on this machine's byte models; SmolLM2 differed by 1e-5 in a
    log-prob, the same tokens), so the samples are the same."""
    m = MODELS[name]()
    ids = [m.rollforge_tokenizer.encode_prompt(p) for p in PROMPTS[:3] for _ in range(4)]
    calls = []
    forward = m.forward

    def counted(*a, **kw):
        calls.append(kw["input_ids"].shape[0])
        return forward(*a, **kw)

    monkeypatch.setattr(m, "forward", counted)
    ours = _run(m, ids, greedy)
    assert calls[0] == 3 and set(calls[1:]) == {12}  # the prefill's rows, then every row
    monkeypatch.setattr(generate, "filled_cache", lambda model, capacity: None)
    calls.clear()
    theirs = _run(m, ids, greedy)
    assert calls[0] == 12
    _same(ours, theirs, exact=False)
    if not greedy:  # the copies of a prompt drew different completions from one prefill
        assert len({tuple(s.completion_ids) for s in ours[:4]}) > 1


def test_shared_prompts_names_each_distinct_prompts_first_row_and_every_rows_source():
    assert generate.shared_prompts([[1, 2], [3], [4, 5]]) is None
    rows, index = generate.shared_prompts([[1, 2], [1, 2], [3], [1, 2], [3]])
    assert rows.tolist() == [0, 2] and index.tolist() == [0, 0, 1, 0, 1]


def test_a_cache_asked_past_its_capacity_says_so():
    m = MODELS["llama"]()
    cache = filled_cache(m, 4)
    ids = torch.tensor([[257, 97, 98, 99, 100]])
    with pytest.raises(RuntimeError, match="holds 4 positions of 1 sequences; asked for 5"):
        m(input_ids=ids, past_key_values=cache, use_cache=True)


def test_a_model_with_a_sliding_window_keeps_its_own_cache_and_samples():
    m = _byte_model(MistralForCausalLM, MistralConfig, sliding_window=8)
    assert filled_cache(m, 64) is None
    ids = [m.rollforge_tokenizer.encode_prompt(p) for p in PROMPTS[:2] for _ in range(2)]
    out = _run(m, ids, True, n=12)
    assert len(out) == 4 and all(s.completion_ids for s in out)
    assert out[0].completion_ids == out[1].completion_ids  # greedy copies of one prompt
    recomputed = _run(m, ids, True, n=12, use_cache=False)  # every token through the model
    assert [s.completion_ids for s in out] == [s.completion_ids for s in recomputed]
