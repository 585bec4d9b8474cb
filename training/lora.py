"""LoRA adapters (Hu et al. 2021, through peft) as a policy option, and what a policy needs to
train well on a small machine: gradient checkpointing, and the KL reference read from the same
weights with the adapters switched off (no second copy of the model in memory).

A LoRA checkpoint's `model/` folder holds the adapter (adapter_config.json, adapter weights), the
tokenizer, and `rollforge_base.json` naming the base model as the config gave it (a short name
such as `smollm2-135m-instruct` or a path), so it reloads on another machine whose cache holds
the base elsewhere. `rollforge export` merges the adapter into a plain Hugging Face directory.
"""
from __future__ import annotations

import functools
import json
import warnings
from contextlib import nullcontext
from pathlib import Path

import torch

from training.pretrained import load_pretrained
from training.tokenizer import TOKENIZER_ATTR, load_tokenizer

BASE_FILE = "rollforge_base.json"
BASE_ATTR = "rollforge_base"  # the base model's `policy.model_path`, carried on the policy
ADAPTERS_OFF = "adapters-off"  # the KL reference: the policy itself, adapters disabled


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path) / "adapter_config.json").is_file()


def is_lora(model) -> bool:
    from peft import PeftModel  # noqa: PLC0415

    return isinstance(getattr(model, "module", model), PeftModel)


def apply_lora(model, cfg):
    """`model` with fresh LoRA adapters (B = 0, so the policy starts equal to its base) on
    `cfg.lora_targets`; only the adapters train."""
    from peft import LoraConfig, get_peft_model  # noqa: PLC0415


    targets = cfg.lora_targets
    lcfg = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules="all-linear" if targets == ["all-linear"] else list(targets),
                      bias="none", task_type="CAUSAL_LM")
    tok = getattr(model, TOKENIZER_ATTR)
    peft_model = get_peft_model(model, lcfg)
    setattr(peft_model, TOKENIZER_ATTR, tok)
    setattr(peft_model, BASE_ATTR, cfg.model_path)
    return peft_model


def save_base_record(model, path: str) -> None:
    """Next to a saved adapter: which base it adapts (as the config named it)."""
    (Path(path) / BASE_FILE).write_text(json.dumps({"model_path": getattr(model, BASE_ATTR, None)}))


def base_path(path: str) -> str | None:
    """The base model a saved adapter adapts, as its `rollforge_base.json` names it (None when
    the folder holds no such record)."""
    record = Path(path) / BASE_FILE
    return json.loads(record.read_text()).get("model_path") if record.is_file() else None


def load_adapter_policy(path: str):
    """A LoRA checkpoint's `model/`: its base (resolved from `rollforge_base.json`) with the
    saved adapter, trainable."""
    from peft import PeftModel  # noqa: PLC0415


    base = base_path(path)
    if not base:
        raise FileNotFoundError(f"{path} holds a LoRA adapter but no {BASE_FILE} naming its base "
                                "model")
    tok = load_tokenizer(path)
    model = PeftModel.from_pretrained(
        load_pretrained(base, tok.use_chat_template if tok.kind == "hf" else True), path,
        is_trainable=True)
    setattr(model, TOKENIZER_ATTR, tok)
    setattr(model, BASE_ATTR, base)
    return model


def merged(model):
    """A plain Hugging Face model with the adapter folded into its weights (W + B A * alpha/r)."""

    tok = getattr(model, TOKENIZER_ATTR, None)
    plain = model.merge_and_unload()
    if tok is not None:
        setattr(plain, TOKENIZER_ATTR, tok)
    return plain


def prepare_for_training(model, cfg):
    """Gradient checkpointing when asked: activations of each block are recomputed in the
    backward pass instead of kept, trading about a third more compute for memory that grows
    with the layers' count no more. Non-reentrant, so frozen inputs (LoRA) still get grads."""
    if cfg.gradient_checkpointing:
        base = model.get_base_model() if is_lora(model) else model
        kwargs = {"use_reentrant": False}
        if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5.2's name
            base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        base.config.use_cache = False
    return model


def reference_view(engine, reference):
    """A context under which `reference` (the module, or the engine for ADAPTERS_OFF) computes
    the KL reference's log-probs."""
    if reference is ADAPTERS_OFF or reference == ADAPTERS_OFF:
        return engine.module.disable_adapter()
    return nullcontext()


@functools.cache
def bf16_native(kind: str) -> bool:
    """Whether devices of `kind` ("cpu", "cuda") compute in bfloat16 with their own units: a CPU
    with AVX512 or AMX (oneDNN's bf16 kernels), a CUDA device of compute capability 8 or more.
    Elsewhere torch emulates it: a bf16 matmul measured 49x slower than fp32 on an AVX2-only
    CPU (3.30 s against 67 ms), so autocast there is all cost."""
    if kind == "cpu":
        check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
        return True if check is None else bool(check())
    if kind == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return True


def autocast_applies(dtype: str, device) -> bool:
    """Whether `rl.autocast: dtype` autocasts on `device`: bf16 only where the device has it
    natively (`bf16_native`); elsewhere the forward stays fp32, warned once."""
    if dtype == "none":
        return False
    kind = torch.device(device).type
    if bf16_native(kind):
        return True
    _warn_emulated(kind)
    return False


@functools.cache
def _warn_emulated(kind: str) -> None:
    warnings.warn(f"rl.autocast=bf16 is not applied: this {kind} has no native bfloat16 (an "
                  "AVX2-only CPU, or a GPU before compute capability 8), where torch's emulation "
                  "is tens of times slower than fp32; the forward passes run in fp32 "
                  "(train/autocast_bf16 = 0)", RuntimeWarning, stacklevel=3)


def autocast(dtype: str, device) -> object:
    """bf16 autocast of the forward (weights and optimizer stay fp32): `rl.autocast`, where it
    applies (`autocast_applies`)."""
    if not autocast_applies(dtype, device):
        return nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
