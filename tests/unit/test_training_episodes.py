"""Episodes as training sequences: the environment's tokens are context, never a target.

The gradient tests run the real tiny policy, `make_batch`, `token_logprobs` and the GRPO / SFT
losses; they fail if the mask let an observation token into the loss."""
from __future__ import annotations

import pytest
import torch

from training.batch import make_batch, token_logprobs
from training.config import PolicyConfig
from training.episodes import (EpisodeTokens, encode_transcript, fit_observation,
                               observation_text)
from training.losses import grpo_loss, sft_loss
from training.policy import build_policy
from training.tokenizer import ByteTokenizer

TOK = ByteTokenizer()


def _episode() -> EpisodeTokens:
    """prompt | action 1 (policy) | observation (env) | action 2 (policy)."""
    ep = EpisodeTokens(TOK.encode_prompt("def f(x):\n"))
    a1 = TOK.encode("<run_tests/>", bos=False) + [TOK.eos_token_id]
    ep.add_policy(a1, [-0.5] * len(a1))
    ep.add_env(TOK.encode(observation_text("FAIL f(0) raised ZeroDivisionError"), bos=False))
    a2 = TOK.encode("<submit/>", bos=False) + [TOK.eos_token_id]
    ep.add_policy(a2, [-0.7] * len(a2))
    return ep


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_policy(PolicyConfig(n_layer=1, n_embd=32, n_head=2, max_len=128))


def _grpo_grads(model, ep: EpisodeTokens, mask, old=None):
    b = make_batch([ep.prompt_ids], [ep.ids], TOK.pad_token_id, 128, [mask])
    model.zero_grad()
    logp = token_logprobs(model, b)
    logp.retain_grad()
    olds = torch.zeros_like(logp)
    start = len(ep.prompt_ids) - 1  # target position of the first completion token
    olds[0, start:start + len(ep.ids)] = torch.tensor(old if old is not None else ep.logprobs)
    loss, _ = grpo_loss(logp, olds, torch.tensor([1.0]), b.loss_mask)
    loss.backward()
    return loss.detach(), logp.grad[0, start:start + len(ep.ids)].clone(), \
        [p.grad.clone() for p in model.parameters()]


def test_environment_tokens_get_zero_gradient_and_policy_tokens_do_not(model):
    ep = _episode()
    _, g, _ = _grpo_grads(model, ep, ep.mask)
    env = torch.tensor(ep.mask) == 0
    assert env.sum() > 20 and (~env).sum() > 20
    assert torch.all(g[env] == 0.0)
    assert torch.all(g[~env] != 0.0)
    # without the mask the same positions would get gradient: the check above can fail
    _, g_all, _ = _grpo_grads(model, ep, None)
    assert torch.all(g_all[env] != 0.0)


def test_what_the_old_logprobs_say_about_environment_tokens_changes_nothing(model):
    ep = _episode()
    loss, _, grads = _grpo_grads(model, ep, ep.mask)
    perturbed = [lp if m else lp - 3.0 for lp, m in zip(ep.logprobs, ep.mask)]
    loss2, _, grads2 = _grpo_grads(model, ep, ep.mask, old=perturbed)
    assert torch.equal(loss, loss2)
    assert all(torch.equal(a, b) for a, b in zip(grads, grads2))
    # ... while the same change on a policy token does change the loss
    perturbed = [lp - 3.0 if m else lp for lp, m in zip(ep.logprobs, ep.mask)]
    loss3, _, _ = _grpo_grads(model, ep, ep.mask, old=perturbed)
    assert not torch.equal(loss, loss3)


def test_sft_on_a_transcript_averages_over_the_policy_tokens_only(model):
    prompt, ids, mask = encode_transcript(TOK, "def f(x):\n", [
        ("<run_tests/>", True), (observation_text("1/2 visible examples passed"), False),
        ("<submit/>", True)])
    b = make_batch([prompt], [ids], TOK.pad_token_id, 128, [mask])
    with torch.no_grad():
        logp = token_logprobs(model, b)
    start = len(prompt) - 1
    lp = logp[0, start:start + len(ids)]
    policy = torch.tensor(mask, dtype=torch.bool)
    # worked out by hand: the mean NLL of the policy's 12 + 1 + 9 + 1 tokens
    assert int(policy.sum()) == len("<run_tests/>") + 1 + len("<submit/>") + 1
    assert torch.allclose(sft_loss(logp, b.loss_mask), -lp[policy].mean())


def test_a_transcript_marks_each_policy_segment_and_its_eos_and_nothing_else():
    prompt, ids, mask = encode_transcript(TOK, "P", [("ab", True), ("<obs>\nx\n</obs>\n", False),
                                                     ("c", True)])
    assert prompt == [TOK.bos_token_id, ord("P")]
    assert ids[:3] == [ord("a"), ord("b"), TOK.eos_token_id] and mask[:3] == [1, 1, 1]
    assert mask[3:-2] == [0] * len("<obs>\nx\n</obs>\n")
    assert ids[-2:] == [ord("c"), TOK.eos_token_id] and mask[-2:] == [1, 1]


def test_a_mask_of_the_wrong_length_is_refused_with_its_index():
    with pytest.raises(ValueError, match=r"completion_masks\[1\] has 2 entries for 3"):
        make_batch([[1], [1]], [[2, 3], [2, 3, 4]], 0, None, [None, [1, 0]])


def test_a_long_observation_keeps_failures_and_the_verdict_within_its_budget():
    passes = "\n".join(f"PASS f({i}) == {i}" for i in range(40))
    trace = "Traceback (most recent call last):\n" + "  File \"x.py\", line 3\n" * 20
    obs = (f"wrote solution.py (20 bytes)\nVisible tests [exit 1]\n{passes}\n"
           f"FAIL f(-1) raised ValueError: bad\n{trace}ValueError: bad\n"
           "40/41 visible examples passed\n[turn 1/3; 2 left]")
    out = fit_observation(TOK, obs, 160)
    assert len(TOK.encode(out, bos=False)) <= 160
    for line in ("Visible tests [exit 1]", "FAIL f(-1) raised ValueError: bad",
                 "40/41 visible examples passed", "[turn 1/3; 2 left]"):
        assert line in out
    assert "lines cut]" in out
    assert out.index("FAIL") < out.index("40/41")  # original order kept
    assert fit_observation(TOK, "short", 160) == "short"
