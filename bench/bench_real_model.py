"""The real model (SmolLM2-135M-Instruct, `make model`) on this machine, side by side:

1. sampling tokens/s of rollforge's sampler (training/generate.py: KV cache, log-probs of every
   token, stop strings) against transformers' `model.generate` on the same batch, greedy, the
   same prompts and budget (the texts are compared too);
2. update seconds per 1k tokens (forward, backward, optimizer step of the GRPO loss) through the
   DeepSpeed engine against a plain PyTorch loop on the same batch, for full fine-tuning and for
   LoRA, in fp32 and under bf16 autocast (rl.autocast).

    .venv/bin/python bench/bench_real_model.py [--batch 8] [--new-tokens 64] [--steps 2]
        [--threads 1] [--modes full,lora] [--precisions fp32,bf16]
Timings of step 2 on; step 1 warms up (allocations, the engine's first step); both samplers
warm up on a short call first.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DS_ACCELERATOR", "cpu")
from flows.env import apply_defaults  # noqa: E402

apply_defaults()
import torch  # noqa: E402

from training.batch import make_batch, token_logprobs  # noqa: E402
from training.config import PolicyConfig, RLConfig  # noqa: E402
from training.engine import make_engine  # noqa: E402
from training.generate import _left_pad, sample  # noqa: E402
from training.lora import autocast, bf16_native  # noqa: E402
from training.losses import grpo_loss  # noqa: E402
from training.policy import build_policy  # noqa: E402

MODEL = "smollm2-135m-instruct"


def _prompts(n: int) -> list[str]:
    from envs.sources import build_pool  # noqa: PLC0415
    from flows.config import load_config, task_sources  # noqa: PLC0415

    cfg = load_config(Path(__file__).resolve().parent.parent / "configs" / "smollm2.yaml")
    pool = [t for t in build_pool(task_sources(cfg)[:1]) if t.split == "heldout"]
    return [t.prompt for t in pool[:n]]


def bench_sampling(model, prompts: list[str], new_tokens: int) -> dict:
    tok = model.rollforge_tokenizer
    sample(model, prompts[:2], 4, greedy=True)  # both warm up first (allocator, kernels)
    with torch.no_grad():
        model.generate(input_ids=torch.tensor([tok.encode_prompt(prompts[0])]), max_new_tokens=4,
                       do_sample=False, pad_token_id=tok.pad_token_id)
    t0 = time.perf_counter()
    ours = sample(model, prompts, new_tokens, greedy=True, batch_size=len(prompts))
    t_ours = time.perf_counter() - t0
    n_ours = sum(len(s.completion_ids) for s in ours)
    ids, mask = _left_pad([tok.encode_prompt(p) for p in prompts], tok.pad_token_id)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                             do_sample=False, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id,
                             suppress_tokens=tok.banned_ids or None)
    t_hf = time.perf_counter() - t0
    gen = out[:, ids.shape[1]:].tolist()
    texts, n_hf = [], 0
    for row in gen:
        cut = row.index(tok.eos_token_id) + 1 if tok.eos_token_id in row else len(row)
        n_hf += cut
        texts.append(tok.decode(row[:cut]))
    same = sum(a.text == b for a, b in zip(ours, texts))
    return {"ours_tok_s": n_ours / t_ours, "hf_tok_s": n_hf / t_hf, "ours_tokens": n_ours,
            "hf_tokens": n_hf, "ours_s": t_ours, "hf_s": t_hf, "same_text": same,
            "rows": len(prompts), "completions": ours}


def _loss(model, b, adv):
    logp = token_logprobs(model, b)
    loss, _ = grpo_loss(logp, logp.detach(), adv, b.loss_mask)
    return loss


def bench_update(mode: str, precision: str, batch, adv, steps: int, runner: str) -> float:
    """Median seconds per step over steps 2..N (step 1 warms up)."""
    policy = PolicyConfig(model_path=MODEL, max_len=1024, lora_rank=16 if mode == "lora" else 0,
                          lora_alpha=32)
    model = build_policy(policy)
    model.train()
    cast = "bf16" if precision == "bf16" else "none"
    times = []
    if runner == "deepspeed":
        rl = RLConfig(micro_batch_size=len(adv), autocast=cast)
        engine = make_engine(model, rl, 1e-5, len(adv), 1)
        for _ in range(steps):
            t0 = time.perf_counter()
            with autocast(cast, engine.device):
                loss = _loss(engine, batch, adv)
            engine.backward(loss)
            engine.step()
            times.append(time.perf_counter() - t0)
        del engine
    else:
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.99), weight_decay=0.0)
        for _ in range(steps):
            t0 = time.perf_counter()
            with autocast(cast, torch.device("cpu")):
                loss = _loss(model, batch, adv)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
    del model
    return statistics.median(times[1:] if len(times) > 1 else times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--modes", default="full,lora")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--skip-sampling", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    model = build_policy(PolicyConfig(model_path=MODEL, max_len=1024))
    print(f"model {MODEL}: loaded in {time.perf_counter() - t0:.1f} s "
          f"({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters), "
          f"torch threads {torch.get_num_threads()}")
    prompts = _prompts(args.batch)
    s = bench_sampling(model, prompts, args.new_tokens)
    print(f"\nsampling, greedy, {s['rows']} prompts x up to {args.new_tokens} new tokens")
    print(f"  {'':28s} {'tokens':>7s} {'seconds':>8s} {'tokens/s':>9s}")
    print(f"  {'rollforge sample()':28s} {s['ours_tokens']:7d} {s['ours_s']:8.1f} {s['ours_tok_s']:9.1f}")
    print(f"  {'transformers generate()':28s} {s['hf_tokens']:7d} {s['hf_s']:8.1f} {s['hf_tok_s']:9.1f}")
    print(f"  ratio {s['ours_tok_s'] / s['hf_tok_s']:.2f}; same greedy text on "
          f"{s['same_text']}/{s['rows']} rows")
    tok = model.rollforge_tokenizer
    comps = s["completions"]
    batch = make_batch([c.prompt_ids for c in comps], [c.completion_ids for c in comps],
                       tok.pad_token_id, 1024)
    adv = torch.tensor([1.0 if i % 2 else -1.0 for i in range(len(comps))])
    ktok = float(batch.attention_mask.sum()) / 1000
    del model
    print(f"\nupdate, {len(comps)} sequences, {ktok * 1000:.0f} tokens "
          f"({batch.input_ids.shape[1]} wide), GRPO loss, AdamW; seconds per 1k tokens")
    if "bf16" in args.precisions.split(",") and not bf16_native("cpu"):
        print("  (this CPU has no bf16 units: rl.autocast=bf16 is not applied, so its rows are "
              "fp32 again; training/lora.py bf16_native)")
    print(f"  {'mode':6s} {'precision':10s} {'deepspeed':>10s} {'plain torch':>12s} {'ratio':>6s}")
    for mode in args.modes.split(","):
        for precision in args.precisions.split(","):
            ds = bench_update(mode, precision, batch, adv, args.steps, "deepspeed") / ktok
            pt = bench_update(mode, precision, batch, adv, args.steps, "torch") / ktok
            print(f"  {mode:6s} {precision:10s} {ds:10.2f} {pt:12.2f} {pt / ds:6.2f}", flush=True)


if __name__ == "__main__":
    main()
