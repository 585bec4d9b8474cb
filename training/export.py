"""A checkpoint version as a plain Hugging Face model directory: `config.json`, safetensors
weights, a tokenizer `AutoTokenizer` loads (the byte tokenizer becomes an equivalent
`PreTrainedTokenizerFast`), and `rollforge_export.json` saying where it came from. A LoRA
checkpoint is exported with its adapter merged into the base model's weights."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import torch

from training import checkpoints


def resolve_version(run_dir: str, version: str | int) -> int:
    """`latest`, `best:<metric>` (highest recorded score; `best-min:<metric>` for lowest) or N."""
    found = checkpoints.versions(run_dir)
    if not found:
        raise FileNotFoundError(f"{run_dir} has no published checkpoint (expected "
                                f"{run_dir}/checkpoints/vNNNN/meta.json)")
    v = str(version)
    if v == "latest":
        return found[-1]
    if v.startswith(("best:", "best-min:")):
        mode, metric = ("min" if v.startswith("best-min:") else "max"), v.split(":", 1)[1]
        best = checkpoints.best_version(run_dir, metric, mode)
        if best is None:
            raise LookupError(f"no version of {run_dir} has a recorded score {metric!r}")
        return best
    if not v.isdigit() or int(v) not in found:
        raise LookupError(f"version {version!r}: expected latest, best:<metric> or one of {found}")
    return int(v)


def _engine_weights(engine_dir: Path) -> dict[str, torch.Tensor]:
    """fp32 weights from the DeepSpeed state: ZeRO shards consolidated (zero_to_fp32), or the
    module state of a ZeRO-0 checkpoint (upcast from bf16 where trained in bf16)."""
    tag_dir = engine_dir / "state"
    if list(tag_dir.glob("*zero_pp_rank_*optim_states.pt")):
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        return get_fp32_state_dict_from_zero_checkpoint(str(engine_dir), tag="state")
    states = torch.load(tag_dir / "mp_rank_00_model_states.pt", map_location="cpu",
                        weights_only=False)
    return {k: v.float() for k, v in states["module"].items()}


def export_checkpoint(run_dir: str, version: str | int, out_dir: str, from_engine: bool = False,
                      dtype: str | None = None, overwrite: bool = False) -> Path:
    """Write version `version` of `run_dir` to `out_dir` (replaced atomically when `overwrite`)."""
    from transformers import AutoModelForCausalLM

    from training.lora import is_lora, merged
    from training.policy import load_policy
    from training.tokenizer import byte_tokenizer_hf

    v = resolve_version(run_dir, version)
    src = checkpoints.checkpoint_dir(run_dir, v)
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty (pass overwrite to replace it)")
    model = load_policy(str(src / "model"))
    tok = model.rollforge_tokenizer
    lora = is_lora(model)
    if lora:  # the checkpoint holds an adapter: fold it into the base's weights
        if from_engine:
            raise ValueError(f"version {v} of {run_dir} is a LoRA adapter: its model/ folder "
                             "holds the trained adapter already; export it without --from-engine")
        model = merged(model)
    if from_engine:
        weights = _engine_weights(src / "engine")
        fresh = AutoModelForCausalLM.from_config(model.config, dtype=torch.float32)
        missing, unexpected = fresh.load_state_dict(weights, strict=False)
        tied = set(getattr(fresh, "_tied_weights_keys", None) or [])
        if unexpected or [k for k in missing if k not in tied and "lm_head" not in k]:
            raise ValueError(f"engine state of {src} does not fit its model: missing {missing}, "
                             f"unexpected {unexpected}")
        fresh.tie_weights()
        model = fresh
    if dtype is not None:
        model = model.to({"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype])
    tmp = out.with_name(f".{out.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.mkdir(parents=True)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(str(tmp), safe_serialization=True)
    (byte_tokenizer_hf() if tok.kind == "byte" else tok.tok).save_pretrained(str(tmp))
    meta = checkpoints.read_meta(src)
    (tmp / "rollforge_export.json").write_text(json.dumps({
        "run_dir": str(Path(run_dir).resolve()), "version": v, "kind": meta.get("kind"),
        "weights": ("engine (fp32 master, consolidated)" if from_engine
                    else "model/ (LoRA adapter merged into its base)" if lora else "model/"),
        "dtype": str(next(model.parameters()).dtype).replace("torch.", "")}, indent=2))
    return checkpoints.swap_in(tmp, out)
