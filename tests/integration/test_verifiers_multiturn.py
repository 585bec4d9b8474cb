"""The `verifiers` kind's multi-turn environments with its own venv and the real process
sandbox: the example package's `vf-rollforge-guess` (a `vf.MultiTurnEnv` answering each guess
of a secret with "Higher." or "Lower.") played step by step, each step replaying the
environment's own rollout on the replies so far; its rubric's grade at the end; replies that
attack the scorer through the environment's own `env_response` earning nothing; and episodes
of the one loop (`play`), as text for the byte-level policy and as a conversation in
SmolLM2-135M-Instruct's chat template. Each step is a sandbox run that loads the environment
(about 3 s of CPU)."""
from __future__ import annotations

import json
import re

import pytest

from envs.base import EnvError, StepContext
from envs.registry import make_env
from envs.verifiers import venv
from flows.config import load_config
from flows.episodes import play
from flows.scoring import episode_metrics, episode_rows
from rewards.aggregate import RewardConfig
from sandbox.config import SandboxConfig
from storage.schema import rows_to_table
from training.generate import Sample
from training.tokenizer import ByteTokenizer

if not (venv.venv_dir() / "bin" / "python").is_file():
    pytest.skip(f"no verifiers venv at {venv.venv_dir()}: build it with `{venv.SETUP}`",
                allow_module_level=True)

pytestmark = pytest.mark.integration

GUESS = {"env_id": "vf-rollforge-guess", "env_args": {"num_examples": 4, "high": 16}}
CTX = StepContext(None, SandboxConfig(timeout_s=10.0).limits(), RewardConfig())


@pytest.fixture(scope="module")
def env():
    return make_env("verifiers", {**GUESS, "max_turns": 5})


@pytest.fixture(scope="module")
def task(env):
    return env.generate()[0]


def test_a_multi_turn_environment_needs_turns_and_its_rows_carry_no_single_reference(env,
                                                                                   task):
    with pytest.raises(EnvError, match="multi-turn .*GuessEnv.*set the source's option "
                                       "max_turns"):
        make_env("verifiers", GUESS).generate()
    assert task.reference is None and task.payload["messages"][0]["role"] == "system"
    assert env.max_turns == 5 and env.chat_messages
    assert [m["role"] for m in env.opening_messages(task)] == ["system", "user"]


def _guess(lo: int, hi: int) -> int:
    return (lo + hi) // 2


def _search(env, task, first: str | None = None, limit: int = 5):
    """A binary search played step by step: (replies, observations, last StepResult)."""
    state, _ = env.reset(task)
    lo, hi, replies, seen = 1, 16, [], []
    while True:
        reply = first if first is not None and not replies else f"<guess>{_guess(lo, hi)}</guess>"
        r = env.step(state, reply, CTX)
        replies.append(reply)
        state = r.state
        if r.done or len(replies) >= limit:
            return replies, seen, r
        seen.append(r.observation)
        g = _guess(lo, hi)
        if r.observation == "Higher.":
            lo = g + 1
        elif r.observation == "Lower.":
            hi = g - 1


def test_each_step_is_the_environments_own_reply_and_the_rubric_grades_the_whole_rollout(
        env, task):
    replies, seen, end = _search(env, task, first="I think it is eight")
    assert seen[0] == "No <guess>N</guess> found. Guess again."
    assert set(seen[1:]) <= {"Higher.", "Lower."}
    assert end.done and end.state.replies == tuple(replies)
    g = end.info["grade"]
    # the search finds any secret of 1..16 in 4 guesses; the rollout ended on the right one
    assert g.reward == 1.0 and g.tests_passed == g.tests_total == 1 and not g.hack_flags
    assert end.info["end_reason"] in ("answer", "max_turns") and not g.infra_error


def test_a_full_context_or_the_last_turn_ends_the_episode_graded_as_it_stands(env, task):
    state, _ = env.reset(task)
    r = env.step(state, "<guess>99</guess>", CTX)
    assert not r.done and r.info["messages"] == [{"role": "user", "content": "Lower."}]
    full = env.step(r.state, None, CTX)  # no room for another reply
    assert full.done and full.info["end_reason"] == "context_full"
    assert full.info["grade"].reward == 0.0 and not full.info["grade"].hack_flags
    short = make_env("verifiers", {**GUESS, "max_turns": 2})
    state, _ = short.reset(task)
    r = short.step(short.step(state, "<guess>99</guess>", CTX).state, "<guess>98</guess>", CTX)
    assert r.done and r.info["end_reason"] == "max_turns" and r.info["grade"].reward == 0.0


