"""On CUDA GPUs: one bf16 ZeRO-2 update of the default-sized model on the resident trainer group
(NCCL, one GPU a rank): 2 ranks where the machine has 2 GPUs, else 1. Skips without a GPU."""
import random
import shutil
from dataclasses import asdict

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_bf16_zero2_update_on_the_trainer_group_moves_the_weights(tmp_path, capsys):
    from training import checkpoints
    from training.config import PolicyConfig, RLConfig, SFTConfig
    from training.group import TrainerGroup, combine
    from training.policy import load_policy
    from training.trainer import RLSample, sft_warm_start

    world = 2 if torch.cuda.device_count() >= 2 else 1
    policy = PolicyConfig(n_layer=3, n_embd=96, n_head=4, max_len=320)  # configs/default.yaml
    rl = RLConfig(zero_stage=2, dtype="bf16", micro_batch_size=32, lr_schedule="constant",
                  processes=world)
    run = tmp_path / "run"
    sft_warm_start(str(run), ["def f(x):\n"] * 4, ["    return x\n"] * 4, policy,
                   SFTConfig(steps=1, batch_size=8), rl, 0)
    r = random.Random(0)
    samples = [RLSample([257] + [r.randrange(32, 127) for _ in range(120)],
                        [r.randrange(32, 127) for _ in range(40)], [-4.0] * 40,
                        r.choice([-1.0, 1.0])) for _ in range(256)]
    group = TrainerGroup(world)
    try:
        assert [x["backend"] for x in group.ready] == ["nccl"] * world
        jobs = []
        for k in range(2):  # the second update runs on the same, resident ranks
            copy = tmp_path / f"run{k}"
            shutil.copytree(run, copy)
            jobs.append((copy, combine(group.run({
                "run_dir": str(copy), "version": 0, "samples": [asdict(s) for s in samples],
                "policy": policy.model_dump(), "rl": rl.model_dump(), "temperature": 1.0,
                "seed": 0, "replay": []}))))
        assert group.jobs == 2 and group.alive()
    finally:
        group.close()
    copy, out = jobs[-1]
    assert out["train/processes"] == world
    assert out["train/peak_mem_mb"] > 0 and out["train/optimizer_mb"] > 0
    w0 = load_policy(str(checkpoints.checkpoint_dir(str(run), 0) / "model")).state_dict()
    w1 = load_policy(str(checkpoints.checkpoint_dir(str(copy), 1) / "model")).state_dict()
    assert next(iter(w1.values())).dtype == torch.bfloat16
    assert max((w1[k].float() - w0[k].float()).abs().max().item() for k in w1) > 0
    with capsys.disabled():
        print(f"\nGPU bf16 ZeRO-2 update on {world} rank(s): {out['train/tokens_per_s']:.0f} "
              f"tokens/s, peak {out['train/peak_mem_mb']:.0f} MB a rank, optimizer state "
              f"{out['train/optimizer_mb']:.1f} MB a rank ({torch.cuda.get_device_name()})")
