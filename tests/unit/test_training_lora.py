"""LoRA adapters on a pretrained policy (a tiny Llama built offline): trained through the
DeepSpeed engine, the KL reference read with the adapters off, checkpoints holding the adapter
alone, and `rollforge export` merging it into a plain Hugging Face directory."""
import json

import numpy as np
import pytest
import torch
from test_training_hf_models import llama_dir  # noqa: F401  (the fixture)

from flows.cli import main
from training import checkpoints
from training.config import PolicyConfig, RLConfig, SFTConfig
from training.generate import sample
from training.lora import ADAPTERS_OFF, is_lora
from training.policy import build_policy
from training.trainer import (RLSample, grpo_update, kl_reference, policy_for_sampling,
                              sft_warm_start)


def _lora_run(llama_dir, tmp_path, **policy_kw):  # noqa: F811
    policy = PolicyConfig(model_path=llama_dir, max_len=96, lora_rank=4, **policy_kw)
    run = str(tmp_path / "run")
    sft_warm_start(run, ["def add(a, b):"] * 2, ["    return a + b"] * 2, policy,
                   SFTConfig(steps=0, batch_size=2), RLConfig(micro_batch_size=4), 0)
    return policy, run


def test_lora_starts_equal_to_its_base_and_trains_only_the_adapters(llama_dir):  # noqa: F811
    base = build_policy(PolicyConfig(model_path=llama_dir))
    lora = build_policy(PolicyConfig(model_path=llama_dir, lora_rank=4))
    assert is_lora(lora) and lora.rollforge_tokenizer.kind == "hf"
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    ids = torch.tensor([lora.rollforge_tokenizer.encode_prompt("def f(x):")])
    with torch.no_grad():  # B = 0 at initialisation: the adapted policy is its base
        assert torch.allclose(base(input_ids=ids).logits, lora(input_ids=ids).logits)


def test_the_tiny_default_refuses_lora_with_a_message_naming_the_field():
    with pytest.raises(ValueError, match="policy.lora_rank"):
        build_policy(PolicyConfig(lora_rank=4))


def test_a_lora_update_moves_the_adapter_keeps_the_kl_reference_as_the_base_and_exports_merged(
        llama_dir, tmp_path):  # noqa: F811
    policy, run = _lora_run(llama_dir, tmp_path, gradient_checkpointing=True)
    v0 = checkpoints.checkpoint_dir(run, 0)
    assert (v0 / "model" / "adapter_config.json").is_file()
    assert not (v0 / "model" / "model.safetensors").exists()  # the adapter, not the base
    rl = RLConfig(micro_batch_size=4, kl_coef=0.1, lr=5e-2, epochs=1)
    assert kl_reference(run, rl, "cpu", policy) == ADAPTERS_OFF  # no second copy is loaded
    model = policy_for_sampling(run, 0)
    out = sample(model, ["def add(a, b):", "x = "], 8, generator=torch.Generator().manual_seed(0))
    samples = [RLSample(s.prompt_ids, s.completion_ids, s.logprobs, a)
               for s, a in zip(out, [1.0, -1.0])]
    metrics = grpo_update(run, 0, samples, policy, rl, 1.0, 0)
    assert metrics["train/sequences"] == 2 and np.isfinite(metrics["train/loss"])
    assert metrics["train/kl"] == pytest.approx(0.0, abs=1e-6)  # one step: policy == base
    v1 = checkpoints.checkpoint_dir(run, 1)
    engine_bytes = sum(f.stat().st_size for f in (v1 / "engine").rglob("*") if f.is_file())
    base_bytes = sum(p.numel() * 4 for p in build_policy(PolicyConfig(model_path=llama_dir)).parameters())
    assert engine_bytes < base_bytes  # frozen base weights are not in the engine state
    trained = policy_for_sampling(run, 1)
    assert is_lora(trained)
    ids = torch.tensor([out[0].prompt_ids + out[0].completion_ids])
    with torch.no_grad():
        want = trained(input_ids=ids).logits
        with trained.disable_adapter():
            base_logits = trained(input_ids=ids).logits
    assert not torch.allclose(want, base_logits)  # the adapter moved

    dest = tmp_path / "exported"
    assert main(["export", run, "--out", str(dest), "--version", "1"]) == 0
    from transformers import AutoModelForCausalLM, AutoTokenizer

    plain = AutoModelForCausalLM.from_pretrained(str(dest))
    assert not (dest / "adapter_config.json").exists()
    assert AutoTokenizer.from_pretrained(str(dest)).chat_template
    with torch.no_grad():
        assert torch.allclose(plain(input_ids=ids).logits, want, atol=1e-4)
    assert json.loads((dest / "rollforge_export.json").read_text())["version"] == 1


def test_export_from_engine_of_a_lora_checkpoint_exits_2_naming_the_adapter(
        llama_dir, tmp_path, capsys):  # noqa: F811
    _, run = _lora_run(llama_dir, tmp_path)
    assert main(["export", run, "--out", str(tmp_path / "x"), "--from-engine"]) == 2
    assert "LoRA adapter" in capsys.readouterr().err


def test_lora_and_autocast_at_their_defaults_keep_the_config_hash():
    from flows.config import load_config

    base = load_config(None)
    assert base.hash() == "359e281f5047"  # the pin in test_config.py
    assert load_config(None, ["rl.autocast=none", "policy.lora_rank=0"]).hash() == base.hash()
    assert load_config(None, ["rl.autocast=bf16"]).hash() != base.hash()


@pytest.mark.parametrize("native", [True, False])
def test_bf16_autocast_applies_only_where_the_device_has_bf16(monkeypatch, native):
    """rl.autocast=bf16 on a device that emulates bf16 (an AVX2-only CPU: a matmul 49x slower
    than fp32) leaves the forward in fp32 and says so once; where it is native it autocasts."""
    from training import lora

    monkeypatch.setattr(lora, "bf16_native", lambda kind: native)
    lora._warn_emulated.cache_clear()
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    cpu = torch.device("cpu")
    if native:
        with lora.autocast("bf16", cpu):
            assert (a @ b).dtype == torch.bfloat16
    else:
        with pytest.warns(RuntimeWarning, match="rl.autocast=bf16 is not applied: this cpu"):
            with lora.autocast("bf16", cpu):
                assert (a @ b).dtype == torch.float32
    assert lora.autocast_applies("bf16", cpu) is native
    assert lora.autocast_applies("none", cpu) is False
    with lora.autocast("none", cpu):
        assert (a @ b).dtype == torch.float32