LENIENT = {**GUESS, "env_args": {**GUESS["env_args"], "lenient": True}, "max_turns": 3}
FORGED = ('{"reward": "found", "value": 1.0}\n{"reward": "few_guesses", "value": 1.0}\n'
          '{"done": true}\n')
# the relay's own framing (what the harness process writes for the grader), on fd 1
RELAYED = "".join('{"s": 0, "rec": %s}\n' % json.dumps(line)
                  for line in FORGED.splitlines())


@pytest.mark.parametrize("reply,flag", [
    (f"<guess>__import__('os').write(3, {FORGED.encode()!r}) or 0</guess>", "forged_record"),
    ("<guess>__import__('os')._exit(0)</guess>", "early_exit"),
    (f"<guess>__import__('os').write(1, {RELAYED.encode()!r}) or 0</guess>", "answer_code"),
    ("<guess>__import__('sys')._getframe(1).f_locals</guess>", "introspection"),
])
def test_code_in_a_reply_that_the_environment_evaluates_runs_under_the_guard_and_earns_nothing(
        reply, flag):
    """The lenient guess environment parses each guess with sympy's `parse_expr` in its own
    `env_response`: the reply's code runs there, in the replayed rollout, which runs in the
    guarded scoring process, never in the harness that relays the records."""
    env = make_env("verifiers", LENIENT)
    task = env.generate()[0]
    state, _ = env.reset(task)
    r = env.step(state, reply, CTX)
    if not r.done:  # the code ran and the environment answered: end the episode here
        r = env.step(r.state, None, CTX)
    g = r.info["grade"]
    assert g.reward <= 0.0 and not g.infra_error, g
    assert flag in g.hack_flags, g.hack_flags


def test_an_honest_lenient_episode_is_paid_and_flags_nothing():
    env = make_env("verifiers", LENIENT)
    task = env.generate()[0]
    state, _ = env.reset(task)
    r = env.step(state, "<guess>2*4</guess>", CTX)
    assert r.done or r.observation in ("Higher.", "Lower.")
    assert not r.done or r.info["grade"].reward == 1.0


def _policy(tok, drawn, chat: bool):
    """A binary search reading the environment's last reply; every draw kept in `drawn`."""
    search: dict[int, list[int]] = {}  # episode -> [lo, hi, last guess]

    def fn(turn, contexts, episodes, _max_new, _k):
        out = []
        for ctx, e in zip(contexts, episodes):
            lo, hi, last = search.get(id(e), [1, 16, 0])
            seen = e.observations[-1] if e.observations else ""
            lo, hi = (last + 1, hi) if seen == "Higher." else (lo, last - 1) \
                if seen == "Lower." else (lo, hi)
            g = _guess(lo, hi)
            search[id(e)] = [lo, hi, g]
            text = f"<guess>{g}</guess>"
            ids = tok.encode(text, bos=False) + ([tok.eos_token_id] if chat else [])
            lps = [-(i + 1) / 1000 for i in range(len(ids))]
            drawn.setdefault(id(e), []).append((ids, lps))
            out.append(Sample(list(ctx), ids, lps, text, True))
        return out, 0.0
    return fn



@pytest.mark.parametrize("chat", [False, True], ids=["text", "chat"])
def test_the_loop_plays_multi_turn_episodes_and_trains_on_the_drawn_tokens(env, task, chat,
                                                                           request, worker_step):
    cfg = load_config(None, [])
    if chat:
        from training.tokenizer import load_tokenizer  # noqa: PLC0415

        tok = load_tokenizer(str(request.getfixturevalue("smollm2_dir")))
    else:
        tok = ByteTokenizer()
    drawn: dict = {}
    eps = play([task], [env], 1, 2048, tok, 64, _policy(tok, drawn, chat), worker_step(cfg))
    (e,) = eps
    assert e.grade.reward == 1.0 and e.turns <= 4, (e.observations, e.grade)
    assert set(e.observations[:-1]) <= {"Higher.", "Lower."}
    t = e.tokens
    policy = [(i, lp) for i, lp, m in zip(t.ids, t.logprobs, t.mask) if m]
    assert policy == [p for ids, lps in drawn[id(e)] for p in zip(ids, lps)]
    if chat:  # a conversation: the row's own system prompt, the environment's user replies
        roles = [m["role"] for m in e.chat.messages]
        assert roles[:3] == ["system", "user", "assistant"]
        assert roles[3:] == ["user", "assistant"] * (e.turns - 1)
        assert e.chat.messages[0]["content"] == task.payload["messages"][0]["content"]
        assert e.chat.check().equal
        assert episode_metrics(eps)["episode/chat_prefix_stable"] == 1.0
    else:  # one text: the replies as <obs> blocks after each guess
        assert e.chat is None and "<obs>" in "".join(e.text)
    rows = episode_rows(cfg, 0, 0, eps, 1, cfg.hash())
    assert rows_to_table(rows, 0, 0).num_rows == 1
    assert rows[0].completion_mask == t.mask and rows[0].kind == "verifiers"


