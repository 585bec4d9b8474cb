"""rollforge's local sampler against `model.generate` on the same batch, alternated in one
process (issue 41: sampling no slower than `generate`), and against itself before its own KV
cache and shared prefill (the model's `DynamicCache`, every row prefilled).

The batch is bench/bench_trl.py's: 8 of its tasks' prompts, each 8 times side by side (a GRPO
group's layout), 32 new tokens, temperature 1, top-p 1, PAD and BOS never drawn; `generate` is
called as TRL's GRPOTrainer calls it (`do_sample`, `suppress_tokens`, no top-k). The model is
the bench's warm start when its work folder has one (`--work`), else its untrained init;
`--real` adds SmolLM2-135M-Instruct (`make model`) on the same prompts. Greedy rows say whether
the two samplers drew the same tokens (they should: the same model, argmax).

    .venv/bin/python bench/bench_sampler.py
    .venv/bin/python bench/bench_sampler.py --real --rounds 5
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def bench_model(work: Path):
    """The bench's warm start, or (none in `work` yet) its untrained init, and 8 prompts."""
    from bench.trl_workload import build_init, export_tasks  # noqa: PLC0415
    from training.policy import load_policy  # noqa: PLC0415

    work.mkdir(parents=True, exist_ok=True)
    tasks = [json.loads(line) for line in export_tasks(work).read_text().splitlines()][:8]
    if (work / "warm" / "config.json").is_file():
        path, what = work / "warm", "the bench's warm start"
    else:
        path, what = build_init(work), "the bench's untrained init (no warm start in --work)"
    return load_policy(str(path)).eval(), f"{path} ({what})", [t["prompt"] for t in tasks]


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def compare(model, prompts: list[str], rounds: int, group: int, new_tokens: int) -> list[dict]:
    """Median seconds of each way, greedy and sampled, alternated round by round."""
    import torch  # noqa: PLC0415

    from training import generate  # noqa: PLC0415
    from training.policy import TOKENIZER_ATTR  # noqa: PLC0415

    tok = getattr(model, TOKENIZER_ATTR)
    ids = [tok.encode_prompt(p) for p in prompts for _ in range(group)]
    padded = torch.nn.utils.rnn.pad_sequence([torch.tensor(p[::-1]) for p in ids], batch_first=True,
                                             padding_value=tok.pad_token_id).flip(1)
    mask = (torch.arange(padded.shape[1]) >= padded.shape[1] - torch.tensor(
        [len(p) for p in ids])[:, None]).long()
    own_cache = generate.filled_cache

    def ours(greedy: bool, before: bool = False):
        generate.filled_cache = (lambda m, c: None) if before else own_cache
        try:
            with torch.no_grad():
                out = generate.sample_batch(model, ids, new_tokens, 1.0, 1.0, greedy,
                                            torch.Generator().manual_seed(1), True, tok)
        finally:
            generate.filled_cache = own_cache
        return [s.completion_ids for s in out]

    def hf(greedy: bool):
        torch.manual_seed(1)
        with torch.no_grad():
            out = model.generate(input_ids=padded, attention_mask=mask, max_new_tokens=new_tokens,
                                 do_sample=not greedy, temperature=1.0, top_p=1.0, top_k=0,
                                 suppress_tokens=[tok.pad_token_id, tok.bos_token_id],
                                 pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        rows = out[:, padded.shape[1]:].tolist()
        return [r[:r.index(tok.eos_token_id) + 1] if tok.eos_token_id in r else r for r in rows]

    results = []
    for greedy in (True, False):
        ways = {"generate": lambda g=greedy: hf(g), "before": lambda g=greedy: ours(g, True),
                "rollforge": lambda g=greedy: ours(g)}
        times: dict[str, list[float]] = {k: [] for k in ways}
        outs = {}
        for fn in ways.values():
            fn()  # warm: first-call allocations and kernel choices
        for _ in range(rounds):  # alternated, so a slow moment of the machine hits every way
            for name, fn in ways.items():
                t, outs[name] = timed(fn)
                times[name].append(t)
        results.append({"greedy": greedy, **{k: statistics.median(v) for k, v in times.items()},
                        "steps": max(len(r) for r in outs["rollforge"]),
                        "same_tokens": outs["rollforge"] == outs["generate"] if greedy else None})
    return results


def main() -> int:
    import torch  # noqa: PLC0415

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "bench-trl",
                    help="bench/bench_trl.py's work folder (its warm start and task file)")
    ap.add_argument("--rounds", type=int, default=7, help="alternated rounds (medians over them)")
    ap.add_argument("--group", type=int, default=8, help="copies of each prompt in the batch")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--real", action="store_true", help="also SmolLM2-135M-Instruct")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, what, prompts = bench_model(args.work)
    models = [("bench model", model, what)]
    if args.real:
        from training.policy import load_policy  # noqa: PLC0415
        from training.pretrained import converted_dir  # noqa: PLC0415

        path = converted_dir("smollm2-135m-instruct")
        models.append(("SmolLM2-135M", load_policy(str(path)).eval(), str(path)))
    print(f"batch: {len(prompts)} prompts x {args.group}, {args.new_tokens} new tokens; torch "
          f"{torch.__version__}, {torch.get_num_threads()} thread(s); medians of {args.rounds} "
          "alternated rounds")
    print(f"{'':28}{'generate':>10}{'before':>10}{'rollforge':>11}{'/ generate':>12}"
          f"{'/ before':>10}{'steps':>7}  greedy tokens")
    for name, m, src in models:
        print(f"{name}: {src}")
        for r in compare(m, prompts, args.rounds, args.group, args.new_tokens):
            same = {None: "", True: "same as generate's", False: "DIFFER from generate's"}
            print(f"  {'greedy' if r['greedy'] else 'sampled':<26}{r['generate']:10.4f}"
                  f"{r['before']:10.4f}{r['rollforge']:11.4f}"
                  f"{r['rollforge'] / r['generate']:11.3f}x{r['rollforge'] / r['before']:9.3f}x"
                  f"{r['steps']:7d}  {same[r['same_tokens']]}")
    print("before: rollforge's sampler with the model's own DynamicCache, every row prefilled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
