"""The repo kind with `action_format: tools` in the one episode loop (`play`), on a real
instance (inflection, as tests/integration/test_repo_hacks.py) in the real sandbox and grader,
its conversation in SmolLM2-135M-Instruct's real chat template (it cannot render `tools=`, so
the declarations go into the system message). A replayed policy (tokens drawn from the real
tokenizer, not a model) runs the failing test and reads the buggy lines, then edits them and
submits; another's first turn holds a call to a tool the kind does not have. The rows keep
each call's outcome, and the mask keeps the sampled tokens, and only them, in the loss."""
from __future__ import annotations

import json
import shlex

import pytest

from envs.registry import make_env
from envs.repo.scripted import gold_hunks
from flows.config import load_config
from flows.episode_exec import step_local
from flows.episodes import play
from flows.scoring import episode_rows
from flows.scripted import replay_policy
from sandbox.config import SandboxConfig
from storage.schema import rows_to_table

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tok(smollm2_dir):
    from training.tokenizer import load_tokenizer

    return load_tokenizer(str(smollm2_dir))


@pytest.fixture(scope="module")
def env():
    return make_env("repo", {"repos": ["inflection"], "max_turns": 3, "action_format": "tools"})


@pytest.fixture(scope="module")
def task(env):
    return next(t for t in env.generate() if len(t.payload["files"]) == 1)


def call(name, **args):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


def fix(task):
    """The gold patch as edit calls, then submit."""
    return "".join(call("edit", path=p, search=o, replace=n)
                   for p, _, o, n in gold_hunks(task)) + call("submit")


def _play(tok, env, task, replies, drawn):
    cfg = load_config(None, [])
    scfg = SandboxConfig(timeout_s=30, memory_mb=1024)
    eps = play([task], [env], 1, 1 << 14, tok, 512, replay_policy(tok, replies, drawn),
               lambda turn, items: step_local(items, scfg, cfg.rewards))
    return eps[0], episode_rows(cfg, 0, 0, eps, 1, cfg.hash())[0]


def _policy_tokens(t):
    return [(i, lp) for i, lp, m in zip(t.ids, t.logprobs, t.mask) if m]


def test_repo_through_tools_resolves_and_the_row_keeps_each_calls_outcome(tok, env, task):
    hunks = gold_hunks(task)
    first = ("I will look first.\n" + call("run", command="pytest -x " + shlex.quote(
        task.payload["fail_to_pass"][0])) + "".join(
        call("read", path=p, start=s, end=s + 6) for p, s, _, _ in hunks))
    drawn: dict = {}
    e, row = _play(tok, env, task, {task.task_id: [first, fix(task)]}, drawn)
    assert e.final["end_reason"] == "submit" and e.grade.solved, e.grade
    assert "[exit 1]" in e.observations[0] and "1 failed" in e.observations[0]
    # one tool message per call of turn 1 (the run, then each read), then turn 2
    turn1 = e.chat.messages[3:3 + 1 + len(hunks)]
    assert [m["role"] for m in e.chat.messages] == (["system", "user", "assistant"]
                                                    + ["tool"] * (1 + len(hunks)) + ["assistant"])
    assert turn1[0]["content"].startswith("$ pytest") and "1 failed" in turn1[0]["content"]
    assert all(m["content"].startswith("$ read") for m in turn1[1:])
    assert "search" in e.chat.messages[0]["content"]  # the repo kind's tools, as text
    assert _policy_tokens(e.tokens) == [p for ids, lps in drawn[task.task_id]
                                        for p in zip(ids, lps)]
    assert e.chat.check().equal and row.completion_mask == e.tokens.mask
    calls = row.tool_calls
    assert [(c["turn"], c["name"], c["status"]) for c in calls] == (
        [(1, "run", "failed")] + [(1, "read", "ran")] * len(hunks)
        + [(2, "edit", "ran")] * len(hunks) + [(2, "submit", "ran")])
    assert (calls[0]["tests_passed"], calls[0]["tests_total"]) == (0, 1)
    assert row.turn_progress == [0.0, None]  # turn 1's pytest: 0 of 1 (rl.turn_credit)
    assert all(c["tests_total"] is None for c in calls[1:])
    assert rows_to_table([row], 0, 0).column("tool_calls").to_pylist() == [calls]


def test_a_call_to_a_tool_the_kind_lacks_runs_nothing_of_its_turn(tok, env, task):
    path = gold_hunks(task)[0][0]
    first = call("grep", pattern="def ") + call("read", path=path)
    drawn: dict = {}
    e, row = _play(tok, env, task, {task.task_id: [first, fix(task)]}, drawn)
    assert e.grade.solved and e.state.history[0]["action"] == "malformed"
    assert "unknown tool 'grep'" in e.observations[0] and "$ read" not in e.observations[0]
    assert [(c["turn"], c["name"], c["status"]) for c in row.tool_calls[:2]] == [
        (1, "grep", "malformed"), (1, "read", "not_run")]
    assert "unknown tool 'grep'" in row.tool_calls[0]["detail"]
    assert _policy_tokens(e.tokens) == [p for ids, lps in drawn[task.task_id]
                                        for p in zip(ids, lps)]
    env_ids = [i for i, m in zip(e.tokens.ids, e.tokens.mask) if not m]
    assert "unknown tool 'grep'" in tok.tok.decode(env_ids)


def test_the_warm_starts_repo_demonstrations_replay_the_scripted_fix_and_solve(tok, env, task):
    """flows/warm_start.py `replayed_tool_demos` with the repo kind's `demo_tool_calls` (the
    scripted agent's two turns as calls): the episode solves in the real sandbox, its tokens
    are the template's, the calls' tokens in the loss and the tool messages out of it."""
    from flows.warm_start import replayed_tool_demos

    cfg = load_config(None, ["policy.max_len=16384", "sampling.max_new_tokens=512"])
    scfg = SandboxConfig(timeout_s=30, memory_mb=1024)
    demos = replayed_tool_demos(cfg, env, [task], tok,
                                lambda turn, items: step_local(items, scfg, cfg.rewards))
    (prompt, ids, mask), = demos
    assert 0 in mask and mask[-1] == 1  # tool messages between the two turns, out of the loss
    said = tok.tok.decode([i for i, m in zip(ids, mask) if m])
    assert said.count("<tool_call>") == 2 + 2 * len(gold_hunks(task))  # run, reads; edits, submit
    assert '"submit"' in said and "$ pytest" in tok.tok.decode([i for i, m in zip(ids, mask)
                                                                 if not m])
    one_turn = make_env("repo", {"repos": ["inflection"], "max_turns": 1,
                                 "action_format": "tools"})
    assert one_turn.demo_tool_calls(task) is None  # two turns do not fit in one
