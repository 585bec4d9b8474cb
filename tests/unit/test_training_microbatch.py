"""Micro-batch plans: any split (token budget, processes) weighs every unit exactly once."""
import random

import pytest

from training.microbatch import loss_units, pack, plan_update


def _combined(plan, per_sample_loss, units, world):
    """What DeepSpeed computes for one rank's epoch: sum_m w_m * mean_m / accum (and the caller
    averages over ranks, / world)."""
    out = []
    for epoch in plan.steps:
        total = 0.0
        for mb in epoch:
            u = sum(units[i] for i in mb.indices)
            mean = sum(per_sample_loss[i] * units[i] for i in mb.indices) / u
            total += mb.weight * mean / plan.accum
        out.append(total)
    return out


@pytest.mark.parametrize("world, budget", [(1, None), (1, 40), (2, 40), (2, None), (3, 25)])
def test_split_over_processes_and_token_budgets_gives_the_full_batch_mean(world, budget):
    rng = random.Random(0)
    n = 11
    lengths = [rng.randrange(3, 20) for _ in range(n)]
    units = [rng.randrange(1, 9) for _ in range(n)]
    loss = [rng.uniform(-2, 2) for _ in range(n)]
    orders = [rng.sample(range(n), n) for _ in range(2)]
    plans = [plan_update(orders, lengths, units, 3, budget, world, r) for r in range(world)]
    assert len({p.accum for p in plans}) == 1  # boundaries line up across ranks
    want = sum(l * u for l, u in zip(loss, units)) / sum(units)
    for e in range(2):
        got = sum(_combined(p, loss, units, world)[e] for p in plans) / world
        assert got == pytest.approx(want, rel=1e-12)


def test_single_process_without_budget_weighs_a_short_last_micro_batch_by_its_size():
    # 70 samples in micro-batches of 32: 32, 32, 6. Each weighs units_m / 70 * accum (3), so
    # the 6-sample one counts 6/32 of a full one, and per sample they all count the same.
    order = list(range(70))
    plan = plan_update([order], [5] * 70, [1] * 70, 32, None, 1, 0)
    assert plan.accum == 3
    assert [len(mb.indices) for mb in plan.steps[0]] == [32, 32, 6]
    weights = [mb.weight for mb in plan.steps[0]]
    assert weights == pytest.approx([32 / 70 * 3, 32 / 70 * 3, 6 / 70 * 3])
    per_sample = {w / len(mb.indices) for w, mb in zip(weights, plan.steps[0])}
    assert max(per_sample) == pytest.approx(min(per_sample))


def test_token_budget_packs_longest_first_within_budget():
    lengths = [10, 3, 7, 7, 30]
    batches = pack([0, 1, 2, 3, 4], lengths, 99, micro_tokens=21)
    assert batches == [[4], [0, 2], [3, 1]]  # 30 alone (over budget); 2 x 10 = 20; 2 x 7 = 14
    for b in batches[1:]:
        assert len(b) * max(lengths[i] for i in b) <= 21


def test_token_mean_units_count_predicted_completion_tokens_after_truncation():
    assert loss_units(4, 6, None, "token_mean") == 6
    assert loss_units(4, 6, 8, "token_mean") == 4
    assert loss_units(0, 6, None, "token_mean") == 5  # the first token has no prediction
    assert loss_units(4, 6, 8, "seq_mean") == 1


def test_samples_left_out_of_the_plan_still_count_in_the_normaliser():
    # Samples 0..4 run; 5..9 have a loss of exactly 0 and are not run, but the step is still
    # the mean over all ten: sum_{i<5} loss_i * u_i / sum_{all} u_i.
    units = [1, 2, 3, 1, 2, 4, 4, 1, 1, 1]
    loss = [0.5, -1.0, 2.0, 0.25, 1.5]
    plan = plan_update([[3, 1, 4, 0, 2]], [5] * 5, units[:5], 2, None, 1, 0, sum(units))
    assert _combined(plan, loss, units, 1)[0] == pytest.approx(
        sum(l * u for l, u in zip(loss, units)) / sum(units), rel=1e-12)
    with pytest.raises(ValueError, match="total_units"):
        plan_update([[0, 1]], [5, 5], [1, 1], 2, None, 1, 0, 1)
