"""Each loss against a value worked out by hand in the comment above the assertion."""
import math

import numpy as np
import pytest
import torch

from rewards.aggregate import group_advantages
from rewards.advantages import group_center, group_norm, leave_one_out
from training.config import RLConfig
from training.losses import grpo_loss, kl_penalty, ppo_loss, sft_loss

# Two sequences, two positions, old log-probs 0 so the ratio r = exp(logp).
# seq 1: r = [1.5, 0.9], A = +1, both tokens count; seq 2: r = [0.5, 1.0], A = -2, only token 1.
LOGP = torch.log(torch.tensor([[1.5, 0.9], [0.5, 1.0]]))
OLD = torch.zeros(2, 2)
ADV = torch.tensor([1.0, -2.0])
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0]])


def test_grpo_seq_mean_clips_the_ratio_and_averages_per_sequence():
    # eps 0.2: seq 1 tokens -min(1.5, 1.2) = -1.2 and -min(0.9, 0.9) = -0.9 -> mean -1.05;
    # seq 2 token -min(0.5*-2, 0.8*-2) = 1.6 -> mean 1.6.  (-1.05 + 1.6) / 2 = 0.275.
    # Outside [0.8, 1.2]: 1.5 and 0.5 of the 3 counted tokens -> clip_frac 2/3.
    loss, info = grpo_loss(LOGP, OLD, ADV, MASK, clip_eps=0.2)
    assert loss.item() == pytest.approx(0.275, abs=1e-6)
    assert info["clip_frac"] == pytest.approx(2 / 3, abs=1e-6)


def test_grpo_token_mean_is_one_mean_over_all_tokens_dapo():
    # (-1.2 - 0.9 + 1.6) / 3 = -0.5 / 3
    loss, _ = grpo_loss(LOGP, OLD, ADV, MASK, 0.2, aggregation="token_mean")
    assert loss.item() == pytest.approx(-0.5 / 3, abs=1e-6)


def test_grpo_seq_sum_norm_divides_each_sum_by_a_constant_dr_grpo():
    # seq 1: -2.1 / 4 = -0.525; seq 2: 1.6 / 4 = 0.4; mean -0.0625
    loss, _ = grpo_loss(LOGP, OLD, ADV, MASK, 0.2, aggregation="seq_sum_norm", norm_tokens=4)
    assert loss.item() == pytest.approx(-0.0625, abs=1e-6)


def test_grpo_clip_higher_widens_only_the_upper_bound():
    # eps_low 0.2, eps_high 0.6: 1.5 is inside [0.8, 1.6] -> -1.5; seq 1 mean (-1.5 - 0.9)/2 = -1.2;
    # seq 2 still clipped below at 0.8 -> 1.6.  (-1.2 + 1.6) / 2 = 0.2; only 0.5 is out: 1/3.
    loss, info = grpo_loss(LOGP, OLD, ADV, MASK, 0.2, clip_eps_high=0.6)
    assert loss.item() == pytest.approx(0.2, abs=1e-6)
    assert info["clip_frac"] == pytest.approx(1 / 3, abs=1e-6)


def test_ppo_takes_per_token_advantages_and_dual_clip_bounds_negative_ones():
    # r = [4, 1], A = [-1, 2]: token 1 -min(-4, 1.2*-1) = 4, token 2 -min(2, 2) = -2.
    # Without dual clip: (4 - 2) / 2 = 1.0.  Dual clip c = 3 bounds token 1 at -c*A = 3: (3 - 2)/2.
    logp = torch.log(torch.tensor([[4.0, 1.0]]))
    adv = torch.tensor([[-1.0, 2.0]])
    mask = torch.ones(1, 2)
    plain, _ = ppo_loss(logp, torch.zeros(1, 2), adv, mask, 0.2)
    dual, _ = ppo_loss(logp, torch.zeros(1, 2), adv, mask, 0.2, dual_clip=3.0)
    assert plain.item() == pytest.approx(1.0, abs=1e-6)
    assert dual.item() == pytest.approx(0.5, abs=1e-6)


