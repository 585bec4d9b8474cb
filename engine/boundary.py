"""The one sampling boundary: token ids in; token ids, per-token log-probs and a finish reason
out. Every engine answers the same `SampleRequest` with the same `Completion`s, so the stage
that samples (flows/pipeline.py `sample_completions`) does not know which engine it talks to:

    prompts [P lists of ids] ──► Sampler.sample(request) ──► P x n Completions, prompt-major
                                                             (prompt 0's n, then prompt 1's, ...)

What was sampled is the truth: a completion's `token_ids` are the ids drawn (with the EOS or the
token that completed a stop string when one ended it), never the text re-tokenised; `text` is
only the tokenizer's decoding of them for convenience (cut before a stop string).

`LocalSampler` is the in-process sampler (training/generate.py's KV-cache loop, the tiny
default's engine); `engine.vllm_sampler.VLLMSampler` is a vLLM server.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, Sequence, runtime_checkable

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SampleRequest:
    """What to sample. The log-probs that come back are of `softmax(logits / temperature)` (the
    distribution the RL loss recomputes, training/batch.py `token_logprobs`); `top_p` only
    restricts which tokens can be drawn, as in the local sampler."""

    prompts: tuple[tuple[int, ...], ...]  # [P][T_p] token ids of each prompt (chat template applied)
    n: int = 1  # completions per prompt (a GRPO group)
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    stop: tuple[str, ...] = ()  # a completion ends at the token that completes one of these
    greedy: bool = False  # argmax at every step (log-probs still at `temperature`)
    # The local sampler draws from torch.Generator(seed): the same request gives the same
    # completions. vLLM's CPU build crashes on a per-request seed (`CPU Generator does not use
    # offset`), so an engine's samples are reproducible only by its server's own --seed.
    seed: int | None = None

    def __post_init__(self) -> None:
        # Lists are accepted and frozen into tuples, so a request can be hashed and cached.
        object.__setattr__(self, "prompts", tuple(tuple(int(t) for t in p) for p in self.prompts))
        object.__setattr__(self, "stop", tuple(self.stop))
        if not self.prompts:
            raise ValueError("SampleRequest.prompts is empty: expected at least one prompt")
        for i, p in enumerate(self.prompts):
            if not p:
                raise ValueError(f"SampleRequest.prompts[{i}] is empty: expected the prompt's token "
                                 "ids (at least one)")
            if min(p) < 0:
                raise ValueError(f"SampleRequest.prompts[{i}] holds a negative token id {min(p)}")
        if self.n < 1:
            raise ValueError(f"SampleRequest.n={self.n}: expected at least 1 completion per prompt")
        if not self.temperature > 0:
            raise ValueError(f"SampleRequest.temperature={self.temperature}: expected > 0 (use "
                             "greedy=True for argmax; the log-probs are still at a temperature)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SampleRequest.top_p={self.top_p}: expected 0 < top_p <= 1")
        if self.max_new_tokens < 1:
            raise ValueError(f"SampleRequest.max_new_tokens={self.max_new_tokens}: expected >= 1")
        if any(not s for s in self.stop):
            raise ValueError(f"SampleRequest.stop={list(self.stop)!r} holds an empty string")

    @property
    def size(self) -> int:
        """Completions the request asks for."""
        return len(self.prompts) * self.n


@dataclass(frozen=True)
class Completion:
    """One sampled completion of one prompt."""

    prompt_index: int  # which of the request's prompts it continues
    token_ids: tuple[int, ...]  # [L] as drawn; ends with EOS or a stop string's last token if any
    logprobs: tuple[float, ...]  # [L] log-prob of each drawn token under the sampling distribution
    finish_reason: FinishReason  # "stop": EOS or a stop string; "length": max_new_tokens reached
    text: str  # the tokenizer's decoding of token_ids, without EOS and cut before a stop string

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(f"completion of prompt {self.prompt_index}: {len(self.token_ids)} "
                             f"token ids but {len(self.logprobs)} log-probs")


@runtime_checkable
class Sampler(Protocol):
    """An engine behind the boundary. `sample` returns `request.size` completions, prompt-major;
    `progress` (training.progress.Progress or anything with `update(done)`) is told how many
    are done as they finish. `close` frees what the sampler holds (a server it started)."""

    def sample(self, request: SampleRequest, progress=None) -> list[Completion]: ...

    def close(self) -> None: ...


def as_samples(request: SampleRequest, completions: Sequence[Completion]):
    """The completions as the records the loop builds rows from (training.generate.Sample):
    what `sample_completions` returns today, whichever engine sampled."""
    from training.generate import Sample  # noqa: PLC0415

    return [Sample(list(request.prompts[c.prompt_index]), list(c.token_ids), list(c.logprobs),
                   c.text, c.finish_reason == "stop") for c in completions]


class LocalSampler:
    """The in-process sampler (training/episodes.py `sample_actions` over training/generate.py's
    batched KV-cache loop) behind the boundary: the policy lives in this process, batches of
    `batch_size` sequences are sampled one after the other, in fp32."""

    def __init__(self, model, batch_size: int = 64, tokenizer=None):
        self.model, self.batch_size, self.tokenizer = model, batch_size, tokenizer

    def sample(self, request: SampleRequest, progress=None) -> list[Completion]:
        import torch  # noqa: PLC0415

        from training.episodes import sample_actions  # noqa: PLC0415

        # Prompt-major copies: a group's n completions sit side by side in one batch, as the
        # loop has always laid them out, so a seeded request draws what it drew before.
        contexts = [list(p) for p in request.prompts for _ in range(request.n)]
        gen = None
        if request.seed is not None and not request.greedy:
            gen = torch.Generator().manual_seed(request.seed)
        out = sample_actions(self.model, contexts, request.max_new_tokens, request.temperature,
                             request.top_p, greedy=request.greedy, batch_size=self.batch_size,
                             generator=gen, tokenizer=self.tokenizer, stop=request.stop,
                             progress=progress)
        return [Completion(i // request.n, tuple(s.completion_ids), tuple(s.logprobs),
                           "stop" if s.finished else "length", s.text) for i, s in enumerate(out)]

    def close(self) -> None:
        pass
