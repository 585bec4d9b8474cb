"""Batched sampling with a KV cache, returning token ids and the sampling policy's log-probs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from engine.stopping import SamplingStopped, stop_sampling
from training.policy import tokenizer_of


@dataclass(frozen=True)
class Sample:
    prompt_ids: list[int]
    completion_ids: list[int]  # includes the EOS token (or the stop sequence's tokens) when emitted
    logprobs: list[float]  # log-prob of each completion token under the sampling distribution
    text: str  # decoded completion, without EOS and cut before a stop sequence
    finished: bool  # EOS or a stop sequence emitted before max_new_tokens


def _left_pad(seqs: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s):] = torch.tensor(s)
        mask[i, width - len(s):] = 1
    return ids, mask


def filter_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus sampling's filter: `logits` with every token outside the smallest set of most
    likely ones whose probability reaches `top_p` set to -inf (unchanged when `top_p` >= 1)."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    drop = cum - sorted_logits.softmax(-1) > top_p  # keep the smallest set whose mass reaches top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


@torch.no_grad()
def sample(model, prompts: list[str], max_new_tokens: int, temperature: float = 1.0,
           top_p: float = 1.0, greedy: bool = False, batch_size: int = 64,
           generator: torch.Generator | None = None, use_cache: bool = True,
           stop: Sequence[str] = (), tokenizer=None) -> list[Sample]:
    """Sample one completion per prompt. Log-probs are of `softmax(logits / temperature)`, the
    distribution the RL loss recomputes; top-p only restricts which tokens can be drawn.

    Prompts go through the policy's tokenizer (`encode_prompt`: its chat template, if it has one
    and the policy was configured to use it). A completion ends at EOS, at the token that
    completes one of the `stop` strings, or after `max_new_tokens`.
    """
    tok = tokenizer or tokenizer_of(model)
    was_training = model.training
    model.eval()
    out: list[Sample] = []
    for start in range(0, len(prompts), batch_size):
        chunk = [tok.encode_prompt(p) for p in prompts[start:start + batch_size]]
        out.extend(sample_batch(model, chunk, max_new_tokens, temperature, top_p, greedy,
                                generator, use_cache, tok, tuple(stop)))
    model.train(was_training)
    return out


def _stop_hit(tok, tokens: list[int], stop: tuple[str, ...]) -> bool:
    text = tok.decode([t for t in tokens if t != tok.eos_token_id])
    return any(s in text for s in stop)


def _cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    cuts = [text.find(s) for s in stop if s in text]
    return text[:min(cuts)] if cuts else text


def _keeps_logits(model) -> bool:
    """Whether to ask `model` for the last position's logits only: a vocabulary past the byte
    tokenizer's, on a model whose forward takes `logits_to_keep`."""
    import inspect  # noqa: PLC0415

    base = getattr(model, "get_base_model", lambda: model)()
    big = getattr(getattr(base, "config", None), "vocab_size", 0) > 1024
    return big and "logits_to_keep" in inspect.signature(base.forward).parameters


class FilledLayer(DynamicLayer):
    """transformers' `DynamicLayer` with its keys and values written into buffers allocated once
    for a sampling call (every prompt plus `max_new_tokens`) and handed to the attention as views
    of their filled part. `DynamicLayer` copies the whole cache into a new one at every token
    (`torch.cat`): 6% of a 64 x 32-token batch on bench/bench_trl.py's tiny Llama, more as the
    context grows. The attention sees the same values in the same shape, so the samples and
    their log-probs are the same bit for bit (tests/unit/test_generate_cache.py)."""

    is_croppable = False

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity, self.n = capacity, 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        b, h, _, d = key_states.shape
        self.k_buf = key_states.new_empty((b, h, self.capacity, d))
        self.v_buf = value_states.new_empty((b, h, self.capacity, value_states.shape[-1]))

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.n + key_states.shape[-2]
        if end > self.capacity or key_states.shape[0] != self.k_buf.shape[0]:
            raise RuntimeError(f"the sampling cache holds {self.capacity} positions of "
                               f"{self.k_buf.shape[0]} sequences; asked for {end} of "
                               f"{key_states.shape[0]}")
        self.k_buf[:, :, self.n:end] = key_states
        self.v_buf[:, :, self.n:end] = value_states
        self.n = end
        self.keys, self.values = self.k_buf[:, :, :end], self.v_buf[:, :, :end]
        return self.keys, self.values

    def select(self, index: torch.Tensor) -> None:
        """The cache's rows made `index`'s (a row may be taken more than once)."""
        self.k_buf = self.k_buf.index_select(0, index)
        self.v_buf = self.v_buf.index_select(0, index)
        self.keys, self.values = self.k_buf[:, :, :self.n], self.v_buf[:, :, :self.n]