def test_ppo_with_sequence_advantages_equals_grpo():
    a, _ = ppo_loss(LOGP, OLD, ADV, MASK, 0.2)
    b, _ = grpo_loss(LOGP, OLD, ADV, MASK, 0.2)
    assert a.item() == pytest.approx(b.item(), abs=1e-7)


def test_decoupled_ppo_weights_each_tokens_clipped_surrogate_by_the_importance_weight():
    # The four tokens' surrogates as above: -1.2, -0.9 | 1.6, (masked). Weights w = [0.5, 2 | 1, 9]
    # (pi_start / pi_sampler, already truncated by the trainer): -0.6, -1.8 -> mean -1.2;
    # 1.6 -> 1.6. (-1.2 + 1.6) / 2 = 0.2. The masked token's weight never counts.
    w = torch.tensor([[0.5, 2.0], [1.0, 9.0]])
    for loss_fn in (grpo_loss, ppo_loss):
        loss, info = loss_fn(LOGP, OLD, ADV, MASK, 0.2, is_weight=w)
        assert loss.item() == pytest.approx(0.2, abs=1e-6)
        assert info["clip_frac"] == pytest.approx(2 / 3, abs=1e-6)  # the ratio's, unweighted
    high, _ = grpo_loss(LOGP, OLD, ADV, MASK, 0.2, clip_eps_high=0.6, is_weight=w)
    # clip-higher: seq 1 -1.5*0.5, -0.9*2 -> mean -1.275; seq 2 1.6. (-1.275 + 1.6) / 2
    assert high.item() == pytest.approx(0.1625, abs=1e-6)
    ones, _ = grpo_loss(LOGP, OLD, ADV, MASK, 0.2, is_weight=torch.ones(2, 2))
    assert ones.item() == pytest.approx(grpo_loss(LOGP, OLD, ADV, MASK, 0.2)[0].item(), abs=1e-7)


def test_decoupled_ppo_gradient_at_the_starting_weights_is_the_weighted_policy_gradient():
    # With old = logp (the update's first pass) the ratio is 1 and unclipped, so the gradient of
    # token t is -w_t A / n_seq_tokens * d logp_t: the importance-weighted policy gradient.
    logp = torch.log(torch.tensor([[0.3, 0.6]])).requires_grad_()
    w = torch.tensor([[0.5, 2.0]])
    loss, _ = grpo_loss(logp, logp.detach(), torch.tensor([3.0]), torch.ones(1, 2), 0.2,
                        is_weight=w)
    loss.backward()
    assert logp.grad.tolist()[0] == pytest.approx([-0.5 * 3 / 2, -2.0 * 3 / 2], abs=1e-6)


@pytest.mark.parametrize("estimator, expected", [
    ("k1", math.log(2)),                       # -log r, r = 0.25 / 0.5 = 0.5
    ("k2", 0.5 * math.log(2) ** 2),            # (log r)^2 / 2
    ("k3", 0.5 - 1 + math.log(2)),             # r - 1 - log r
])
def test_kl_estimators_by_hand(estimator, expected):
    logp = torch.log(torch.tensor([[0.5]])).requires_grad_(True)
    ref = torch.log(torch.tensor([[0.25]])).requires_grad_(True)
    value, info = kl_penalty(logp, ref, torch.ones(1, 1), estimator)
    assert value.item() == pytest.approx(expected, abs=1e-6)
    value.backward()
    assert ref.grad is None and logp.grad is not None  # the reference is frozen


def test_kl_k3_is_zero_when_policy_equals_reference():
    logp = torch.log(torch.tensor([[0.3, 0.7]]))
    value, _ = kl_penalty(logp, logp.clone(), torch.ones(1, 2), "k3")
    assert value.item() == 0.0


