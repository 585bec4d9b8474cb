"""The policy: a Hugging Face causal LM (a tiny byte-level GPT-2 by default, or any local model
directory or GGUF file named by `policy.model_path`), saved and loaded as a plain Hugging Face
model directory with its tokenizer. The tokenizer rides on the model as `rollforge_tokenizer`,
so whoever holds the model (the sampler, the trainer) encodes the same way."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, PreTrainedModel

from training.config import PolicyConfig
from training.tokenizer import ByteTokenizer, load_tokenizer, save_tokenizer

TOKENIZER_ATTR = "rollforge_tokenizer"


def tokenizer_of(model):
    """The tokenizer attached to a policy (the byte tokenizer for models built elsewhere)."""
    module = getattr(model, "module", model)  # a DeepSpeed engine wraps the model
    return getattr(module, TOKENIZER_ATTR, None) or ByteTokenizer()


def _split_gguf(path: str) -> tuple[str, str | None]:
    p = Path(path)
    if p.suffix == ".gguf":
        return str(p.parent), p.name
    return str(p), None


def build_policy(cfg: PolicyConfig) -> PreTrainedModel:
    """A fresh byte-level GPT-2 from the config, or the local model at `cfg.model_path`."""
    if cfg.model_path:
        model = load_pretrained(cfg.model_path, cfg.chat_template)
        if cfg.lora_rank:
            from training.lora import apply_lora  # noqa: PLC0415

            model = apply_lora(model, cfg)
        return model
    if cfg.lora_rank:
        raise ValueError(f"policy.lora_rank={cfg.lora_rank} adapts a pretrained model; the tiny "
                         "default (policy.model_path unset) is trained whole")
    if cfg.n_embd % cfg.n_head:
        raise ValueError(f"policy.n_embd={cfg.n_embd} must be divisible by policy.n_head={cfg.n_head}")
    tok = ByteTokenizer()
    torch.manual_seed(cfg.seed)
    config = GPT2Config(
        vocab_size=tok.vocab_size, n_positions=cfg.max_len, n_embd=cfg.n_embd, n_layer=cfg.n_layer,
        n_head=cfg.n_head, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )
    model = GPT2LMHeadModel(config)
    setattr(model, TOKENIZER_ATTR, tok)
    return model


def load_pretrained(model_path: str, chat_template: bool = True) -> PreTrainedModel:
    """Any local causal LM: a Hugging Face directory, or a .gguf file (dequantised by
    transformers into a float model), or a known short name (training/pretrained.py: its
    converted Hugging Face folder, converted on first use). Nothing is downloaded."""
    from training.pretrained import KNOWN, resolve  # noqa: PLC0415

    model_path = resolve(model_path)
    if not Path(model_path).exists():
        raise FileNotFoundError(f"policy.model_path={model_path!r} does not exist (expected a local "
                                "Hugging Face model directory, a .gguf file, or a known model: "
                                f"{', '.join(sorted(KNOWN))})")
    folder, gguf = _split_gguf(model_path)
    kwargs = {"gguf_file": gguf} if gguf else {}
    if gguf:
        config = AutoConfig.from_pretrained(folder, local_files_only=True, **kwargs)
        # transformers maps a GPT-2 GGUF's context_length to `n_ctx`, but GPT2Config sizes the
        # position table by `n_positions` (default 1024): keep the file's.
        if getattr(config, "model_type", "") == "gpt2" and getattr(config, "n_ctx", None):
            config.n_positions = config.n_ctx
        kwargs["config"] = config
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, **kwargs)
    tok = load_tokenizer(folder, gguf_file=gguf, chat_template=chat_template)
    if tok.kind == "byte" and model.config.vocab_size < ByteTokenizer.vocab_size:
        raise ValueError(f"policy.model_path={model_path!r} has no tokenizer files and a vocabulary "
                         f"of {model.config.vocab_size} < 259 (the byte tokenizer's)")
    setattr(model, TOKENIZER_ATTR, tok)
    return model


def load_policy(path: str) -> PreTrainedModel:
    """A policy saved by `save_policy` (a checkpoint's `model/` folder; a LoRA adapter is
    loaded onto its base)."""
    from training.lora import is_adapter_dir, load_adapter_policy  # noqa: PLC0415

    if is_adapter_dir(path):
        return load_adapter_policy(path)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    setattr(model, TOKENIZER_ATTR, load_tokenizer(path))
    return model


def save_policy(model: PreTrainedModel, path: str, state_dict: dict | None = None) -> None:
    """A plain Hugging Face model directory plus the policy's tokenizer (a LoRA policy: the
    adapter alone, and which base it adapts)."""
    from training.lora import is_lora, save_base_record  # noqa: PLC0415

    model.save_pretrained(path, safe_serialization=True, state_dict=state_dict)
    save_tokenizer(tokenizer_of(model), path)
    if is_lora(model):
        save_base_record(model, path)
