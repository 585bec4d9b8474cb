"""An iteration's log lines (flows/iteration.py `finish`): rewards and pass rates, groups, the
update's speed and memory, the off-policy figures and the sampler/trainer log-prob gap."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from flows.config import RunConfig

if TYPE_CHECKING:
    from flows.iteration import Collected


def log_iteration(cfg: RunConfig, it: int, col: Collected, metrics: dict, log) -> None:
    """Iteration `it`'s log lines: rewards, groups, the update, off-policy and engine figures."""
    timings, kept_groups = col.timings, col.kept_groups
    groups = len(col.rows) // cfg.sampling.group_size
    msg = (f"iteration {it}: reward {metrics['rollout/mean_reward']:.3f}, "
           f"train pass {metrics['rollout/pass_rate']:.3f}")
    if "episode/turns_mean" in metrics:
        msg += (f", episode turns {metrics['episode/turns_mean']:.2f}, submitted "
                f"{metrics['episode/end_submit']:.2f}")
    if "heldout/pass_sampled" in metrics:
        msg += (f", held-out pass greedy {metrics['heldout/pass_greedy']:.3f} "
                f"sampled {metrics['heldout/pass_sampled']:.3f}")
    log.info(msg + f" ({metrics['time/iteration_s']:.1f}s, {metrics['rollout/per_s']:.0f} rollouts/s)")
    log.info(f"iteration {it} groups: {kept_groups}/{groups} informative in {col.rounds} "
             f"round(s), {metrics['curriculum/groups_trained']} trained on; sandbox utilisation "
             f"{metrics['sandbox/utilisation']:.2f}, scheduler queue max "
             f"{metrics.get('cluster/queued_max', '-')} queued / "
             f"{metrics.get('cluster/processing_max', '-')} processing")
    if "train/peak_mem_mb" in metrics:
        log.info(_update_line(it, metrics))
    if cfg.rl.overlap and "train/staleness" in metrics:
        log.info(f"iteration {it} off-policy: sampled by v{col.sampled_with}, trained from "
                 f"v{it}; importance weight mean {metrics['train/is_weight_mean']:.3f}, "
                 f"{metrics['train/is_weight_capped']:.3f} of tokens at the cap; the flow "
                 f"waited {timings.get('time/update_wait_s', 0.0):.2f}s for the update")
    _log_gap(cfg, it, col, metrics, log)
    log.info("iteration %d stage seconds: %s", it, ", ".join(
        f"{k[5:-2]} {v_:.2f}" for k, v_ in timings.items()))


def _log_gap(cfg: RunConfig, it: int, col: Collected, metrics: dict, log) -> None:
    """The sampler/trainer log-prob gap, a warning over `rl.logprob_gap_warn`."""
    gap = metrics.get("train/logprob_gap_mean")
    if gap is not None:
        line = (f"iteration {it} sampler/trainer log-prob gap: mean {gap:.2e}, max "
                f"{metrics['train/logprob_gap_max']:.2e}, {metrics['train/logprob_gap_over']:.3f} "
                f"of tokens over 0.1")
        if "engine/sync_s" in metrics:
            how = (" in place" if metrics.get("engine/sync_in_place") else "") + (
                f" ({metrics['engine/sync_fallbacks']} fallback(s) to a restart)"
                if metrics.get("engine/sync_fallbacks") else "")
            line += (f"; engine synced to v{col.sampled_with}{how} in "
                     f"{metrics['engine/sync_s']:.1f}s, {metrics['engine/restarts']} restart(s)")
        (log.warning if gap > cfg.rl.logprob_gap_warn else log.info)(
            line + (f" (over rl.logprob_gap_warn={cfg.rl.logprob_gap_warn}: the sampler and the "
                    "trainer disagree about the policy)" if gap > cfg.rl.logprob_gap_warn else ""))


def _update_line(it: int, m: dict) -> str:
    """The update's speed and memory, per rank when it ran on several."""
    n = int(m.get("train/processes", 1))
    per = (lambda k: "/".join(f"{m.get(f'train/rank{r}/{k}', math.nan):.1f}" for r in range(n))
           ) if n > 1 else (lambda k: f"{m[f'train/{k}']:.1f}")
    where = (f" on {int(m['train/group_workers'])} Dask worker(s), "
             f"{int(m['train/group_hosts'])} host(s)") if m.get("train/group_workers") else ""
    return (f"iteration {it} update: {n} rank(s){where}, {m['train/tokens_per_s']:.0f} "
            f"tokens/s; per "
            f"rank MB: peak {per('peak_mem_mb')}, optimizer state {per('optimizer_mb')}, "
            f"weights {per('params_mb')}")
