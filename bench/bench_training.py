"""Policy-update tokens/s through the DeepSpeed engine against a plain PyTorch loop doing the
same step (same model, AdamW, micro-batches, clipping, GRPO loss), measured in one run; and
generation tokens/s with and without the KV cache. Default model (configs/default.yaml).

    .venv/bin/python bench/bench_training.py [--steps 6] [--samples 128]
Target: DeepSpeed's overhead at most 10% (ratio >= 0.90).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DS_ACCELERATOR", "cpu")
from flows.env import apply_defaults  # noqa: E402

apply_defaults()
import torch  # noqa: E402

from flows.config import load_config  # noqa: E402
from training.batch import make_batch, token_logprobs  # noqa: E402
from training.engine import make_engine  # noqa: E402
from training.generate import sample  # noqa: E402
from training.losses import grpo_loss  # noqa: E402
from training.policy import build_policy  # noqa: E402


def _batch(n: int, seed: int):
    r = random.Random(seed)
    rows = []
    for _ in range(n):
        p = [257] + [r.randrange(32, 127) for _ in range(r.randrange(60, 140))]
        c = [r.randrange(32, 127) for _ in range(r.randrange(10, 41))]
        rows.append((p, c, r.choice([-1.0, 1.0])))
    return rows


def _micro(rows, micro, max_len):
    for k in range(0, len(rows), micro):
        part = rows[k:k + micro]
        b = make_batch([p for p, _, _ in part], [c for _, c, _ in part], 256, max_len)
        adv = torch.tensor([a for _, _, a in part])
        yield b, adv


def step_deepspeed(engine, rows, micro, max_len) -> int:
    tokens = 0
    for b, adv in _micro(rows, micro, max_len):
        logp = token_logprobs(engine, b)
        loss, _ = grpo_loss(logp, logp.detach() - 0.01, adv, b.loss_mask)
        engine.backward(loss)
        engine.step()
        tokens += int(b.attention_mask.sum())
    return tokens


def step_torch(model, opt, rows, micro, max_len, clip) -> int:
    tokens, accum = 0, -(-len(rows) // micro)
    for b, adv in _micro(rows, micro, max_len):
        logp = token_logprobs(model, b)
        loss, _ = grpo_loss(logp, logp.detach() - 0.01, adv, b.loss_mask)
        (loss / accum).backward()
        tokens += int(b.attention_mask.sum())
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6, help="timed update steps per side")
    ap.add_argument("--samples", type=int, default=128, help="sequences per update step")
    ap.add_argument("--gen-prompts", type=int, default=32)
    args = ap.parse_args()
    cfg = load_config()
    pol, rl = cfg.policy, cfg.rl
    micro = rl.micro_batch_size
    accum = -(-args.samples // micro)
    torch.manual_seed(0)
    ds_model, pt_model = build_policy(pol), build_policy(pol)
    engine = make_engine(ds_model, rl, rl.lr, micro, accum)
    opt = torch.optim.AdamW(pt_model.parameters(), lr=rl.lr, betas=(0.9, 0.99), weight_decay=0.0)
    ds_rate, pt_rate = [], []
    step_deepspeed(engine, _batch(micro, 99), micro, pol.max_len)  # warm-up (one micro-batch each)
    step_torch(pt_model, opt, _batch(micro, 99), micro, pol.max_len, rl.grad_clip)
    for s in range(args.steps):  # interleaved, so machine load hits both sides alike
        rows = _batch(args.samples, s)
        t = time.perf_counter()
        n = step_deepspeed(engine, rows, micro, pol.max_len)
        ds_rate.append(n / (time.perf_counter() - t))
        t = time.perf_counter()
        n = step_torch(pt_model, opt, rows, micro, pol.max_len, rl.grad_clip)
        pt_rate.append(n / (time.perf_counter() - t))
    ds, pt = statistics.median(ds_rate), statistics.median(pt_rate)
    print(f"policy update, default model ({pol.n_layer}x{pol.n_embd}, {args.samples} seqs/step, "
          f"micro {micro}, ZeRO-{rl.zero_stage} {rl.dtype}, {torch.get_num_threads()} threads):")
    print(f"  DeepSpeed engine : {ds:10.0f} tokens/s (median of {args.steps})")
    print(f"  plain PyTorch    : {pt:10.0f} tokens/s")
    print(f"  ratio            : {ds / pt:10.3f}  (target >= 0.90: DeepSpeed overhead <= 10%)")

    model = build_policy(pol).eval()
    prompts = [f"def f{i}(x):\n    " for i in range(args.gen_prompts)]
    s = cfg.sampling
    rates = {}
    for use_cache in (True, False, True, False):
        g = torch.Generator().manual_seed(0)
        t = time.perf_counter()
        out = sample(model, prompts, s.max_new_tokens, s.temperature, batch_size=s.batch_size,
                     generator=g, use_cache=use_cache)
        rate = sum(len(x.completion_ids) for x in out) / (time.perf_counter() - t)
        rates.setdefault(use_cache, []).append(rate)
    kv, nokv = max(rates[True]), max(rates[False])
    print(f"generation ({args.gen_prompts} prompts, up to {s.max_new_tokens} new tokens, best of 2):")
    print(f"  with KV cache    : {kv:10.0f} tokens/s")
    print(f"  without KV cache : {nokv:10.0f} tokens/s")
    print(f"  speed-up         : {kv / nokv:10.2f}x")


if __name__ == "__main__":
    main()
