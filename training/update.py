"""Run RL updates from a spec file in every process of a launch, so the same `grpo_update` runs
alone or data-parallel:

    python -m training.update --spec spec.json                                   # one process
    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 --module training.update --spec spec.json  # two

spec.json: {"jobs": [{"run_dir", "version", "samples": "<file.jsonl>", "policy": {...},
"rl": {...}, "temperature", "seed", "replay": [[prompt, reference], ...] (optional, for
rl.replay_coef)}]}; each line of the samples file is an RLSample as JSON.
Rank 0 prints one JSON line of metrics per job.
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict


def write_samples(path: str, samples) -> None:
    with open(path, "w") as f:
        for s in samples:
            f.write(json.dumps(asdict(s)) + "\n")


def read_samples(path: str):
    from training.trainer import RLSample

    with open(path) as f:
        return [RLSample(**json.loads(line)) for line in f if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.update")
    parser.add_argument("--spec", required=True, help="JSON file listing the updates to run")
    parser.add_argument("--local_rank", type=int, default=None, help="set by the deepspeed launcher")
    args = parser.parse_args(argv)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from training.env import apply_defaults

    apply_defaults()
    from training import engine
    from training.config import PolicyConfig, RLConfig
    from training.trainer import grpo_update

    engine.setup_distributed()
    with open(args.spec) as f:
        spec = json.load(f)
    for job in spec["jobs"]:
        metrics = grpo_update(job["run_dir"], int(job["version"]), read_samples(job["samples"]),
                              PolicyConfig(**job.get("policy", {})), RLConfig(**job.get("rl", {})),
                              float(job.get("temperature", 1.0)), int(job.get("seed", 0)),
                              [tuple(pr) for pr in job.get("replay", [])])
        if engine.rank() == 0:
            print(json.dumps({"run_dir": job["run_dir"], **metrics}), flush=True)
    engine.teardown_distributed()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
