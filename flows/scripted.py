"""Fixed policies (not models) that play `flows.episodes.play`, for tests, benchmarks and the
warm start's demonstrations: a scripted agent that reads its observations (`scripted_policy`,
writing its turns in the agent kind's text verbs or as tool calls), a replay of given replies
(`replay_policy`), and the agent kind's text-format demonstrations (`build_demos`)."""
from __future__ import annotations

import hashlib
from typing import Callable

from envs.base import Environment
from envs.toolcalls import write_tool_calls
from flows.episodes import SampleFn, StepFn
from tasks.record import Task
from training.episodes import fit_observation, observation_text
from training.generate import Sample


def scripted_policy(naive: dict[str, str], tok, fix_on_fail: bool = True,
                    act: Callable[[str | None, str], str] | None = None) -> SampleFn:
    """A fixed agent policy that reads the observation, for tests, benchmarks and the warm
    start's demonstrations (not a model): turn 1 writes the task's naive body (`naive[task_id]`;
    the reference for a task without one) and runs the visible tests; after an observation with
    a FAIL or an error it writes the task's reference and submits (with `fix_on_fail`),
    otherwise it submits. `act(source, verb)` writes a turn (source: solution.py's new content
    or None; verb: run_tests or submit): the kind's text verbs by default (`xml_act`), tool
    calls with `tools_act`."""
    act = act or xml_act

    def fn(turn, contexts, episodes, _max_new_tokens, _k):
        out = []
        for ctx, e in zip(contexts, episodes):
            last = e.observations[-1] if e.observations else ""
            if turn == 1:
                text = act(full_function(e.task, naive.get(e.task.task_id, e.task.reference)),
                           "run_tests")
            elif fix_on_fail and ("FAIL" in last or "Error" in last):
                text = act(full_function(e.task, e.task.reference), "submit")
            else:
                text = act(None, "submit")
            ids = tok.encode(text, bos=False) + [tok.eos_token_id]
            out.append(Sample(list(ctx), ids, [0.0] * len(ids), text, True))
        return out, 0.0
    return fn


def xml_act(source: str | None, verb: str) -> str:
    """A turn in the agent kind's text verbs (envs/agent/EPISODES.md)."""
    return write_action(source, f"<{verb}/>") if source is not None else f"<{verb}/>"


def tools_act(fmt: str) -> Callable[[str | None, str], str]:
    """A turn as the agent kind's tool calls in `fmt` (envs/tools.py AGENT_TOOLS)."""
    def act(source: str | None, verb: str) -> str:
        write = [] if source is None else [("write_file", {"path": "solution.py",
                                                           "content": source})]
        return write_tool_calls(write + [(verb, {})], fmt)
    return act


def replay_policy(tok, replies: dict[str, list[str]], drawn: dict | None = None) -> SampleFn:
    """A fixed policy for tests and the warm start's replayed tool-call demonstrations (not a
    model): episode `e` answers turn `n` with
    `replies[e.task.task_id][n - 1]`, tokenized by `tok` and ended by its end-of-turn token,
    with log-probs that differ per token (a shifted one shows); `drawn[task_id]` keeps each
    draw's (ids, logprobs) in order."""
    def fn(turn, contexts, episodes, _max_new_tokens, _k):
        out = []
        for ctx, e in zip(contexts, episodes):
            text = replies[e.task.task_id][turn - 1]
            ids = tok.encode(text, bos=False) + [tok.eos_token_id]
            lps = [-(i + 1) / 1000 for i in range(len(ids))]
            if drawn is not None:
                drawn.setdefault(e.task.task_id, []).append((ids, lps))
            out.append(Sample(list(ctx), ids, lps, text, True))
        return out, 0.0
    return fn


# -- SFT demonstrations for multi-turn kinds -----------------------------------------------------
def full_function(task: Task, body: str) -> str:
    """The signature line of the task's prompt followed by `body`: a whole solution.py."""
    return task.prompt.split("\n", 1)[0] + "\n" + body


def write_action(source: str, then: str) -> str:
    return f'<write path="solution.py">\n{source}</write>\n{then}'


def first_try_right(task_id: str, share: float) -> bool:
    """Deterministic per task: whether its demonstration's first attempt is already right."""
    return int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) / 16 ** 8 < share


def build_demos(tasks: list[Task], naive: dict[str, str], env: Environment, tok,
                step_fn: StepFn) -> list[tuple[str, list[tuple[str, bool]]]]:
    """Action-format demonstrations `(intro, [(text, by_policy), ...])` of the agent kind: for
    a task with a naive body, a first attempt (naive, or already right for
    `demo_first_try_share` of them) and `<run_tests/>`, the real observation, then the fix and
    `<submit/>` (or `<submit/>` alone when the visible tests passed); for any other task,
    write + submit in one turn."""
    ecfg = env.config
    single, multi = [], []
    for t in tasks:
        if t.reference is None:
            continue
        state, intro = env.reset(t)
        if t.task_id not in naive:
            single.append((intro, [(write_action(full_function(t, t.reference), "<submit/>"), True)]))
            continue
        body = t.reference if first_try_right(t.task_id, ecfg.demo_first_try_share) else naive[t.task_id]
        multi.append((t, state, intro, write_action(full_function(t, body), "<run_tests/>")))
    stepped = step_fn(1, [(env, s, a) for _, s, _, a in multi]) if multi else []
    demos = list(single)
    for (t, _, intro, a1), r in zip(multi, stepped):
        passed = r.info.get("visible_total") and r.info["visible_passed"] == r.info["visible_total"]
        a2 = "<submit/>" if passed else write_action(full_function(t, t.reference), "<submit/>")
        obs = fit_observation(tok, r.observation, ecfg.obs_tokens)
        demos.append((intro, [(a1, True), (observation_text(obs), False), (a2, True)]))
    return demos
