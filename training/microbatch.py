"""Which sequences go into which forward/backward, on which process, with what weight.

DeepSpeed divides each micro-batch loss by the accumulation steps and averages gradients over
processes. To make one optimizer step equal the loss over the *whole* batch, whatever the
split, micro-batch m (on any rank) is weighted  w_m = (units_m / units_total) * accum * world,
where a unit is what the loss averages over (a sequence, or a token for `token_mean`).
Every rank runs the same number of micro-steps (`accum`); a rank with fewer real micro-batches
runs zero-weight ones, so the accumulation boundaries line up across processes.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MicroBatch:
    indices: tuple[int, ...]  # into the update's sample list
    weight: float  # multiplier on the micro-batch's (mean) loss


@dataclass(frozen=True)
class Plan:
    steps: tuple[tuple[MicroBatch, ...], ...]  # [epoch][micro-step] for this rank
    accum: int  # micro-steps per optimizer step (the same on every rank and epoch)


def loss_units(prompt_len: int, completion_len: int, max_len: int | None, per: str) -> int:
    """Sequences count 1; for `token_mean` a sequence counts its completion tokens that survive
    truncation to max_len and are predicted (the first position has no prediction)."""
    if per != "token_mean":
        return 1
    total = prompt_len + completion_len
    kept = total if max_len is None else min(total, max_len)
    return max(0, kept - max(prompt_len, 1))


def pack(indices: list[int], lengths: list[int], micro_size: int,
         micro_tokens: int | None) -> list[list[int]]:
    """Cut `indices` into micro-batches: `micro_size` at a time in the given order, or, with a
    token budget, longest first while rows x longest row stays within it (a single sequence
    over budget goes alone)."""
    if micro_tokens is None:
        return [indices[k:k + micro_size] for k in range(0, len(indices), micro_size)]
    out: list[list[int]] = []
    cur: list[int] = []
    for i in sorted(indices, key=lambda i: -lengths[i]):
        longest = lengths[cur[0]] if cur else lengths[i]
        if cur and (len(cur) + 1) * longest > micro_tokens:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


def plan_update(orders: list[list[int]], lengths: list[int], units: list[int], micro_size: int,
                micro_tokens: int | None, world: int, rank: int,
                total_units: float | None = None) -> Plan:
    """orders: one shuffled order of the sample indices per epoch (the same on every rank).
    One process without a token budget is the case world=1 of the same weighting: a short last
    micro-batch weighs its share of the units, not a full micro-batch's.
    total_units: what the step averages over, when it holds more than the planned samples (the
    trainer leaves out samples whose loss is identically zero, but they still count); None: the
    planned samples' own units."""
    per_rank = [[pack(o[r::world], lengths, micro_size, micro_tokens) for r in range(world)]
                for o in orders]
    accum = max([1] + [len(mbs) for epoch in per_rank for mbs in epoch])
    total = sum(units[i] for i in orders[0]) if orders else 0
    if total_units is not None:
        if total_units < total:
            raise ValueError(f"total_units={total_units} is less than the planned samples' "
                             f"{total} units: the normaliser must include every planned sample")
        total = total_units
    steps = []
    for e, epoch in enumerate(per_rank):
        mine = [MicroBatch(tuple(c), sum(units[i] for i in c) / max(total, 1) * accum * world)
                for c in epoch[rank]]
        filler = orders[e][:1]
        mine += [MicroBatch(tuple(filler), 0.0)] * (accum - len(mine))
        steps.append(tuple(mine))
    return Plan(tuple(steps), accum)
