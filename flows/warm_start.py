"""What the warm start stage needs besides the trainer: the probe of a warm start trained until
a criterion (`sft.until_pass`) and the multi-turn and tools kinds' demonstrations, all played
through the run's environments and Dask cluster."""
from __future__ import annotations

import time

from flows import stages
from flows.config import RunConfig
from flows.episode_exec import step_deadline_s, step_many
from envs.toolcalls import write_tool_calls
from flows.episodes import play, solved
from flows.scripted import (build_demos, first_try_right, full_function, replay_policy,
                            scripted_policy, tools_act)
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
    s = cfg.sampling

    def passed(model) -> float:
        tok = tokenizer_of(model)

        def sample_fn(turn, contexts, _eps, max_new_tokens, k):
            t = time.perf_counter()
            out = sample_actions(model, contexts, max_new_tokens, s.temperature, s.top_p,
                                 greedy=True, batch_size=s.batch_size, stop=tuple(s.stop))
            return out, time.perf_counter() - t

        eps = play(tasks, envs, 1, cfg.policy.max_len, tok, s.max_new_tokens, sample_fn,
                   _step_fn(cfg))
        return sum(bool(solved(e)) for e in eps) / len(eps)
    return passed


def agent_demos(cfg: RunConfig, src, env, tasks: list[Task]) -> list:
    """The agent kind's demonstrations in its text verbs: a naive first attempt through the
    real environment (at least two turns, so the fix has one), then the fix."""
    from envs.registry import make_env  # noqa: PLC0415

    demo_env = make_env(src.kind, {**src.options, "max_turns": max(2, env.max_turns)})
    return build_demos(tasks, _naive_bodies(src, env), demo_env, _policy_tokenizer(cfg),
                       _step_fn(cfg))


def tool_demos(cfg: RunConfig, src, env, tasks: list[Task]) -> list[tuple[list, list, list]]:
    """The agent kind's demonstrations as tool calls (action_format: tools), encoded:
    (prompt ids, completion ids, mask) of episodes played by the run's own loop, environment
    and sandbox, the tokens appended turn by turn from the policy's chat template exactly as an
    RL episode's are, with a scripted policy that calls the tools in the configured
    `tool_format`: write a first attempt (naive, or already right for `demo_first_try_share`
    of the tasks) and run_tests; after a failing run write the reference and submit, else
    submit. Only episodes the hidden tests passed are kept; a task whose reference cannot be
    written in the format (it holds the format's closing tag) is left out."""
    from envs.registry import make_env  # noqa: PLC0415

    ecfg = env.config
    naive = _naive_bodies(src, env)
    first = {t.task_id: t.reference if first_try_right(t.task_id, ecfg.demo_first_try_share)
             else naive.get(t.task_id, t.reference) for t in tasks if t.reference is not None}

    def writable(t: Task) -> bool:
        try:
            for body in {first[t.task_id], t.reference}:
                write_tool_calls([("write_file", {"path": "solution.py",
                                                  "content": full_function(t, body)})],
                                 ecfg.tool_format)
        except ValueError:
            return False
        return True

    usable = [t for t in tasks if t.task_id in first and writable(t)]
    if not usable:
        return []
    demo_env = make_env(src.kind, {**src.options, "max_turns": max(2, env.max_turns)})
    tok = _policy_tokenizer(cfg)
    eps = play(usable, [demo_env] * len(usable), 1, cfg.policy.max_len, tok,
               demo_env.action_tokens(cfg.sampling.max_new_tokens),
               scripted_policy(first, tok, act=tools_act(ecfg.tool_format)), _step_fn(cfg))
    return _solved_tokens(eps)


def replayed_tool_demos(cfg: RunConfig, env, tasks: list[Task], tok=None,
                        step_fn=None) -> list[tuple[list, list, list]]:
    """A tools kind's demonstrations (`Environment.demo_tool_calls`: the ops kind's reference
    script as its `shell` call), encoded as `tool_demos`' are: each task's calls written in the
    configured `tool_format`, replayed turn by turn through the run's own loop, environment and
    sandbox in the policy's chat template, kept where the episode solved. A task whose calls
    cannot be written in the format, or whose turn is longer than the sampler may write
    (`sampling.max_new_tokens`, as the kind counts it), is left out. `tok`, `step_fn`: the
    policy's tokenizer and the run's Dask steps unless given."""
    tok = tok if tok is not None else _policy_tokenizer(cfg)
    budget = env.action_tokens(cfg.sampling.max_new_tokens)
    replies = {}
    for t in tasks:
        turns = env.demo_tool_calls(t)
        if not turns or len(turns) > env.max_turns:
            continue
        try:
            texts = [write_tool_calls(calls, env.config.tool_format) for calls in turns]
        except ValueError:
            continue
        if all(len(tok.encode(x, bos=False)) < budget for x in texts):  # + the end of turn
            replies[t.task_id] = texts
    usable = [t for t in tasks if t.task_id in replies]
    if not usable:
        return []
    eps = play(usable, [env] * len(usable), 1, cfg.policy.max_len, tok, budget,
               replay_policy(tok, replies), step_fn or _step_fn(cfg))
    return _solved_tokens(eps)


def _solved_tokens(eps) -> list[tuple[list, list, list]]:
    """(prompt ids, completion ids, mask) of the episodes that solved: the warm start's data."""
    return [(list(e.tokens.prompt_ids), list(e.tokens.ids), list(e.tokens.mask))
            for e in eps if solved(e)]


def _naive_bodies(src, env) -> dict[str, str]:
    """The procedural tasks' naive first attempts (none for a task file)."""
    from envs.io.procedural import first_attempts  # noqa: PLC0415

    if src.file:
        return {}
    pc = env.config.procedural
    return first_attempts(pc.families, pc.difficulties, pc.tasks_per_family, pc.seed,
                          pc.sft_variants)


def _policy_tokenizer(cfg: RunConfig):
    """The tokenizer of the policy the warm start trains (before version 0 exists)."""
    from training.pretrained import resolve, split_gguf  # noqa: PLC0415
    from training.tokenizer import ByteTokenizer, load_tokenizer  # noqa: PLC0415

    p = cfg.policy
    if p.model_path is None:
        return ByteTokenizer()
    folder, gguf = split_gguf(resolve(p.model_path))
    return load_tokenizer(folder, gguf_file=gguf, chat_template=p.chat_template)


def _step_fn(cfg: RunConfig):
    c = cfg.cluster
    client = dask_client(c.address, c.n_workers, c.threads_per_worker)

    def step_fn(turn, items):
        return step_many(client, items, cfg.sandbox, cfg.rewards,
                         timeout_s=step_deadline_s(items, cfg.sandbox, total_threads(client)))
    return step_fn


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
