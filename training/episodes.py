"""Multi-turn episodes as token sequences: the policy's actions and the environment's
observations interleaved after the first prompt, with a mask that says which tokens are whose.

    prompt_ids | action 1 (+EOS) | <obs>observation 1</obs> | action 2 (+EOS) | ... | action n
      (prompt)   mask 1             mask 0                     mask 1                mask 1

The whole episode is one training sequence (one row in the store): `completion_ids` is
everything after the prompt, `completion_mask` is 1 on the policy's tokens and 0 on the
environment's, and `sampling_logprobs` is 0.0 on the environment's tokens. The RL loss and the
SFT loss both multiply by the mask (training/batch.py), so an observation is context the policy
conditions on, never a target it is trained to produce.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

import torch

from training import threads
from training.generate import Sample, sample_batch
from training.progress import Progress

OBS_OPEN, OBS_CLOSE = "<obs>\n", "\n</obs>\n"

Segment = tuple[str, bool]  # (text, by_policy)


# Lines by how much they say about what happened: 0 = the outcome (failures, the verdict, the
# turn counter, the command's header), 1 = exception lines of a traceback, 2 = the rest.
_TIER0 = re.compile(r"^(FAIL|LOAD ERROR|Malformed action|Episode over|\[turn |\d+/\d+ visible"
                    r"|Visible tests|\$ python|write |stderr:)")
_TIER1 = re.compile(r"^\w+(Error|Exception|Exit|Interrupt)\b")


def _tier(line: str) -> int:
    return 0 if _TIER0.match(line) else 1 if _TIER1.match(line) else 2


def fit_observation(tok, text: str, budget: int) -> str:
    """`text` cut to at most `budget` tokens of `tok`, whole lines first: the lines that say
    what happened (FAIL lines, errors, the verdict `k/n visible examples passed`, the turn
    counter, the command's header) are kept before the rest (PASS lines, tracebacks), in their
    original order, with a `[N lines cut]` marker where lines were left out; a key line
    longer than what is left is cut at its end."""
    n = lambda s: len(tok.encode(s, bos=False))  # noqa: E731
    if n(text) <= budget:
        return text
    lines = text.split("\n")
    cost = [n(line) + 1 for line in lines]
    chosen: list[int] = []  # in priority order
    shown = dict(enumerate(lines))
    left = budget
    for i in sorted(range(len(lines)), key=lambda i: (_tier(lines[i]), i)):
        if cost[i] <= left:
            chosen.append(i)
            left -= cost[i]
        elif _tier(lines[i]) == 0 and left > 8:  # a long key line: its start
            shown[i] = tok.decode(tok.encode(lines[i], bos=False)[:left - 1])
            chosen.append(i)
            left = 0

    def build(sel: list[int]) -> str:
        out, gap, keep = [], 0, set(sel)
        for i in range(len(lines)):
            if i in keep:
                if gap:
                    out.append(f"[{gap} lines cut]")
                gap = 0
                out.append(shown[i])
            else:
                gap += 1
        return "\n".join(out + ([f"[{gap} lines cut]"] if gap else []))

    while chosen and n(build(chosen)) > budget:  # the markers need room too
        chosen.pop()
    out = build(chosen)
    ids = tok.encode(out, bos=False)
    return out if len(ids) <= budget else tok.decode(ids[:budget])


def observation_text(obs: str) -> str:
    """An observation as it sits in the policy's context."""
    return OBS_OPEN + obs + OBS_CLOSE


@dataclass
class EpisodeTokens:
    """The growing token sequence of one episode (see the module docstring)."""

    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)

    def context(self) -> list[int]:
        return self.prompt_ids + self.ids

    def add_policy(self, ids: Sequence[int], logprobs: Sequence[float]) -> None:
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} action tokens but {len(logprobs)} log-probs")
        self.ids += list(ids)
        self.logprobs += [float(x) for x in logprobs]
        self.mask += [1] * len(ids)

    def add_env(self, ids: Sequence[int]) -> None:
        self.ids += list(ids)
        self.logprobs += [0.0] * len(ids)
        self.mask += [0] * len(ids)


def _run_starts(mask: Sequence[int]) -> list[bool]:
    """Per token: whether a run of policy tokens (1s) begins there."""
    return [bool(m) and (i == 0 or not mask[i - 1]) for i, m in enumerate(mask)]


def policy_runs(mask: Sequence[int]) -> int:
    """How many runs of policy tokens (1s) `mask` holds: one per turn of an episode."""
    return sum(_run_starts(mask))


def token_values(mask: Sequence[int], per_turn: Sequence[float]) -> list[float]:
    """One value per completion token: turn k's value on the k-th run of policy tokens, 0 on
    the environment's tokens (they are out of the loss)."""
    starts = _run_starts(mask)
    if sum(starts) != len(per_turn):
        raise ValueError(f"{len(per_turn)} turn values for {sum(starts)} runs of policy tokens")
    out, k = [], -1
    for m, start in zip(mask, starts):
        k += start
        out.append(float(per_turn[k]) if m else 0.0)
    return out


def encode_transcript(tok, prompt: str, segments: Sequence[Segment]
                      ) -> tuple[list[int], list[int], list[int]]:
    """(prompt_ids, completion_ids, completion_mask) of a written transcript (an SFT
    demonstration): each policy segment ends with EOS, as a sampled action does."""
    ep = EpisodeTokens(tok.encode_prompt(prompt))
    for text, by_policy in segments:
        ids = tok.encode(text, bos=False)
        if by_policy:
            ids = ids + [tok.eos_token_id]
            ep.add_policy(ids, [0.0] * len(ids))
        else:
            ep.add_env(ids)
    return ep.prompt_ids, ep.ids, ep.mask


def policy_token_units(sample, max_len: int | None, per: str) -> int:
    """`training.microbatch.loss_units` for a masked sample: for `token_mean`, the policy tokens
    that survive truncation to `max_len` (environment tokens are not averaged over)."""
    if per != "token_mean":
        return 1
    keep = len(sample.completion_ids) if max_len is None else max(0, max_len - len(sample.prompt_ids))
    return int(sum(sample.completion_mask[:keep]))


@torch.no_grad()
def sample_actions(model, contexts: list[list[int]], max_new_tokens: int, temperature: float = 1.0,
                   top_p: float = 1.0, greedy: bool = False, batch_size: int = 64,
                   generator: torch.Generator | None = None, tokenizer=None,
                   stop: tuple[str, ...] = (), progress: Progress | None = None) -> list[Sample]:
    """The next action of every live episode, in batches: like `training.generate.sample`, but
    from token contexts (prompt + the episode so far), which must not be re-tokenised. An
    action ends at EOS, at the token completing one of the `stop` strings, or at
    `max_new_tokens`. `progress` is advanced by each batch's sequences."""
    from training.policy import tokenizer_of  # noqa: PLC0415

    tok = tokenizer or tokenizer_of(model)
    was_training = model.training
    model.eval()
    out: list[Sample] = []
    for start in range(0, len(contexts), batch_size):
        if start:  # a stage's later batches follow a neighbour (or an overlapped update) that
            threads.retune()  # came or went since it started
        out.extend(sample_batch(model, contexts[start:start + batch_size], max_new_tokens,
                                temperature, top_p, greedy, generator, True, tok, tuple(stop)))
        if progress is not None:
            progress.update(len(out))
    model.train(was_training)
    return out
