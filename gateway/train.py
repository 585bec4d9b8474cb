"""An update of the run's policy on the episodes outside clients played through the gateway
(gateway/play.py): the rows of one policy version, with the rewards the kinds' graders gave,
their advantages computed per task (the GRPO group), trained by the loop's own update
(training/trainer.py `grpo_update`): it reads version N and publishes N + 1.

Rows that could not be scored (NaN reward) train with advantage 0, as in the loop. A task
played once is a group of one, so its advantage is 0: the update learns from tasks played
several times with different outcomes (`task_id` in the open request lets a client play one
task again).
"""
from __future__ import annotations

import math

from flows.config import RunConfig
from gateway.play import store_dir


def gateway_samples(cfg: RunConfig, version: int) -> list:
    """The RLSamples of the gateway's graded rows sampled by `version` (ValueError when there
    are none)."""
    import numpy as np  # noqa: PLC0415

    from rewards.advantages import advantages_for  # noqa: PLC0415
    from storage import trajectories  # noqa: PLC0415
    from training.batch import RLSample  # noqa: PLC0415

    where = store_dir(cfg)
    if version not in trajectories.iterations_written(where):
        raise ValueError(f"no gateway episodes of policy version {version} in {where}")
    df = trajectories.read_trajectories(where, version)
    rewards = df["reward"].astype(float).to_numpy()
    adv = advantages_for(cfg.rl.algorithm, cfg.rl.scale_advantages, rewards,
                         df["group_id"].astype(str).to_numpy())
    out = []
    for (_, r), a in zip(df.iterrows(), adv):
        mask = r["completion_mask"]
        out.append(RLSample(
            [int(t) for t in r["prompt_token_ids"]], [int(t) for t in r["completion_token_ids"]],
            [float(x) for x in r["sampling_logprobs"]], 0.0 if math.isnan(a) else float(a),
            reward=float(r["reward"]), group_id=r["group_id"],
            completion_mask=None if mask is None else [int(m) for m in np.asarray(mask)],
            version=int(r["policy_version"]), engine_sampled=cfg.sampling.engine != "local"))
    return out


def train_on_gateway(cfg: RunConfig, version: int) -> dict:
    """One update of the run's policy from `version` on its gateway rows; publishes
    `version + 1` in the run's checkpoints and returns the update's metrics."""
    from training.trainer import grpo_update  # noqa: PLC0415

    samples = gateway_samples(cfg, version)
    metrics = grpo_update(cfg.run_dir, version, samples, cfg.policy, cfg.rl,
                          cfg.sampling.temperature, cfg.seed)
    return {**metrics, "gateway/samples": len(samples),
            "gateway/informative": sum(s.advantage != 0.0 for s in samples)}
