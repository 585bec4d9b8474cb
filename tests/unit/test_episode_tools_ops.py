"""The ops kind with `action_format: tools` in the one episode loop (`play`), in Qwen2.5's real
chat template (it renders `tools=` itself) over SmolLM2-135M-Instruct's real tokenizer: a
scripted policy (tokens drawn from the real tokenizer, not a model) first sends a call that is
not JSON, reads the tool message that says so, then calls `shell` with the task's reference
script, which the real ops sandbox runs and its probes grade. The row keeps each call's outcome
(`tool_calls`) and the mask keeps the sampled tokens in the loss and the tool message out."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from envs.base import EnvError
from envs.registry import make_env
from flows.config import load_config
from flows.episode_exec import step_local
from flows.episodes import play
from flows.scoring import episode_metrics, episode_rows
from flows.scripted import replay_policy
from sandbox.config import SandboxConfig
from sandbox.probe import probe
from sandbox.rootfs import unavailable
from storage.schema import rows_to_table

QWEN25 = Path(__file__).parents[2] / "configs" / "chat_templates" / "qwen2_5.jinja"
WHY = unavailable(probe())
BAD = '<tool_call>\n{"name": "shell", "arguments": {"script": "echo hi"}\n</tool_call>'


@pytest.fixture(scope="module")
def tok(smollm2_dir):
    from training.tokenizer import load_tokenizer

    return load_tokenizer(str(smollm2_dir), chat_template=str(QWEN25))  # policy.chat_template's path


def call(name, **args):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


@pytest.mark.skipif(WHY is not None, reason=WHY or "")
def test_ops_through_tools_solves_after_a_malformed_call_and_the_row_keeps_each_outcome(tok):
    cfg = load_config(None, [])
    env = make_env("ops", {"tasks_per_family": 1, "action_format": "tools", "max_turns": 2})
    task = env.generate()[0]
    drawn: dict = {}
    turns = {task.task_id: [BAD, "Here is the script.\n" + call("shell", script=task.reference)]}
    scfg = SandboxConfig(timeout_s=10)
    eps = play([task], [env], 1, 4096, tok, 512, replay_policy(tok, turns, drawn),
               lambda turn, items: step_local(items, scfg, cfg.rewards))
    e = eps[0]
    assert e.grade.solved, e.grade
    assert e.final["end_reason"] == "answer" and e.turns == 2
    assert "not valid JSON" in e.observations[0] and "[turn 1/2]" in e.observations[0]
    assert [m["role"] for m in e.chat.messages] == ["user", "assistant", "tool", "assistant"]
    assert e.chat.r.supports_tools  # Qwen2.5 renders the declarations itself
    # the loss sees the sampled ids and log-probs as drawn, and nothing else
    t = e.tokens
    assert [(i, lp) for i, lp, m in zip(t.ids, t.logprobs, t.mask) if m] == \
        [p for ids, lps in drawn[task.task_id] for p in zip(ids, lps)]
    env_ids = [i for i, m in zip(t.ids, t.mask) if not m]
    assert "not valid JSON" in tok.tok.decode(env_ids) and "<tool_response>" in tok.tok.decode(env_ids)
    assert e.chat.check().equal
    row = episode_rows(cfg, 0, 0, eps, 1, cfg.hash())[0]
    assert row.completion_mask == t.mask and row.turns == 2
    n = len(task.payload["probes"]) + 1  # each probe and idempotence
    assert row.tool_calls == [
        {"turn": 1, "name": "shell", "status": "malformed", "tests_passed": None,
         "tests_total": None, "detail": row.tool_calls[0]["detail"]},
        {"turn": 2, "name": "shell", "status": "ran", "detail": "", "tests_passed": n,
         "tests_total": n}]
    assert "not valid JSON" in row.tool_calls[0]["detail"]
    stored = rows_to_table([row], 0, 0)  # noqa: F841 (read by DuckDB below)
    got = duckdb.sql("SELECT c.turn, c.status, c.tests_passed FROM "
                     "(SELECT UNNEST(tool_calls) AS c FROM stored) ORDER BY c.turn").fetchall()
    assert got == [(1, "malformed", None), (2, "ran", n)]
    m = episode_metrics(eps)
    assert m["episode/tool_valid_rate"] == 0.5 and m["episode/tool_calls_mean"] == 2


@pytest.mark.skipif(WHY is not None, reason=WHY or "")
def test_ops_through_tools_grades_the_empty_script_when_the_last_turn_has_no_valid_call(tok):
    cfg = load_config(None, [])
    env = make_env("ops", {"tasks_per_family": 1, "action_format": "tools", "max_turns": 1})
    task = env.generate()[0]
    eps = play([task], [env], 1, 4096, tok, 512, replay_policy(tok, {task.task_id: [BAD]}, {}),
               lambda turn, items: step_local(items, SandboxConfig(timeout_s=10), cfg.rewards))
    e = eps[0]
    assert e.final["end_reason"] == "max_turns" and e.grade.reward == 0 and not e.grade.solved
    row = episode_rows(cfg, 0, 0, eps, 1, cfg.hash())[0]
    assert [c["status"] for c in row.tool_calls] == ["malformed"]
    assert row.completion_mask == [1] * len(e.tokens.ids)  # one turn: all sampled
    assert episode_metrics(eps)["episode/tool_valid_rate"] == 0.0


def test_ops_tools_options_are_refused_by_name_where_they_cannot_work():
    with pytest.raises(EnvError, match="max_turns=2 with action_format='xml'"):
        make_env("ops", {"max_turns": 2})
    from training.tokenizer import ByteTokenizer

    env = make_env("ops", {"tasks_per_family": 1, "action_format": "tools"})
    with pytest.raises(ValueError, match="needs a policy tokenizer with a chat template"):
        play(env.generate()[:1], [env], 1, 4096, ByteTokenizer(), 64, None, None)


@pytest.mark.skipif(WHY is not None, reason=WHY or "")
def test_the_warm_starts_ops_demonstrations_are_the_reference_as_a_shell_call_that_solves(tok):
    """flows/warm_start.py `replayed_tool_demos`: each training task's reference script as a
    `shell` call in the template, replayed through the loop and the real ops sandbox; the
    encoded episode is the template's rendering of the task plus the call's tokens, all in the
    loss (one turn), and only solving episodes are kept."""
    from flows.warm_start import replayed_tool_demos

    cfg = load_config(None, ["policy.max_len=2048", "sampling.max_new_tokens=512"])
    env = make_env("ops", {"tasks_per_family": 1, "action_format": "tools"})
    tasks = env.sft_tasks()[:3]
    broken = tasks[2].model_copy(update={"reference": "exit 0\n"})  # leaves the state as is
    scfg = SandboxConfig(timeout_s=10)
    demos = replayed_tool_demos(cfg, env, tasks[:2] + [broken], tok,
                                lambda turn, items: step_local(items, scfg, cfg.rewards))
    assert len(demos) == 2
    short = load_config(None, ["policy.max_len=2048", "sampling.max_new_tokens=8"])
    assert replayed_tool_demos(short, env, tasks[:2], tok, None) == []  # longer than a turn
    for (prompt, ids, mask), task in zip(demos, tasks):
        assert mask == [1] * len(ids) and ids[-1] == tok.eos_token_id
        reply = tok.decode(ids[:-1])
        assert reply == call("shell", script=task.reference)
        assert task.prompt.splitlines()[0] in tok.decode(prompt)
