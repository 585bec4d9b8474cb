"""The TRL side of bench/bench_trl.py: TRL's `GRPOTrainer` on the bench's workload. It runs in the
bench's own venv (`.bench-venvs/trl`, made by bench_trl.py), never in rollforge's, and imports
nothing of rollforge: it reads the task file as JSON and runs the tests itself.

    .bench-venvs/trl/bin/python bench/trl_side.py --model WARM_DIR --tasks tasks.jsonl --out r.json

Reward: the fraction of a task's hidden tests that `prompt + completion` passes, each completion
run in a fresh interpreter (`python -I`, 5 s limit), two at a time (two worker processes), as
rollforge's io reward counts it (the tests' return values compared outside the process, a
bool is not an int). Timings per optimizer step: the step (a callback's step begin to step end),
and inside it TRL's own profiling hooks (`trl.extras.profiling`, whose records go to wandb or
mlflow only, so they are captured here): `transformers.generate` (sampling), `_calculate_rewards`
(the reward), `compute_loss` (the policy forward and the loss), plus `accelerator.backward` wrapped
here (the backward pass). What the step holds beyond these is the rest (tokenising, advantages,
the optimizer step, logging).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# The program each completion runs in: the task's function, then its tests' calls; results
# (or the exception's type) go back as one JSON line, compared with the expected values here.
HARNESS = r"""
import json, sys
spec = json.loads(sys.stdin.read())
ns = {"__name__": "solution"}
out = []
try:
    exec(compile(spec["source"], "solution.py", "exec"), ns)
    fn = ns[spec["entry_point"]]
except BaseException as exc:
    print("\x00RESULTS" + json.dumps([["load_error", type(exc).__name__]] * len(spec["args"])))
    raise SystemExit(0)
for args in spec["args"]:
    try:
        out.append(["ok", fn(*args)])
    except BaseException as exc:
        out.append(["error", type(exc).__name__])
try:
    line = json.dumps(out)
except (TypeError, ValueError):
    line = json.dumps([[s, repr(v)] if s == "ok" else [s, v] for s, v in out])
