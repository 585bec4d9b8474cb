"""The agent kind with `action_format: tools` in the one episode loop (`play`): the episode is a
conversation in SmolLM2-135M-Instruct's real chat template, the policy calls tools (a scripted
policy whose tokens are drawn from the real tokenizer, not a model), the calls run through the
kind's own episode code in the real process sandbox and the hidden-test grader, each turn's
result comes back as a tool message, and the trainer's tokens are the sampled ones as drawn."""
from __future__ import annotations

import json
import pickle

import pytest

from envs.registry import make_env
from flows.config import load_config
from flows.episodes import play
from flows.scoring import episode_metrics, episode_rows
from flows.scripted import full_function
from storage.schema import rows_to_table
from training.generate import Sample
from training.tokenizer import ByteTokenizer

EDGES = ["max_or", "digit_sum"]  # edge-case families: a visible example holds the edge
WRONG = "    return None\n"  # a first attempt that fails the visible examples


@pytest.fixture(scope="module")
def tok(smollm2_dir):
    from training.tokenizer import load_tokenizer

    return load_tokenizer(str(smollm2_dir))


@pytest.fixture(scope="module")
def cfg():
    return load_config(None, ["episodes.enabled=true", "episodes.max_turns=3"])


@pytest.fixture(scope="module")
def tasks():
    ts = make_env("agent", {"sft_demos": False, "procedural": {
        "families": EDGES, "tasks_per_family": 3}}).generate()
    return [next(t for t in ts if t.family == f) for f in EDGES]


def _call(name, **args):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


def tool_policy(tok, drawn, first_turn=None):
    """Turn 1 writes a wrong body and runs the visible tests; after a FAIL it writes the
    reference and submits, else it submits. Every draw is kept in `drawn`."""
    def fn(turn, contexts, episodes, _max_new, _k):
        out = []
        for ctx, e in zip(contexts, episodes):
            last = e.observations[-1] if e.observations else ""
            if turn == 1:
                text = first_turn or (_call("write_file", path="solution.py", content=full_function(
                    e.task, WRONG)) + "\n" + _call("run_tests"))
            elif "FAIL" in last:
                text = _call("write_file", path="solution.py",
                             content=full_function(e.task, e.task.reference)) + _call("submit")
            else:
                text = _call("submit")
            ids = tok.encode(text, bos=False) + [tok.eos_token_id]
            lps = [-(i + 1) / 1000 for i in range(len(ids))]
            drawn.setdefault(e.task.task_id, []).append((ids, lps))
            out.append(Sample(list(ctx), ids, lps, text, True))
        return out, 0.0
    return fn


@pytest.fixture(scope="module")
def step(cfg, worker_step):
    return worker_step(cfg)


def _play(cfg, step, tok, tasks, policy, **options):
    env = make_env("agent", {**cfg.episodes.model_dump(mode="json"), "action_format": "tools",
                             "sft_demos": False, **options})
    return play(tasks, [env] * len(tasks), 1, 2048, tok, 256, policy, step)


def test_tools_episodes_run_through_the_kinds_own_code_and_train_on_the_drawn_tokens(cfg, tok,
                                                                                    tasks, step):
    drawn: dict = {}
    eps = _play(cfg, step, tok, tasks, tool_policy(tok, drawn))
    for e in eps:
        assert "FAIL" in e.observations[0] and e.final["end_reason"] == "submit"
        assert e.grade.solved, (e.task.task_id, e.grade)
        t = e.tokens
        policy = [(i, lp) for i, lp, m in zip(t.ids, t.logprobs, t.mask) if m]
        assert policy == [p for ids, lps in drawn[e.task.task_id] for p in zip(ids, lps)]
        assert e.chat.check().equal  # SmolLM2's template is prefix-stable here
        # one tool message per call that ran: the write's, then the visible tests' (with the
        # turn's counter), as a Hermes-style template expects one response per call
        assert [m["role"] for m in e.chat.messages] == ["system", "user", "assistant", "tool",
                                                        "tool", "assistant"]
        assert e.chat.messages[3]["content"].startswith("wrote solution.py")
        write, tests = (m["content"] for m in e.chat.messages[3:5])
        assert "FAIL" in tests and "[turn 1/" in tests
        assert e.observations[0] == write + "\n" + tests
        assert "write_file" in e.chat.messages[0]["content"]  # tools as text: no tools= support
        assert e.tool_calls == 4 and e.malformed_calls == 0
    m = episode_metrics(eps)
    assert m["episode/tool_valid_rate"] == 1.0 and m["episode/chat_prefix_stable"] == 1.0
    rows = episode_rows(cfg, 0, 0, eps, 1, cfg.hash())
    assert rows_to_table(rows, 0, 0).num_rows == len(eps)
    assert all(r.completion_mask == e.tokens.mask for r, e in zip(rows, eps))
    for r in rows:  # each call's outcome; run_tests carries the visible counts it saw fail
        assert [(c["turn"], c["name"], c["status"]) for c in r.tool_calls] == [
            (1, "write_file", "ran"), (1, "run_tests", "ran"), (2, "write_file", "ran"),
            (2, "submit", "ran")]
        seen = r.tool_calls[1]
        assert 0 <= seen["tests_passed"] < seen["tests_total"]