def filled_cache(model, capacity: int) -> Cache | None:
    """A KV cache of `FilledLayer`s for one sampling call of at most `capacity` positions, or
    None (the model makes its own) where the model's cache is not all plain `DynamicLayer`s:
    sliding windows, linear attention, a model without a config."""
    config = getattr(getattr(model, "get_base_model", lambda: model)(), "config", None)
    if config is None:
        return None
    try:
        plain = DynamicCache(config=config)
    except Exception:  # a config the cache cannot read: the model's own cache
        return None
    if not plain.layers or any(type(layer) is not DynamicLayer for layer in plain.layers):
        return None
    return Cache(layers=[FilledLayer(capacity) for _ in plain.layers])


def shared_prompts(prompt_ids: Sequence[Sequence[int]], device="cpu"
                   ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Where a batch repeats prompts (a group's completions of one task, side by side), the rows
    to prefill (each distinct prompt's first) and, for every row, its prompt's place among
    them; None when every prompt is distinct. Prefilling 8 distinct prompts instead of 64 rows
    takes a tenth of the time, which was half of a 64 x 32-token batch's on bench/bench_trl.py's
    tiny Llama. A row's prefill does not depend on the other rows, up to the rounding of a
    matrix product over another row count: each copy gets the keys, values and logits it would
    have computed (bit for bit on the byte models here; SmolLM2's log-probs moved by up to
    1e-5, the same tokens; tests/unit/test_generate_cache.py). The indices are on `device`, the
    cache's (`index_select` takes its index there)."""
    first: dict[tuple[int, ...], int] = {}
    rows, index = [], []
    for i, p in enumerate(prompt_ids):
        key = tuple(p)
        if key not in first:
            first[key] = len(rows)
            rows.append(i)
        index.append(first[key])
    if len(rows) == len(index):
        return None
    return torch.tensor(rows, device=device), torch.tensor(index, device=device)


def _forward(model, inp, mask, past, shared, last, use_cache) -> tuple[torch.Tensor, Cache | None]:
    """The last position's logits of every row ([B, V]) and the cache after them: `inp` the
    new tokens on top of the cache `past` (None at first: the model makes its own), or
    without a cache every token so far; with `shared` (the prefill of a batch that repeats
    prompts, into our own cache), each distinct prompt once, then its copies."""
    if not use_cache:
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        res = model(input_ids=inp, attention_mask=mask, position_ids=pos, use_cache=False, **last)
        return res.logits[:, -1], None
    pos = (mask.cumsum(-1) - 1).clamp(min=0)[:, -inp.shape[1]:]
    if shared is None:
        res = model(input_ids=inp, attention_mask=mask, position_ids=pos, past_key_values=past,
                    use_cache=True, **last)
        return res.logits[:, -1], res.past_key_values
    rows, index = shared
    res = model(input_ids=inp[rows], attention_mask=mask[rows], position_ids=pos[rows],
                past_key_values=past, use_cache=True, **last)
    for layer in past.layers:
        layer.select(index)
    return res.logits[index, -1], res.past_key_values


def sample_batch(model, prompt_ids, max_new_tokens, temperature, top_p, greedy, generator,
                 use_cache, tok, stop=()) -> list[Sample]:
    """One batch of prompts sampled together, left-padded (`generate` and the episodes' turns
    split their prompts into these)."""
    device = next(model.parameters()).device
    ids, mask = _left_pad(prompt_ids, tok.pad_token_id)
    ids, mask = ids.to(device), mask.to(device)
    B = ids.shape[0]
    new_tokens = torch.full((B, max_new_tokens), tok.pad_token_id, dtype=torch.long, device=device)
    new_logps = torch.zeros((B, max_new_tokens), device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    stopped = [False] * B
    banned = tok.banned_ids
    past = filled_cache(model, ids.shape[1] + max_new_tokens) if use_cache else None
    shared = shared_prompts(prompt_ids, device) if past is not None else None
    inp, steps = ids, 0
    # Only the last position's logits are drawn from. With a real vocabulary (49k for SmolLM2)
    # the output head over every prompt position is most of the prefill's work, so ask the
    # model for the last one (as `generate` does). The byte default (259 ids) computes them all
    # as it always has, keeping its samples bit for bit.
    last = {"logits_to_keep": 1} if _keeps_logits(model) else {}
    for t in range(max_new_tokens):
        if stop_sampling.is_set():
            raise SamplingStopped(f"sampling stopped at token {t} of {max_new_tokens}: the "
                                  "process is stopping")
        head, past = _forward(model, inp if use_cache else torch.cat([ids, new_tokens[:, :t]], 1),
                              mask, past, shared if t == 0 else None, last, use_cache)
        logits = head.float() / temperature  # [B, V]
        logits[:, banned] = float("-inf")
        logp_all = logits.log_softmax(-1)
        if greedy:
            nxt = logits.argmax(-1)
        else:
            probs = filter_top_p(logits, top_p).softmax(-1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        nxt = torch.where(done, torch.full_like(nxt, tok.pad_token_id), nxt)
        new_tokens[:, t] = nxt
        new_logps[:, t] = torch.where(done, 0.0, logp_all.gather(-1, nxt[:, None]).squeeze(-1))
        ends = (nxt == tok.eos_token_id) & ~done  # pad may equal EOS for HF tokenizers
        if stop:
            for i in range(B):
                if not done[i] and not ends[i] and _stop_hit(tok, new_tokens[i, :t + 1].tolist(), stop):
                    stopped[i] = True
                    ends[i] = True
        done = done | ends
        steps = t + 1
        mask = torch.cat([mask, (~done | ends).long()[:, None]], dim=1)
        inp = nxt[:, None]
        if bool(done.all()):
            break
    return _samples_of(tok, prompt_ids, new_tokens[:, :steps], new_logps, stopped, stop)


def _samples_of(tok, prompt_ids, new_tokens: torch.Tensor, new_logps: torch.Tensor,
                stopped: list[bool], stop: tuple[str, ...]) -> list[Sample]:
    """Each row's completion from the tokens drawn ([B, steps]): up to and with its EOS, or
    the token that completed a stop string (`stopped`), or all of them."""
    samples = []
    for i in range(len(prompt_ids)):
        toks = new_tokens[i].tolist()
        if stopped[i]:  # the token that completed the stop string is the last one
            n = next(k + 1 for k in range(len(toks)) if _stop_hit(tok, toks[:k + 1], stop))
            toks = toks[:n]
            samples.append(Sample(prompt_ids[i], toks, new_logps[i, :n].tolist(),
                                  _cut_at_stop(tok.decode(toks), stop), True))
            continue
        n = toks.index(tok.eos_token_id) + 1 if tok.eos_token_id in toks else len(toks)
        toks = toks[:n]
        samples.append(Sample(prompt_ids[i], toks, new_logps[i, :n].tolist(),
                              tok.decode(toks), tok.eos_token_id in toks))
    return samples