print("\x00RESULTS" + line)
"""


def _equal(expected, actual) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(actual) == len(expected)
                and all(_equal(e, a) for e, a in zip(expected, actual)))
    return type(expected) is type(actual) and expected == actual


def run_tests(source: str, entry_point: str, tests: list[dict], timeout_s: float = 5.0) -> float:
    """Fraction of `tests` passed by `source`, run in a fresh interpreter."""
    spec = json.dumps({"source": source, "entry_point": entry_point,
                       "args": [t["args"] for t in tests]})
    try:
        p = subprocess.run([sys.executable, "-I", "-c", HARNESS], input=spec, text=True,
                           capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return 0.0
    marker = [ln for ln in p.stdout.splitlines() if ln.startswith("\x00RESULTS")]
    if not marker:
        return 0.0  # a syntax error, or the process died
    results = json.loads(marker[-1][len("\x00RESULTS"):])
    return sum(s == "ok" and _equal(t["expected"], v)
               for (s, v), t in zip(results, tests)) / len(tests)


def _informative(rewards: list[float], group: int) -> int:
    """Groups whose rewards are not all equal (TRL's sampler puts a prompt's G completions
    next to each other)."""
    return sum(len(set(rewards[i:i + group])) > 1 for i in range(0, len(rewards), group))


def _rows(batch: dict) -> list[dict]:
    """A trained batch as rows: the prompt's ids without TRL's left padding, the completion's
    without its right padding, the advantage."""
    rows = []
    for pi, pm, ci, cm, a in zip(batch["prompt_ids"].tolist(), batch["prompt_mask"].tolist(),
                                 batch["completion_ids"].tolist(),
                                 batch["completion_mask"].tolist(), batch["advantages"].tolist()):
        rows.append({"prompt_ids": [t for t, m in zip(pi, pm) if m],
                     "completion_ids": [t for t, m in zip(ci, cm) if m], "advantage": a})
    return rows


class Recorder:
    """Seconds of each named part per optimizer step (TRL's profiling hooks plus backward)."""

    def __init__(self):
        self.steps: list[dict] = []
        self.current: dict = {}

    def add(self, name: str, seconds: float) -> None:
        self.current[name] = self.current.get(name, 0.0) + seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the warm-started Hugging Face checkpoint")
    ap.add_argument("--tasks", required=True, help="the rollforge task file (.jsonl)")
    ap.add_argument("--out", required=True, help="where the result JSON goes")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--workers", type=int, default=2, help="reward worker processes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batches-out", default=None,
                    help="also write each step's trained batch (prompt and completion ids, "
                         "advantages) as JSON: bench/train_same.py trains rollforge on them")
    args = ap.parse_args()

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t_start = time.perf_counter()
    import torch
    import trl
    import trl.extras.profiling as profiling
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rec = Recorder()
    original_log = profiling.ProfilingContext._log_metrics

    def capture(self, duration):  # TRL's own hook: record it instead of sending it to wandb
        rec.add(self.name, duration)
        return original_log(self, duration)

    profiling.ProfilingContext._log_metrics = capture

    tasks = [json.loads(line) for line in Path(args.tasks).read_text().splitlines() if line.strip()]
    data = Dataset.from_list([{"prompt": t["prompt"], "entry_point": t["entry_point"],
                               "tests": json.dumps(t["tests"])} for t in tasks])
    pool = ThreadPoolExecutor(max_workers=args.workers)  # each thread waits on its own process
    rewards_seen: list[list[float]] = []

    def unit_tests(prompts, completions, entry_point, tests, **_):
        jobs = [pool.submit(run_tests, p + c, e, json.loads(ts))
                for p, c, e, ts in zip(prompts, completions, entry_point, tests)]
        out = [j.result() for j in jobs]
        rewards_seen.append(out)
        return out

    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    batch = args.group_size * args.prompts_per_step
    cfg = GRPOConfig(
        output_dir=str(Path(args.out).with_suffix("")) + "-trainer", max_steps=args.steps,
        per_device_train_batch_size=batch, gradient_accumulation_steps=1,
        num_generations=args.group_size, max_completion_length=args.max_new_tokens,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0,
        adam_beta1=0.9, adam_beta2=0.99, weight_decay=0.0, max_grad_norm=1.0,
        beta=0.0, epsilon=0.2, loss_type="grpo", scale_rewards="group", num_iterations=1,
        temperature=1.0, top_p=1.0, generation_kwargs={"suppress_tokens": [tok.pad_token_id,
                                                                             tok.bos_token_id]},
        bf16=False, gradient_checkpointing=False, use_cpu=True, seed=args.seed,
        report_to="none", logging_steps=1, save_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0, log_completions=False)

    class Steps(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            rec.current = {"t_begin": time.perf_counter()}

        def on_step_end(self, a, state, control, **kw):
            now = time.perf_counter()
            rec.current["step_s"] = now - rec.current.pop("t_begin")
            rec.current["t_end"] = now
            rec.steps.append(rec.current)
            rec.current = {}

    trainer = GRPOTrainer(model=model, reward_funcs=[unit_tests], args=cfg, train_dataset=data,
                          processing_class=tok, callbacks=[Steps()])
    backward = trainer.accelerator.backward

    def timed_backward(loss, **kw):
        t = time.perf_counter()
        out = backward(loss, **kw)
        rec.add("backward", time.perf_counter() - t)
        return out

    trainer.accelerator.backward = timed_backward
    trained: list[dict] = []  # the tensors each step's loss was computed on (read after training)
    compute_loss = trainer.compute_loss

    def kept_compute_loss(model_, inputs, *a, **kw):
        trained.append({k: inputs[k] for k in ("prompt_ids", "prompt_mask", "completion_ids",
                                               "completion_mask", "advantages")})
        return compute_loss(model_, inputs, *a, **kw)

    if args.batches_out:  # outside TRL's compute_loss hook: not in its forward time
        trainer.compute_loss = kept_compute_loss
    t_setup = time.perf_counter() - t_start
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    pool.shutdown()

    logs = [h for h in trainer.state.log_history if "reward" in h]
    steps = []
    for i, s in enumerate(rec.steps):
        gen = s.get("GRPOTrainer.transformers.generate", 0.0)
        reward = s.get("GRPOTrainer._calculate_rewards", 0.0)
        fwd = s.get("GRPOTrainer.compute_loss", 0.0)
        bwd = s.get("backward", 0.0)
        steps.append({"step_s": s["step_s"], "generate_s": gen, "reward_s": reward,
                      "forward_s": fwd, "backward_s": bwd,
                      "other_s": s["step_s"] - gen - reward - fwd - bwd,
                      "mean_reward": float(sum(rewards_seen[i]) / len(rewards_seen[i]))
                      if i < len(rewards_seen) else None,
                      "informative_groups": _informative(rewards_seen[i], args.group_size)
                      if i < len(rewards_seen) else None,
                      "trl_logged_reward": logs[i]["reward"] if i < len(logs) else None,
                      "t_end": s["t_end"], "hooks": {k: v for k, v in s.items()
                                                     if k not in ("step_s", "t_end")}})
    out = {"trl": trl.__version__, "torch": torch.__version__,
           "transformers": __import__("transformers").__version__,
           "torch_threads": torch.get_num_threads(), "setup_s": t_setup, "train_s": train_s,
           "steps": steps, "config": {k: getattr(cfg, k) for k in (
               "per_device_train_batch_size", "num_generations", "max_completion_length",
               "learning_rate", "loss_type", "beta", "scale_rewards", "bf16")}}
    Path(args.out).write_text(json.dumps(out, indent=2))
    if args.batches_out:
        Path(args.batches_out).write_text(json.dumps([_rows(b) for b in trained]))
    print(json.dumps({k: out[k] for k in ("trl", "setup_s", "train_s")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
