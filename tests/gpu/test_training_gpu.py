"""On a CUDA GPU: one bf16 ZeRO-2 policy update of the default-sized model through DeepSpeed
(NCCL), and its tokens/s. Skips without a GPU."""
import random

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_one_bf16_zero2_update_on_the_gpu_moves_the_weights(tmp_path, capsys):
    from training import checkpoints
    from training.config import PolicyConfig, RLConfig, SFTConfig
    from training.policy import load_policy
    from training.trainer import RLSample, grpo_update, sft_warm_start

    policy = PolicyConfig(n_layer=3, n_embd=96, n_head=4, max_len=320)  # configs/default.yaml
    rl = RLConfig(zero_stage=2, dtype="bf16", micro_batch_size=32, lr_schedule="constant")
    run = str(tmp_path / "run")
    sft_warm_start(run, ["def f(x):\n"] * 4, ["    return x\n"] * 4, policy,
                   SFTConfig(steps=1, batch_size=8), rl, 0)
    r = random.Random(0)
    samples = [RLSample([257] + [r.randrange(32, 127) for _ in range(120)],
                        [r.randrange(32, 127) for _ in range(40)], [-4.0] * 40,
                        r.choice([-1.0, 1.0])) for _ in range(256)]
    out = grpo_update(run, 0, samples, policy, rl, 1.0, 0)
    w0 = load_policy(str(checkpoints.checkpoint_dir(run, 0) / "model")).state_dict()
    w1 = load_policy(str(checkpoints.checkpoint_dir(run, 1) / "model")).state_dict()
    assert next(iter(w1.values())).dtype == torch.bfloat16
    assert max((w1[k].float() - w0[k].float()).abs().max().item() for k in w1) > 0
    with capsys.disabled():
        print(f"\nGPU bf16 ZeRO-2 update: {out['train/tokens_per_s']:.0f} tokens/s "
              f"({out['train/tokens']} tokens, {out['train/seconds']:.2f}s, {torch.cuda.get_device_name()})")


def test_the_samplers_own_cache_and_shared_prefill_on_the_gpu_sample_what_the_models_cache_does(
        monkeypatch):
    """training/generate.py on CUDA: repeated prompts prefilled once into the sampler's own
    cache (its index moved to the GPU) draw the greedy tokens of the model's own cache with
    every row prefilled."""
    from training import generate
    from training.config import PolicyConfig
    from training.policy import build_policy

    m = build_policy(PolicyConfig(n_layer=2, n_embd=64, n_head=4, max_len=128, seed=1)).eval().cuda()
    tok = m.rollforge_tokenizer
    ids = [tok.encode_prompt(p) for p in ("def f(x):\n", "x = ") for _ in range(4)]

    def run():
        with torch.no_grad():
            return [s.completion_ids for s in generate.sample_batch(
                m, ids, 16, 1.0, 1.0, True, None, True, tok)]

    ours = run()
    monkeypatch.setattr(generate, "filled_cache", lambda model, capacity: None)
    assert ours == run()
