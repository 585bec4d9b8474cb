"""Sampling: the KV cache changes speed, not results; log-probs are the trainer's; stop strings."""
import torch

from training.batch import make_batch, token_logprobs
from training.config import PolicyConfig
from training.generate import filter_top_p, sample
from training.policy import build_policy

PROMPTS = ["def add(a, b):\n", "x = ", "# sum of a list\ndef s(xs):\n"]


def _model():
    return build_policy(PolicyConfig(n_layer=2, n_embd=32, n_head=2, max_len=96, seed=3)).eval()


def test_kv_cache_gives_the_same_greedy_completions_as_recomputing():
    m = _model()
    a = sample(m, PROMPTS, 12, greedy=True, batch_size=3, use_cache=True)
    b = sample(m, PROMPTS, 12, greedy=True, batch_size=3, use_cache=False)
    assert [s.completion_ids for s in a] == [s.completion_ids for s in b]
    for x, y in zip(a, b):
        torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5, rtol=0)


def test_sampling_logprobs_are_the_tempered_distribution_without_banned_tokens():
    """The sampler never draws PAD/BOS, so its log-probs are of the distribution renormalised
    without them; the trainer's `token_logprobs` given the same banned ids recomputes exactly
    those log-probs, so the RL importance ratio is 1 on-policy."""
    m = _model()
    g = torch.Generator().manual_seed(0)
    out = sample(m, PROMPTS, 10, temperature=0.7, batch_size=2, generator=g)
    b = make_batch([s.prompt_ids for s in out], [s.completion_ids for s in out], 256)
    with torch.no_grad():
        logits = m(input_ids=b.input_ids, attention_mask=b.attention_mask).logits[:, :-1] / 0.7
        logits[..., m.rollforge_tokenizer.banned_ids] = float("-inf")
        lp = logits.log_softmax(-1).gather(-1, b.targets[..., None]).squeeze(-1)
        full = token_logprobs(m, b, temperature=0.7)
        trainer_lp = token_logprobs(m, b, temperature=0.7, banned=m.rollforge_tokenizer.banned_ids)
    on = b.loss_mask.bool()
    assert (full[on] < lp[on]).all()  # without the ban the softmax spreads some mass on PAD/BOS
    torch.testing.assert_close(trainer_lp[on], lp[on], atol=1e-6, rtol=0)
    for row, s in enumerate(out):
        start = len(s.prompt_ids) - 1
        got = lp[row, start:start + len(s.completion_ids)]
        torch.testing.assert_close(got, torch.tensor(s.logprobs), atol=1e-4, rtol=0)


def test_a_stop_sequence_ends_the_completion_and_is_cut_from_the_text():
    m = _model()
    free = sample(m, PROMPTS[:1], 24, greedy=True)[0]
    assert len(free.text) >= 6, free.text
    stop = free.text[3:5]
    cut = sample(m, PROMPTS[:1], 24, greedy=True, stop=[stop])[0]
    assert cut.finished
    assert cut.text == free.text[:free.text.find(stop)]
    n = len(cut.completion_ids)
    assert cut.completion_ids == free.completion_ids[:n] and n < len(free.completion_ids)
    assert stop in m.rollforge_tokenizer.decode(cut.completion_ids)
    assert stop not in m.rollforge_tokenizer.decode(cut.completion_ids[:-1])


def test_top_p_keeps_the_smallest_set_reaching_the_mass():
    logits = torch.log(torch.tensor([[0.2, 0.5, 0.3]]))
    kept = filter_top_p(logits, 0.6).isfinite()
    assert kept.tolist() == [[False, True, True]]
