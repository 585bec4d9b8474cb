"""What the warm start stage needs besides the trainer: the probe of a warm start trained until
a criterion (`sft.until_pass`) and the agent kind's demonstrations, both played through the
run's environments and Dask cluster."""
from __future__ import annotations

import time

from flows import stages
from flows.config import RunConfig
from flows.episode_exec import step_deadline_s, step_many
from flows.episodes import play, solved
from flows.rollouts import dask_client, total_threads
from tasks.record import Task
from training.episodes import sample_actions
from training.policy import tokenizer_of


def probe_fn(cfg: RunConfig, tasks: list[Task]):
    """model -> its greedy pass rate on `tasks`: played and graded as the held-out evaluation
    plays its greedy episodes (the same environments and sandbox, the run's Dask cluster), from
    the weights being trained (no checkpoint is written)."""
    env = stages.env_of(cfg)
    envs = [env(t) for t in tasks]
    c, s = cfg.cluster, cfg.sampling

    def passed(model) -> float:
        client = dask_client(c.address, c.n_workers, c.threads_per_worker)
        tok = tokenizer_of(model)

        def sample_fn(turn, contexts, _eps, max_new_tokens, k):
            t = time.perf_counter()
            out = sample_actions(model, contexts, max_new_tokens, s.temperature, s.top_p,
                                 greedy=True, batch_size=s.batch_size, stop=tuple(s.stop))
            return out, time.perf_counter() - t

        def step_fn(turn, items):
            return step_many(client, items, cfg.sandbox, cfg.rewards,
                             timeout_s=step_deadline_s(items, cfg.sandbox, total_threads(client)))

        eps = play(tasks, envs, 1, cfg.policy.max_len, tok, s.max_new_tokens, sample_fn, step_fn)
        return sum(bool(solved(e)) for e in eps) / len(eps)
    return passed


def agent_demos(cfg: RunConfig, src, env, tasks: list[Task]) -> list:
    """The agent kind's demonstrations: a naive first attempt through the real environment
    (at least two turns, so the fix has one), then the fix."""
    from envs.registry import make_env  # noqa: PLC0415
    from flows.episodes import build_demos  # noqa: PLC0415
    from envs.io.procedural import first_attempts  # noqa: PLC0415
    from training.tokenizer import ByteTokenizer, load_tokenizer  # noqa: PLC0415
    from training.pretrained import split_gguf  # noqa: PLC0415

    p = cfg.policy
    if p.model_path is None:
        tok = ByteTokenizer()
    else:
        from training.pretrained import resolve  # noqa: PLC0415

        folder, gguf = split_gguf(resolve(p.model_path))
        tok = load_tokenizer(folder, gguf_file=gguf, chat_template=p.chat_template)
    demo_env = make_env(src.kind, {**src.options, "max_turns": max(2, env.max_turns)})
    pc = env.config.procedural
    naive = {} if src.file else first_attempts(pc.families, pc.difficulties, pc.tasks_per_family,
                                               pc.seed, pc.sft_variants)
    c = cfg.cluster
    client = dask_client(c.address, c.n_workers, c.threads_per_worker)

    def step_fn(turn, items):
        return step_many(client, items, cfg.sandbox, cfg.rewards,
                         timeout_s=step_deadline_s(items, cfg.sandbox, total_threads(client)))

    return build_demos(tasks, naive, demo_env, tok, step_fn)


def dataset_pairs(cfg: RunConfig, probe: list[Task]) -> tuple[list[str], list[str], dict]:
    """(prompts, references, metrics) of `sft.dataset`'s train split, less the examples of a
    task this run holds out or probes (by task id, or by prompt as `probe_split` withholds):
    an exported dataset is split by the runs it came from, which need not be this one."""
    from storage.sft_export import read_examples  # noqa: PLC0415

    try:
        exs = read_examples(cfg.sft.dataset)
    except (FileNotFoundError, ValueError) as exc:
        raise ValueError(f"sft.dataset={cfg.sft.dataset!r}: {exc}") from None
    held = {t.task_id for t in stages.heldout_tasks(cfg)}
    probed_ids, probed_prompts = {t.task_id for t in probe}, {t.prompt for t in probe}
    kept, heldout, probed = [], 0, 0
    for ex in exs:
        user, assistant = (m["content"] for m in ex["messages"])
        if ex["task_id"] in held:
            heldout += 1
        elif ex["task_id"] in probed_ids or user in probed_prompts:
            probed += 1
        else:
            kept.append((user, assistant))
    if not kept:
        raise ValueError(f"sft.dataset={cfg.sft.dataset!r}: none of its {len(exs)} train "
                         f"examples is left ({heldout} of tasks this run holds out, {probed} of "
                         "its probe tasks)")
    metrics = {"sft/dataset_examples": len(kept), "sft/dataset_dropped_heldout": heldout,
               "sft/dataset_dropped_probe": probed}
    return [p for p, _ in kept], [r for _, r in kept], metrics