def test_a_malformed_call_is_an_observation_saying_why_and_the_episode_goes_on(cfg, tok, tasks,
                                                                              step):
    drawn: dict = {}
    bad = '<tool_call>\n{"name": "write_file", "arguments": {"path": "solution.py"}\n</tool_call>'
    eps = _play(cfg, step, tok, tasks[:1], tool_policy(tok, drawn, first_turn=bad))
    e = eps[0]
    assert e.state.history[0]["action"] == "malformed"
    assert "tool calls cannot run" in e.observations[0] and "not valid JSON" in e.observations[0]
    assert e.malformed_calls == 1 and e.final["end_reason"] == "submit"
    first = episode_rows(cfg, 0, 0, eps, 1, cfg.hash())[0].tool_calls[0]
    assert (first["turn"], first["name"], first["status"]) == (1, "write_file", "malformed")
    assert "not valid JSON" in first["detail"]
    assert episode_metrics(eps)["episode/tool_valid_rate"] == pytest.approx(1 - 1 / e.tool_calls)


def test_tools_need_a_chat_template_and_xml_stays_the_default(cfg, tasks, step):
    assert make_env("agent", cfg.episodes.model_dump(mode="json")).tool_kind is None
    assert make_env("agent", {"action_format": "tools"}).config.sft_demos  # tool-call demos
    with pytest.raises(ValueError, match="needs a policy tokenizer with a chat template"):
        _play(cfg, step, ByteTokenizer(), tasks[:1], tool_policy(ByteTokenizer(), {}))


def test_the_warm_starts_tool_call_demonstrations_are_solving_episodes_of_the_loop(
        cfg, tok, monkeypatch, worker_step):
    """flows/warm_start.py `tool_demos`: the scripted turns (a naive attempt and run_tests,
    then the reference and submit) as Hermes tool calls, played by the run's own loop through
    the real sandbox and grader in SmolLM2's template; each demonstration is a solving episode's
    tokens, the calls in its policy turns valid, the real test output in its tool messages."""
    import flows.warm_start as ws
    from envs.sources import SourceConfig
    from envs.toolcalls import parse_tool_calls

    monkeypatch.setattr(ws, "_policy_tokenizer", lambda _cfg: tok)
    monkeypatch.setattr(ws, "_step_fn", worker_step)  # in this process, not on a Dask cluster
    src = SourceConfig(kind="agent", options={
        "action_format": "tools", "max_turns": 3, "demo_first_try_share": 0.0,
        "procedural": {"families": EDGES, "tasks_per_family": 2, "sft_variants": 1}})
    env = src.environment()
    tasks = [t for t in env.sft_tasks() if t.reference][:3]
    run_cfg = load_config(None, ["policy.max_len=2048"])
    demos = ws.tool_demos(run_cfg, src, env, tasks)
    assert len(demos) == len(tasks)
    for prompt, ids, mask in demos:
        assert len(ids) == len(mask) and prompt[-3:] != ids[:3]
        runs, cur = [], []  # the policy's turns: the runs of mask 1
        for t, m in zip(ids, mask):
            if m:
                cur.append(t)
            elif cur:
                runs, cur = runs + [cur], []
        runs += [cur] if cur else []
        assert len(runs) == 2  # a naive first attempt, then the fix
        turns = [parse_tool_calls(tok.decode(r[:-1]), "hermes") for r in runs]
        assert [[c.name for c in p.calls] for p in turns] == [["write_file", "run_tests"],
                                                              ["write_file", "submit"]]
        env_text = tok.decode([t for t, m in zip(ids, mask) if not m])
        assert "FAIL" in env_text  # the real visible-test output of the naive attempt


def test_tools_episodes_hash_into_the_score_stages_cache_key(cfg, tok, tasks, step):
    """A tools episode carries its conversation (`Episode.chat`); the score stage's cache key is
    built from the episodes, and a ChatEpisode was refused there (seen in a real run: Prefect
    logged the error and stored no result). Its key is its content: the same for a copy made
    elsewhere in memory, another for another conversation."""
    from flows import stages

    eps = _play(cfg, step, tok, tasks[:1], tool_policy(tok, {}))
    key = stages.inputs_digest({"episodes": eps})
    assert stages.inputs_digest({"episodes": pickle.loads(pickle.dumps(eps))}) == key
    eps[0].chat.messages[1]["content"] += " "
    assert stages.inputs_digest({"episodes": eps}) != key