def test_sft_loss_is_mean_nll_over_completion_tokens():
    # tokens counted: -1, -2, -3 -> (1 + 2 + 3) / 3 = 2
    logp = torch.tensor([[-1.0, -2.0], [-3.0, -9.0]])
    assert sft_loss(logp, torch.tensor([[1.0, 1.0], [1.0, 0.0]])).item() == pytest.approx(2.0)


REWARDS = np.array([1.0, 0.0, 0.0, 1.0, 2.0, np.nan, 4.0])
GROUPS = np.array(["a", "a", "a", "a", "b", "b", "b"])


def test_rloo_baseline_is_the_mean_of_the_other_completions():
    # group a (sum 2, k 4): 1 - 1/3 = 2/3, 0 - 2/3 = -2/3; group b without the NaN: 2 - 4, 4 - 2.
    adv = leave_one_out(REWARDS, GROUPS)
    np.testing.assert_allclose(adv, [2 / 3, -2 / 3, -2 / 3, 2 / 3, -2.0, 0.0, 2.0], atol=1e-12)


def test_group_center_and_group_norm_by_hand():
    # a: mean 0.5 -> +-0.5, std 0.5 -> +-1; b: mean 3 -> -1, +1, std 1 -> -1, +1
    np.testing.assert_allclose(group_center(REWARDS, GROUPS), [0.5, -0.5, -0.5, 0.5, -1, 0, 1])
    np.testing.assert_allclose(group_norm(REWARDS, GROUPS), [1, -1, -1, 1, -1, 0, 1], atol=1e-5)
    np.testing.assert_allclose(group_norm(REWARDS, GROUPS), group_advantages(REWARDS, GROUPS))


def test_unknown_aggregation_is_refused_by_name():
    with pytest.raises(ValueError, match="aggregation 'mean'"):
        grpo_loss(LOGP, OLD, ADV, MASK, 0.2, aggregation="mean")


def test_every_registered_advantage_estimator_is_reached_by_some_config():
    from rewards.advantages import ADVANTAGES, advantages_for, estimator_for

    configs = [RLConfig(), RLConfig(algorithm="ppo"), RLConfig(scale_advantages=False),
               RLConfig(algorithm="rloo")]
    reached = {estimator_for(rl.algorithm, rl.scale_advantages) for rl in configs}
    assert reached == set(ADVANTAGES)
    np.testing.assert_allclose(advantages_for("rloo", True, REWARDS, GROUPS),
                               leave_one_out(REWARDS, GROUPS))
    # the flows' entry point is the same implementation, not a copy of it
    assert group_advantages is advantages_for.__globals__["group_advantages"]
    np.testing.assert_allclose(group_advantages(REWARDS, GROUPS, scale=False),
                               group_center(REWARDS, GROUPS))


def test_an_option_that_would_mean_another_is_refused_by_name():
    with pytest.raises(ValueError, match="scale_advantages"):
        RLConfig(algorithm="rloo", scale_advantages=False)
    ppo = RLConfig.model_fields["algorithm"].description
    assert "GRPO" in ppo.split("ppo:")[1].split(";")[0]  # ppo says plainly what it is


def test_grpo_takes_per_token_advantages_as_it_takes_one_per_sample():
    torch.manual_seed(0)
    logp = torch.randn(2, 5, requires_grad=True)
    old = logp.detach() + 0.1 * torch.randn(2, 5)
    mask = torch.ones(2, 5)
    adv = torch.tensor([0.5, -1.0])
    for high in (None, 0.3):  # both of grpo_loss's paths
        one, _ = grpo_loss(logp, old, adv, mask, clip_eps_high=high)
        per, _ = grpo_loss(logp, old, adv[:, None].expand(2, 5), mask, clip_eps_high=high)
        assert torch.allclose(one, per)
        # a token's own advantage weighs that token: zero on the second half of row 0
        split = adv[:, None].expand(2, 5).clone()
        split[0, 3:] = 0.0
        (g,) = torch.autograd.grad(grpo_loss(logp, old, split, mask, clip_eps_high=high)[0], logp)
        assert torch.all(g[0, 3:] == 0) and torch.all(g[0, :3] != 0)
