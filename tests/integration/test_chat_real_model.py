"""The real SmolLM2-135M-Instruct playing an agent episode through tools (`episodes.action_format:
tools`): its own sampler draws each turn from the chat context, the kind runs what it called (or
says what was malformed) in the real process sandbox, and the trainer's sequence holds exactly
the ids and log-probs the sampler drew at the assistant positions. One episode of two
turns, each cut at 12 tokens: what is checked is the bookkeeping, not the model's skill. Minutes
on 2 busy cores (3 min measured at a load of 10; each turn's prefill of the ~700-token chat
is most of it)."""
from __future__ import annotations

import math
import pickle

import pytest
import torch

from envs.registry import make_env
from flows.config import load_config
from flows.episode_exec import step_local
from flows.episodes import play
from flows.scoring import episode_metrics
from training import pretrained
from training.episodes import sample_actions

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def model():
    if not (pretrained.converted_dir("smollm2-135m-instruct") / pretrained.MODEL_FILE).is_file():
        pytest.skip("SmolLM2-135M-Instruct is not converted: run `make model`")
    from training.policy import load_pretrained, tokenizer_of

    m = load_pretrained("smollm2-135m-instruct")
    return m, tokenizer_of(m)


# slow: minutes of SmolLM2 sampling; the templates with its real tokenizer are in
# tests/unit/test_chat_episodes.py and the tools loop in tests/unit/test_episode_tools.py
@pytest.mark.slow
def test_the_real_model_in_tools_episodes_trains_on_exactly_what_it_sampled(model):
    m, tok = model
    cfg = load_config(None, ["episodes.enabled=true"])
    env = make_env("agent", {"max_turns": 2, "action_format": "tools", "sft_demos": False,
                             "action_tokens": 12, "procedural": {"families": ["add"]}})
    tasks = env.generate()[:1]
    drawn: dict[int, list] = {}
    gen = torch.Generator().manual_seed(0)

    def sample_fn(turn, contexts, episodes, max_new, _k):
        out = sample_actions(m, contexts, max_new, temperature=1.0, generator=gen, tokenizer=tok)
        for e, s in zip(episodes, out):
            drawn.setdefault(id(e), []).append(s)
        return out, 0.0

    def step_fn(turn, items):
        return pickle.loads(pickle.dumps(step_local(pickle.loads(pickle.dumps(items)),
                                                    cfg.sandbox, cfg.rewards)))

    # one episode of two turns: each turn's prefill of the ~700-token chat is most of the cost
    eps = play(tasks, [env] * len(tasks), 1, 1024, tok, 12, sample_fn, step_fn)
    for e in eps:
        t = e.tokens
        got = [(i, lp) for i, lp, k in zip(t.ids, t.logprobs, t.mask) if k]
        want = [(i, lp) for s in drawn[id(e)] for i, lp in zip(s.completion_ids, s.logprobs)]
        assert got == want and e.done
        assert e.chat.messages[2]["content"] == tok.decode(drawn[id(e)][0].completion_ids)
        e.chat.check()  # recorded, never raised, whatever the model sampled
    metrics = episode_metrics(eps)
    rate = metrics["episode/tool_valid_rate"]
    assert math.isnan(rate) or 0.0 <= rate <= 1.0
