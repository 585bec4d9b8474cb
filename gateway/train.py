"""Training on the episodes outside clients played through the gateway (gateway/play.py): the
rows of chosen policy versions, with the rewards the kinds' graders gave and their advantages
computed per task (the GRPO group), trained by the loop's own update (training/trainer.py
`grpo_update`). Two ways in:

- `train_on_gateway` (`rollforge gateway --train`): one update of version N on the rows N
  sampled; it publishes N + 1.
- `loop_rows` (`rl.gateway_rows`): the loop's iteration takes the gateway's rows of the version
  it samples with (and up to `rl.gateway_max_lag` versions before, off-policy, as the update's
  truncated importance weights allow) that no earlier iteration took, beside its own rows.
  Which episodes it takes is recorded before its update (storage/registry.py
  `record_gateway_take`), so a retried or resumed iteration trains on the same rows and none is
  trained twice.

Rows that could not be scored (NaN reward) train with advantage 0, as in the loop. A task
played once is a group of one, so its advantage is 0: the update learns from tasks played
several times with different outcomes (`task_id` in the open request lets a client play one
task again).
"""
from __future__ import annotations

from collections.abc import Iterable

from flows.config import RunConfig
from gateway.play import store_dir
from storage.schema import TrajectoryRow


def graded_rows(cfg: RunConfig, versions: Iterable[int],
                episodes: set[str] | None = None) -> list[TrajectoryRow]:
    """The gateway's stored rows sampled by any of `versions` (of `episodes` only, where
    given), each with its advantage among the rows returned: a group (a task) is compared over
    every version taken. Turn credit is the loop's own (its episodes' test runs): a gateway row
    has none (gateway/rows.py), so every policy token takes the row's advantage."""
    import numpy as np  # noqa: PLC0415

    from rewards.advantages import advantages_for  # noqa: PLC0415
    from storage import trajectories  # noqa: PLC0415

    where = store_dir(cfg)
    written = set(trajectories.iterations_written(where))
    rows: list[TrajectoryRow] = []
    for v in sorted(set(versions) & written):
        rows += [r for r in trajectories.read_rows(where, v)
                 if episodes is None or r.episode_id in episodes]
    if not rows:
        return []
    adv = advantages_for(cfg.rl.algorithm, cfg.rl.scale_advantages,
                         np.array([r.reward for r in rows], dtype=np.float64),
                         np.array([r.group_id for r in rows]))
    return [r.replace(advantage=float(a)) for r, a in zip(rows, adv)]


def gateway_samples(cfg: RunConfig, version: int) -> list:
    """The RLSamples of the gateway's graded rows sampled by `version` (ValueError when there
    are none)."""
    from flows.pipeline import rl_samples  # noqa: PLC0415

    rows = graded_rows(cfg, [version])
    if not rows:
        raise ValueError(f"no gateway episodes of policy version {version} in {store_dir(cfg)}")
    return rl_samples(cfg, rows)


def train_on_gateway(cfg: RunConfig, version: int) -> dict:
    """One update of the run's policy from `version` on its gateway rows; publishes
    `version + 1` in the run's checkpoints and returns the update's metrics."""
    from training.trainer import grpo_update  # noqa: PLC0415

    samples = gateway_samples(cfg, version)
    metrics = grpo_update(cfg.run_dir, version, samples, cfg.policy, cfg.rl,
                          cfg.sampling.temperature, cfg.seed)
    return {**metrics, "gateway/samples": len(samples),
            "gateway/informative": sum(s.advantage != 0.0 for s in samples)}


def loop_rows(cfg: RunConfig, iteration: int, version: int) -> list[TrajectoryRow]:
    """The gateway rows the loop's iteration `iteration`, sampling with `version`, trains on
    (module docstring): its recorded take, or, at its first call, the episodes of versions
    `version - rl.gateway_max_lag` .. `version` in the store now that no earlier iteration
    took, recorded before they are returned."""
    from storage import registry, trajectories  # noqa: PLC0415

    takes = registry.gateway_takes(cfg.run_dir)
    if iteration not in takes:
        versions = list(range(max(0, version - cfg.rl.gateway_max_lag), version + 1))
        taken = {e for it, t in takes.items() if it < iteration for e in t["episodes"]}
        where = store_dir(cfg)
        written = set(trajectories.iterations_written(where))
        found = {e for v in versions if v in written
                 for e in trajectories.read_trajectories(where, v)["episode_id"]}
        registry.record_gateway_take(cfg.run_dir, iteration, versions, sorted(found - taken))
        takes = registry.gateway_takes(cfg.run_dir)
    take = takes[iteration]
    return graded_rows(cfg, take["versions"], set(take["episodes"])) if take["episodes"] else []
