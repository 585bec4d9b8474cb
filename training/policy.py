"""The policy: a Hugging Face causal LM (a tiny byte-level GPT-2 by default, or any local model
directory or GGUF file named by `policy.model_path`), saved and loaded as a plain Hugging Face
model directory with its tokenizer. The tokenizer rides on the model as `rollforge_tokenizer`,
so whoever holds the model (the sampler, the trainer) encodes the same way."""
from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, PreTrainedModel

from training.config import PolicyConfig
from training.lora import apply_lora, is_adapter_dir, is_lora, load_adapter_policy, save_base_record
from training.pretrained import load_pretrained
from training.tokenizer import (TOKENIZER_ATTR, ByteTokenizer, load_tokenizer, save_tokenizer,
                                tokenizer_of)

# load_pretrained, TOKENIZER_ATTR and tokenizer_of are the policy's too; they live below
# training/lora.py, which loads an adapter's base with them.
__all__ = ["TOKENIZER_ATTR", "build_policy", "load_policy", "load_pretrained", "save_policy",
           "tokenizer_of"]


def build_policy(cfg: PolicyConfig) -> PreTrainedModel:
    """A fresh byte-level GPT-2 from the config, or the local model at `cfg.model_path`."""
    if cfg.model_path:
        model = load_pretrained(cfg.model_path, cfg.chat_template)
        if cfg.lora_rank:
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


def load_policy(path: str) -> PreTrainedModel:
    """A policy saved by `save_policy` (a checkpoint's `model/` folder; a LoRA adapter is
    loaded onto its base)."""
    if is_adapter_dir(path):
        return load_adapter_policy(path)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    setattr(model, TOKENIZER_ATTR, load_tokenizer(path))
    return model


def save_policy(model: PreTrainedModel, path: str, state_dict: dict | None = None) -> None:
    """A plain Hugging Face model directory plus the policy's tokenizer (a LoRA policy: the
    adapter alone, and which base it adapts)."""
    model.save_pretrained(path, safe_serialization=True, state_dict=state_dict)
    save_tokenizer(tokenizer_of(model), path)
    if is_lora(model):
        save_base_record(model, path)
