"""The inference engine (vLLM's CPU build, a server rollforge starts) against the local sampler
(training/generate.py, in this process) on the real model, the same request through the same
boundary (engine/boundary.py): 8 prompts x n=8 completions of up to 256 tokens at T 1.0, real
prompts (4 held-out procedural function tasks, 4 HumanEval problems, in the model's chat
template). Prints tokens/s side by side and their ratio, the server's first and warm start
seconds, the gap between the engine's log-probs and the trainer's (the policy's fp32
forward on the same ids, training/batch.py `token_logprobs`), and the weight sync of a LoRA
policy (an adapter version loaded into a running server, the one before unloaded) with the
same request sampled through the adapter; and the full-weight sync both ways: a changed
checkpoint folder loaded into the running server in place (flows/sampler.py's default) against
a restart on it (the warm start).

    make model engine
    .venv/bin/python bench/bench_engine.py [--threads 2] [--max-num-seqs 64] [--dtype float32]
        [--bind nobind] [--kv-gib 4] [--compile] [--prompts 8] [--n 8] [--new-tokens 256]
        [--temperature 1.0] [--top-p 1.0] [--cold] [--skip-local] [--json out.json]

Order: the local sampler first (no server running), then the server's first start, a warm-up
request, the timed request, the in-place full-weight loads, a stop and a second (warm) start;
then a LoRA-enabled server. `--cold` deletes vLLM's compile
cache first, so the first start compiles (as on a new machine).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DS_ACCELERATOR", "cpu")
from flows.env import apply_defaults  # noqa: E402

apply_defaults()
import torch  # noqa: E402

from engine.boundary import LocalSampler, SampleRequest  # noqa: E402
from engine.vllm_sampler import VLLMSampler  # noqa: E402
from engine.vllm_server import DEV_MODE_ENV, ServerSettings, VLLMServer  # noqa: E402
from training.batch import make_batch, token_logprobs  # noqa: E402
from training.policy import load_pretrained  # noqa: E402
from training.pretrained import resolve  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = "smollm2-135m-instruct"


def real_prompts(n: int) -> list[str]:
    """Half held-out procedural function tasks, half HumanEval problems (the real model's
    config, configs/smollm2.yaml, through the project's own task loaders)."""
    from envs.sources import build_pool  # noqa: PLC0415
    from flows.config import load_config, task_sources  # noqa: PLC0415

    cfg = load_config(ROOT / "configs" / "smollm2.yaml")
    srcs = {s.name: s for s in task_sources(cfg)}
    funcs = [t for t in build_pool([srcs["functions"]]) if t.split == "heldout"]
    human = list(build_pool([srcs["humaneval"]]))
    return [t.prompt for t in funcs[:n - n // 2]] + [t.prompt for t in human[:n // 2]]


def timed(sampler, req: SampleRequest) -> tuple[list, float]:
    t0 = time.perf_counter()
    out = sampler.sample(req)
    return out, time.perf_counter() - t0


def logprob_gap(model, req: SampleRequest, out, temperature: float, micro: int = 8) -> dict:
    """|engine log-prob - trainer log-prob| over every sampled token, the trainer's being the
    policy's fp32 forward on the same prompt + completion ids with the sampler's banned ids."""
    banned = model.rollforge_tokenizer.banned_ids
    pad = model.rollforge_tokenizer.pad_token_id
    deltas = []
    for i in range(0, len(out), micro):
        chunk = out[i:i + micro]
        b = make_batch([list(req.prompts[c.prompt_index]) for c in chunk],
                       [list(c.token_ids) for c in chunk], pad)
        with torch.no_grad():
            lp = token_logprobs(model, b, temperature=temperature, banned=banned)
        for row, c in enumerate(chunk):
            start = len(req.prompts[c.prompt_index]) - 1
            mine = lp[row, start:start + len(c.token_ids)]
            deltas.append((mine - torch.tensor(c.logprobs)).abs())
    d = torch.cat(deltas)
    return {"tokens": d.numel(), "mean_abs": d.mean().item(), "max_abs": d.max().item(),
            "p99_abs": d.quantile(0.99).item(), "frac_over_0.1": (d > 0.1).float().mean().item()}


def lora_sync(model, model_dir: str, settings: ServerSettings, req: SampleRequest,
              temperature: float) -> dict:
    """Weight sync of a LoRA policy: a server on the base with runtime adapter loading; two
    adapter versions (rank 16 on every linear layer, random non-zero B so they change the
    policy) saved as a run saves them and loaded by name, the older unloaded, timed; the
    request sampled through the newer and its log-probs compared with the PEFT model's."""
    import dataclasses  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    from engine.vllm_server import lora_settings  # noqa: PLC0415
    from training.config import PolicyConfig  # noqa: PLC0415
    from training.lora import apply_lora  # noqa: PLC0415

    extra, env = lora_settings(16)
    folder = Path(tempfile.mkdtemp(prefix="rollforge-lora-bench-"))
    adapters = []
    for v in range(2):
        torch.manual_seed(v)
        peft = apply_lora(load_pretrained(model_dir), PolicyConfig(model_path=model_dir,
                                                                   lora_rank=16, lora_alpha=32))
        with torch.no_grad():
            for name, p in peft.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.02)
        peft.save_pretrained(str(folder / f"v{v}"))
        adapters.append(peft.eval())
    server = VLLMServer(dataclasses.replace(settings, extra_args=(*settings.extra_args, *extra),
                                            extra_env={**settings.extra_env, **env})).start()
    out: dict = {"start_s": server.starts[-1], "load_s": []}
    try:
        t = time.perf_counter()
        server.load_adapter("v0", folder / "v0")
        out["load_s"].append(time.perf_counter() - t)
        t = time.perf_counter()
        server.load_adapter("v1", folder / "v1")
        server.unload_adapter("v0")
        out["sync_s"] = time.perf_counter() - t
        engine = VLLMSampler(server, banned_ids=model.rollforge_tokenizer.banned_ids,
                             model_name="v1")
        comps, secs = timed(engine, req)
        out.update(summary(comps, secs))
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    out["logprob_gap"] = logprob_gap(adapters[1], req, comps, temperature)
    return out


def perturbed(model, model_dir: str | Path, folder: str | Path):
    """A copy of `model` with every MLP weight moved (a stand-in for an update), saved in
    `folder` as a model folder like `model_dir` (its tokenizer files copied): the copy."""
    import copy  # noqa: PLC0415

    new = copy.deepcopy(model)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in new.named_parameters():
            if "mlp" in name:
                p.add_(0.02 * torch.randn_like(p))
    shutil.copytree(model_dir, folder)
    new.save_pretrained(str(folder))
    return new


def full_sync(server: VLLMServer, model, model_dir: str, probe: list[int]) -> dict:
    """Full weights loaded in place, as flows/sampler.py syncs a version: a copy of the model
    with every MLP weight moved (a stand-in for an update) written as a checkpoint folder,
    loaded into the running server and back, each timed (load + prefix-cache reset); the
    server's log-probs of `probe` must change to the new weights' and back."""
    import tempfile  # noqa: PLC0415

    folder = Path(tempfile.mkdtemp(prefix="rollforge-full-bench-")) / "model"
    perturbed(model, model_dir, folder)
    try:
        before = server.prompt_logprobs(probe)
        out: dict = {"load_s": []}
        for path in (folder, model_dir):
            t = time.perf_counter()
            server.reload_weights(path)
            out["load_s"].append(time.perf_counter() - t)
            got = server.prompt_logprobs(probe)
            if path == folder:
                out["changed_mean_abs"] = sum(abs(x - y) for x, y in zip(got, before)) / len(got)
        out["back_max_abs"] = max(abs(x - y) for x, y in zip(got, before))
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
    return out


def summary(out, seconds: float) -> dict:
    tokens = sum(len(c.token_ids) for c in out)
    return {"tokens": tokens, "seconds": seconds, "tok_s": tokens / seconds,
            "stop": sum(c.finish_reason == "stop" for c in out),
            "length": sum(c.finish_reason == "length" for c in out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=2, help="both samplers' thread budget")
    ap.add_argument("--local-batch", type=int, default=64, help="the local sampler's batch size")
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--bind", default="nobind")
    ap.add_argument("--kv-gib", type=int, default=4)
    ap.add_argument("--compile", action="store_true",
                    help="let the server torch.compile the model (minutes at each start here)")
    ap.add_argument("--server-env", action="append", default=[], metavar="K=V",
                    help="an environment variable for the server (repeatable)")
    ap.add_argument("--cold", action="store_true", help="delete vLLM's compile cache first")
    ap.add_argument("--skip-local", action="store_true")
    ap.add_argument("--skip-warm-start", action="store_true")
    ap.add_argument("--skip-lora", action="store_true", help="skip the LoRA weight-sync part")
    ap.add_argument("--json", help="also write the figures to this file")
    a = ap.parse_args()
    # A `timeout` or a ^C must still stop the server (its own session does not get the signal).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    torch.set_num_threads(a.threads)
    model_dir = resolve(MODEL)
    model = load_pretrained(model_dir).eval()  # fp32, as the trainer holds it
    tok = model.rollforge_tokenizer
    prompts = [tok.encode_prompt(p) for p in real_prompts(a.prompts)]
    req = SampleRequest(prompts, n=a.n, temperature=a.temperature, top_p=a.top_p,
                        max_new_tokens=a.new_tokens, seed=0)
    warm = SampleRequest(prompts[:2], n=2, temperature=a.temperature, max_new_tokens=8, seed=1)
    settings = ServerSettings(model_dir, threads=a.threads, dtype=a.dtype, bind=a.bind,
                              kv_cache_gib=a.kv_gib, max_num_seqs=a.max_num_seqs,
                              max_model_len=2048, log_dir=str(ROOT / "runs" / "engine-bench"),
                              eager=not a.compile,
                              extra_env={**DEV_MODE_ENV,
                                         **dict(kv.split("=", 1) for kv in a.server_env)})
    res: dict = {"settings": {"model": MODEL, "prompts": a.prompts, "n": a.n,
                              "new_tokens": a.new_tokens, "temperature": a.temperature,
                              "top_p": a.top_p, "threads": a.threads, "local_batch": a.local_batch,
                              "dtype": a.dtype, "bind": a.bind, "max_num_seqs": a.max_num_seqs,
                              "kv_gib": a.kv_gib, "compile": a.compile,
                              "server_env": a.server_env, "cpus": os.cpu_count(),
                              "load_avg_1m_at_start": os.getloadavg()[0]},
                 "prompt_tokens": [len(p) for p in prompts]}
    print(f"{a.prompts} prompts ({min(res['prompt_tokens'])}-{max(res['prompt_tokens'])} tokens) "
          f"x n={a.n}, up to {a.new_tokens} new tokens, T {a.temperature}, top-p {a.top_p}; "
          f"{a.threads} threads each", flush=True)

    if not a.skip_local:
        local = LocalSampler(model, batch_size=a.local_batch)
        local.sample(warm)
        out, secs = timed(local, req)
        res["local"] = summary(out, secs)
        res["local"]["logprob_gap"] = logprob_gap(model, req, out, a.temperature)
        print(f"local sampler: {res['local']['tokens']} tokens in {secs:.1f} s = "
              f"{res['local']['tok_s']:.1f} tok/s", flush=True)

    if a.cold:
        shutil.rmtree(Path.home() / ".cache" / "vllm" / "torch_compile_cache", ignore_errors=True)
    server = VLLMServer(settings)
    server.start()
    log = server.log_path.read_text(errors="replace")
    res["first_start_s"] = server.starts[-1]
    res["first_start_compiled"] = "saved AOT compiled function" in log
    how = ("eager: nothing compiled" if not a.compile else
           "compiled" if res["first_start_compiled"] else "compile cache hit")
    print(f"engine first start: {server.starts[-1]:.0f} s ({how}; log {server.log_path})",
          flush=True)
    engine = VLLMSampler(server, banned_ids=tok.banned_ids)
    try:
        engine.sample(warm)
        out, secs = timed(engine, req)
        res["engine"] = summary(out, secs)
        print(f"engine (vLLM): {res['engine']['tokens']} tokens in {secs:.1f} s = "
              f"{res['engine']['tok_s']:.1f} tok/s", flush=True)
        res["full_sync"] = full_sync(server, model, model_dir, prompts[0])
        fs = res["full_sync"]
        print(f"full weights in place: {fs['load_s'][0]:.2f} s (a changed folder; log-probs moved "
              f"{fs['changed_mean_abs']:.3f} nats/token), {fs['load_s'][1]:.2f} s back (then "
              f"{fs['back_max_abs']:.1e} from the first)", flush=True)
        if not a.skip_warm_start:
            server.stop()
            server.start()
            res["warm_start_s"] = server.starts[-1]
            print(f"engine warm start: {server.starts[-1]:.0f} s", flush=True)
    finally:
        server.stop()
    res["engine"]["logprob_gap"] = logprob_gap(model, req, out, a.temperature)
    if not a.skip_lora:
        res["lora"] = lora_sync(model, model_dir, settings, req, a.temperature)


    print("\n| sampler | tokens | seconds | tok/s | finished stop/length | log-prob gap to "
          "the trainer, mean / max |")
    print("|---|---|---|---|---|---|")
    for name in ("local", "engine"):
        if name in res:
            r, g = res[name], res[name]["logprob_gap"]
            print(f"| {name} | {r['tokens']} | {r['seconds']:.1f} | {r['tok_s']:.1f} | "
                  f"{r['stop']}/{r['length']} | {g['mean_abs']:.2e} / {g['max_abs']:.2e} |")
    if "local" in res:
        res["ratio"] = res["engine"]["tok_s"] / res["local"]["tok_s"]
        print(f"\nengine / local tokens/s: {res['ratio']:.2f}x")
    if "full_sync" in res:
        print(f"weight sync, full weights: in place {res['full_sync']['load_s'][0]:.2f} s "
              f"against a restart (warm start) of {res.get('warm_start_s', float('nan')):.0f} s")
    if "lora" in res:
        lo = res["lora"]
        print(f"weight sync: LoRA adapter load {lo['load_s'][0]:.2f} s (first), "
              f"{lo['sync_s']:.2f} s (next version: load + unload the last); through the "
              f"adapter {lo['tok_s']:.1f} tok/s, log-prob gap mean / max "
              f"{lo['logprob_gap']['mean_abs']:.2e} / {lo['logprob_gap']['max_abs']:.2e}")
    print(f"server start: first {res['first_start_s']:.0f} s, warm "
          f"{res.get('warm_start_s', float('nan')):.0f} s; settings {json.dumps(res['settings'])}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