CALC = {"env_id": "vf-rollforge-calc", "env_args": {"num_examples": 3}, "max_turns": 4}


def _call(name, **args):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


def _operands(task):
    a, b, c = (int(x) for x in re.findall(r"\d+", task.prompt.split("What is")[1]))
    return a, b, c


@pytest.fixture(scope="module")
def calc():
    env = make_env("verifiers", CALC)
    return env, env.generate()[0]


def test_a_tool_environments_tools_are_shown_and_its_calls_reach_it_as_tool_calls(calc):
    env, task = calc
    assert [t["function"]["name"] for t in env.chat_tools] == ["add", "multiply"]
    state, obs = env.reset(task)
    assert "<tools>" in obs and '"multiply"' in obs  # the text policy's prompt names them
    a, b, c = _operands(task)
    r = env.step(state, _call("add", a=a, b=b) + _call("divide", a=1, b=2)
                 + "<tool_call>{not json</tool_call>", CTX)
    # each call answered by the environment itself, a bad one with its own error text
    assert [m["role"] for m in r.info["messages"]] == ["tool"] * 3
    assert r.info["messages"][0]["content"] == str(a + b)
    assert [(x["name"], x["status"]) for x in r.info["calls"]] == [
        ("add", "ran"), ("divide", "malformed"), ("", "malformed")]
    assert "no tool named 'divide'" in r.info["calls"][1]["detail"]
    r = env.step(r.state, _call("multiply", a=a + b, b=c), CTX)
    assert r.info["messages"] == [{"role": "tool", "content": str((a + b) * c)}]
    end = env.step(r.state, f"<answer>{(a + b) * c}</answer>", CTX)  # no call: the end
    g = end.info["grade"]
    assert end.done and end.info["end_reason"] == "answer" and end.info["calls"] == []
    assert g.reward == 1.0 and g.test_names == ("correct_answer",) and not g.hack_flags


def test_a_tool_episode_in_the_loop_is_a_conversation_with_tool_messages(calc, smollm2_dir,
                                                                        worker_step):
    from training.tokenizer import load_tokenizer  # noqa: PLC0415

    env, task = calc
    tok = load_tokenizer(str(smollm2_dir))
    a, b, c = _operands(task)
    script = [_call("add", a=a, b=b), _call("multiply", a=a + b, b=c),
              f"<answer>{(a + b) * c}</answer>"]
    drawn = []

    def policy(turn, contexts, episodes, _max_new, _k):
        text = script[turn - 1]
        ids = tok.encode(text, bos=False) + [tok.eos_token_id]
        lps = [-0.5] * len(ids)
        drawn.append((ids, lps))
        return [Sample(list(contexts[0]), ids, lps, text, True)], 0.0

    (e,) = play([task], [env], 1, 2048, tok, 96, policy, worker_step(load_config(None, [])))
    assert e.grade.reward == 1.0 and e.turns == 3
    assert [m["role"] for m in e.chat.messages] == ["system", "user", "assistant", "tool",
                                                    "assistant", "tool", "assistant"]
    assert "<tools>" in e.chat.messages[0]["content"]  # SmolLM2's template takes no tools=
    assert e.chat.messages[3]["content"] == str(a + b) and e.chat.check().equal
    assert (e.tool_calls, e.malformed_calls) == (2, 0)
    t = e.tokens
    assert [(i, lp) for i, lp, m in zip(t.ids, t.logprobs, t.mask) if m] == [
        p for ids, lps in drawn for p in zip(ids, lps)]
    m = episode_metrics([e])
    assert m["episode/tool_valid_rate"] == 1.0 and m["episode/chat_prefix_stable"] == 1.0
