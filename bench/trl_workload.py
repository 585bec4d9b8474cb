"""The workload of bench/bench_trl.py, built once into a work folder and shared by both sides:

- `tasks.jsonl`: 64 training tasks of the `affine` family ("Return x times a plus b.", levels
  1 and 2) exported by `rollforge tasks export`, as a rollforge task file;
- `init/`: a tiny Llama (hidden 128, 4 layers, 4 heads, MLP 512: 1.1M parameters) over the byte
  tokenizer (ids 0..255 bytes, 256 PAD, 257 BOS, 258 EOS) as a Hugging Face checkpoint;
- `warm/`: the same after a brief supervised warm start on affine tasks of *other* seeds (none
  of the 64 prompts), so that sampled completions pass some tests and some groups carry signal.
  Both sides start from `warm/`.

The checkpoint holds both tokenizers' files with the same ids: the Hugging Face one (a fast
byte-level tokenizer whose post-processor puts BOS first, which is what TRL encodes a plain-text
prompt with) and `rollforge_tokenizer.json` naming the byte kind (which rollforge loads as its
`ByteTokenizer`: BOS + the prompt's bytes). So the prompt ids are the same on both sides.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

N_TASKS = 64
SHAPE = dict(hidden_size=128, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=4, max_position_embeddings=320)


def export_tasks(out: Path) -> Path:
    """The 64 prompts as a rollforge task file (the first 64 training tasks of the export)."""
    path = out / "tasks.jsonl"
    if path.is_file():
        return path
    full = out / "affine-all.jsonl"
    subprocess.run([sys.executable, "-m", "flows.cli", "tasks", "export", "--families", "affine",
                    "--difficulties", "1,2", "--per-family", "40", "--split", "train",
                    "--out", str(full)], cwd=ROOT, check=True, capture_output=True)
    lines = full.read_text().splitlines()
    if len(lines) < N_TASKS:
        raise RuntimeError(f"the export holds {len(lines)} tasks, fewer than {N_TASKS}")
    path.write_text("\n".join(lines[:N_TASKS]) + "\n")
    full.unlink()
    return path


def hf_byte_tokenizer():
    """rollforge's byte tokenizer as a transformers fast tokenizer (training/tokenizer.py) that
    also puts BOS before a plain-text input, as `ByteTokenizer.encode_prompt` does."""
    from tokenizers.processors import TemplateProcessing

    from training.tokenizer import ByteTokenizer, byte_tokenizer_hf

    tok = byte_tokenizer_hf()
    tok.backend_tokenizer.post_processor = TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", ByteTokenizer.bos_token_id)])
    ids = tok("ab")["input_ids"]
    if ids != [ByteTokenizer.bos_token_id, 97, 98]:
        raise RuntimeError(f"the HF byte tokenizer encodes 'ab' as {ids}, expected [257, 97, 98]")
    return tok


def save_checkpoint(model, out: Path) -> None:
    """A Hugging Face directory that TRL (AutoTokenizer) and rollforge (the byte kind) both load."""
    model.save_pretrained(str(out), safe_serialization=True)
    hf_byte_tokenizer().save_pretrained(str(out))
    (out / "rollforge_tokenizer.json").write_text(json.dumps({"kind": "byte"}))


def build_init(out: Path, seed: int = 0) -> Path:
    path = out / "init"
    if (path / "config.json").is_file():
        return path
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from training.tokenizer import ByteTokenizer as B

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=B.vocab_size, bos_token_id=B.bos_token_id,
                         eos_token_id=B.eos_token_id, pad_token_id=B.pad_token_id,
                         tie_word_embeddings=False, attention_dropout=0.0, **SHAPE)
    save_checkpoint(LlamaForCausalLM(config), path)
    return path


def warm_start_pairs(exclude_prompts: set[str], seeds: range = range(1, 9)) -> list[tuple[str, str]]:
    """(prompt, reference) of affine training tasks drawn with other seeds, none of the bench's
    prompts (another seed draws other constants and docstring examples)."""
    from envs.io.procedural import generate_suite

    pairs: dict[str, str] = {}
    for s in seeds:
        for t in generate_suite(["affine"], [1, 2], 40, 6, s, 0.2):
            if t.split == "train" and t.reference and t.prompt not in exclude_prompts:
                pairs[t.prompt] = t.reference
    return sorted(pairs.items())


def probe_reward(model, tasks: list[dict], samples: int = 4, seed: int = 0) -> float:
    """Mean reward of `samples` sampled completions per bench task (rollforge's sampler, the
    tests run by bench/trl_side.py's fresh-interpreter runner)."""
    import torch

    from bench.trl_side import run_tests
    from training.generate import sample
    from training.policy import TOKENIZER_ATTR
    from training.tokenizer import ByteTokenizer

    setattr(model, TOKENIZER_ATTR, ByteTokenizer())
    g = torch.Generator()
    g.manual_seed(seed)
    prompts = [t["prompt"] for t in tasks for _ in range(samples)]
    out = sample(model, prompts, 32, generator=g)
    model.train()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        rewards = list(pool.map(lambda i: run_tests(prompts[i] + out[i].text,
                                                    tasks[i // samples]["entry_point"],
                                                    tasks[i // samples]["tests"]),
                                range(len(prompts))))
    return sum(rewards) / len(rewards)


def warm_start(out: Path, init: Path, tasks: Path, steps: int, lr: float = 2e-3,
               batch_size: int = 32, seed: int = 0, probe_every: int = 0) -> dict:
    """Token NLL of the references after their prompts (BOS + prompt bytes, then reference bytes
    + EOS, the loss on the reference only), AdamW, linear warm-up over a tenth of the steps.
    With `probe_every`, the bench tasks' sampled reward is probed every so many steps and each
    probed state saved as `warm-<step>/` (to choose how long the warm start should be).

    Brief on purpose: 150 steps teach the format (`    return x * A + B`, an EOS) but not yet
    to copy the docstring's constants, so about 1% of sampled completions pass (the constants
    right by chance or by a partly learnt copy), enough for some groups to carry signal. The
    tiny model learns to copy only after well over a thousand steps (configs/default.yaml's warm
    start needs 1300-2000; up to 450 steps here at lr 3e-3 to 5e-3, batch 16 or 32, with or
    without the bench's own references in the data, stayed at 0.1-1.3%), which is more than a
    benchmark's set-up should cost."""
    path = out / "warm"
    info_file = path / "warm_start.json"
    if info_file.is_file():
        return json.loads(info_file.read_text())
    import torch
    from transformers import AutoModelForCausalLM

    from training.tokenizer import ByteTokenizer

    torch.manual_seed(seed)
    tok = ByteTokenizer()
    bench = [json.loads(line) for line in tasks.read_text().splitlines()]
    bench_prompts = {t["prompt"] for t in bench}
    pairs = warm_start_pairs(bench_prompts)
    data = [(tok.encode_prompt(p), tok.encode(r, bos=False) + [tok.eos_token_id]) for p, r in pairs]
    model = AutoModelForCausalLM.from_pretrained(str(init)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    warm = max(1, steps // 10)
    probes = []
    rng = random.Random(seed)
    t0, losses = time.perf_counter(), []
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / warm)
        batch = [data[rng.randrange(len(data))] for _ in range(batch_size)]
        width = max(len(p) + len(r) for p, r in batch)
        ids = torch.full((batch_size, width), tok.pad_token_id)
        labels = torch.full((batch_size, width), -100)
        mask = torch.zeros((batch_size, width), dtype=torch.long)
        for i, (p, r) in enumerate(batch):
            ids[i, :len(p) + len(r)] = torch.tensor(p + r)
            labels[i, len(p):len(p) + len(r)] = torch.tensor(r)
            mask[i, :len(p) + len(r)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss))
        if probe_every and (step + 1) % probe_every == 0:
            probes.append((step + 1, round(sum(losses[-20:]) / 20, 4), probe_reward(model, bench)))
            save_checkpoint(model, out / f"warm-{step + 1}")
            print(f"warm start step {step + 1}: loss {probes[-1][1]}, sampled reward "
                  f"{probes[-1][2]:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    save_checkpoint(model, path)
    info = {"steps": steps, "lr": lr, "batch_size": batch_size, "pairs": len(data),
            "final_loss": sum(losses[-20:]) / len(losses[-20:]), "seconds": time.perf_counter() - t0,
            "parameters": sum(p.numel() for p in model.parameters()), "probes": probes}
    info_file.write_text(json.dumps(info, indent=2))
    return info


def build(out: Path, warm_steps: int, probe_every: int = 0) -> dict:
    """Every piece of the workload under `out` (what is there already is kept)."""
    out.mkdir(parents=True, exist_ok=True)
    tasks = export_tasks(out)
    init = build_init(out)
    info = warm_start(out, init, tasks, warm_steps, probe_every=probe_every)
    return {"tasks": str(tasks), "init": str(init), "warm": str(out / "warm"), "warm_start": info}
