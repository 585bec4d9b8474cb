"""The policy: a Hugging Face causal LM (a tiny byte-level GPT-2 by default), saved and loaded
as a plain Hugging Face model directory."""
from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedModel

from training.config import PolicyConfig
from training.tokenizer import ByteTokenizer


def build_policy(cfg: PolicyConfig) -> PreTrainedModel:
    if cfg.n_embd % cfg.n_head:
        raise ValueError(f"policy.n_embd={cfg.n_embd} must be divisible by policy.n_head={cfg.n_head}")
    tok = ByteTokenizer()
    torch.manual_seed(cfg.seed)
    config = GPT2Config(
        vocab_size=tok.vocab_size, n_positions=cfg.max_len, n_embd=cfg.n_embd, n_layer=cfg.n_layer,
        n_head=cfg.n_head, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(config)


def load_policy(path: str) -> PreTrainedModel:
    return GPT2LMHeadModel.from_pretrained(path, local_files_only=True)


def save_policy(model: PreTrainedModel, path: str) -> None:
    model.save_pretrained(path, safe_serialization=True)
