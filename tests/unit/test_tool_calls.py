"""Tool calls in the model's format (envs/toolcalls.py) and the kinds' tools (envs/tools.py):
calls come back in order, a malformed one is a value that says what is wrong, and a checked
call becomes the action text the kind's own parser reads."""
import json
import math

import pytest

from envs.toolcalls import Malformed, ToolCall, call_metrics, parse_hermes, parse_json, \
    parse_tool_calls
from envs.tools import TOOLS, action_text, check_call, schemas


def test_hermes_calls_come_back_in_order_with_the_text_around_them_as_content():
    text = ('Let me check.\n<tool_call>\n{"name": "write_file", "arguments": {"path": "a.py", '
            '"content": "x = 1\\n"}}\n</tool_call>\nthen\n<tool_call>{"name": "run_tests", '
            '"arguments": {}}</tool_call>')
    turn = parse_hermes(text)
    assert [c.name for c in turn.calls] == ["write_file", "run_tests"]
    assert turn.calls[0].arguments == {"path": "a.py", "content": "x = 1\n"}
    assert turn.content == "Let me check.\n\nthen"
    assert (turn.valid, turn.malformed) == (2, 0)


def test_a_call_with_bad_json_is_a_value_naming_where_and_the_other_calls_still_count():
    text = ('<tool_call>{"name": "run", "arguments": {"command": "python a.py",}}</tool_call>'
            '<tool_call>{"name": "submit"}</tool_call>')
    turn = parse_hermes(text)
    bad, ok = turn.calls
    assert isinstance(bad, Malformed) and "not valid JSON" in bad.reason and "column" in bad.reason
    assert ok == ToolCall("submit", {}, '{"name": "submit"}')
    assert (turn.valid, turn.malformed) == (1, 1)


@pytest.mark.parametrize("text, reason", [
    ('<tool_call>{"name": "submit", "arguments": {}}', "unclosed <tool_call>"),
    ('done</tool_call>', "without a <tool_call> before it"),
    ('<tool_call>{"name": "a"}<tool_call>{"name": "b"}</tool_call>', "not closed before the next"),
    ('<tool_call>{"arguments": {}}</tool_call>', 'no "name"'),
    ('<tool_call>{"name": "run", "arguments": [1]}</tool_call>', "must be a JSON object, got list"),
    ('<tool_call>{"name": "run", "arguments": "{oops"}</tool_call>', "string that is not JSON"),
    ('<tool_call>[]</tool_call>', "an empty list of calls"),
])
def test_each_way_a_hermes_call_can_be_wrong_is_named(text, reason):
    turn = parse_hermes(text)
    assert turn.malformed >= 1
    assert any(reason in c.reason for c in turn.calls if isinstance(c, Malformed))


def test_arguments_given_as_a_json_string_or_as_parameters_are_read():
    turn = parse_hermes('<tool_call>{"name": "run", "arguments": "{\\"command\\": \\"python a.py\\"}"}'
                        '</tool_call><tool_call>{"name": "run", "parameters": {"command": "x"}}'
                        '</tool_call>')
    assert [c.arguments for c in turn.calls] == [{"command": "python a.py"}, {"command": "x"}]


def test_a_list_of_calls_inside_one_tag_is_read_in_order():
    turn = parse_hermes('<tool_call>[{"name": "run_tests", "arguments": {}}, '
                        '{"name": "submit", "arguments": {}}]</tool_call>')
    assert [c.name for c in turn.calls] == ["run_tests", "submit"]


@pytest.mark.parametrize("text", [
    '{"name": "run_tests", "arguments": {}}\n{"name": "submit", "arguments": {}}',
    '[{"name": "run_tests", "arguments": {}}, {"name": "submit", "arguments": {}}]',
    '```json\n[{"name": "run_tests"}, {"name": "submit"}]\n```',
])
def test_plain_json_calls_as_objects_a_list_or_a_fenced_list(text):
    turn = parse_json(text)
    assert [c.name for c in turn.calls] == ["run_tests", "submit"] and turn.malformed == 0


def test_plain_json_names_bad_json_and_text_after_the_calls_and_prose_holds_no_call():
    assert parse_json("I think the answer is 4.").calls == ()
    bad = parse_json('{"name": "submit", "arguments": {')
    assert bad.malformed == 1 and "at character 0" in bad.calls[0].reason
    tail = parse_json('{"name": "submit"} and that is all')
    assert tail.valid == 1 and "text after the calls" in tail.calls[1].reason


def test_an_unknown_format_is_refused_and_metrics_count_calls_and_malformed_ones():
    with pytest.raises(ValueError, match="hermes"):
        parse_tool_calls("x", "xml")
    turns = [parse_hermes('<tool_call>{"name": "submit"}</tool_call><tool_call>{</tool_call>'),
             parse_hermes("no call")]
    m = call_metrics(turns)
    assert m["tools/calls"] == 2 and m["tools/malformed"] == 1 and m["tools/valid_rate"] == 0.5
    assert m["tools/turns_without_call"] == 0.5 and math.isnan(call_metrics([])["tools/valid_rate"])


def test_declarations_are_the_shape_apply_chat_template_takes_and_json_serialisable():
    for kind in TOOLS:
        for s in schemas(kind):
            assert s["type"] == "function" and s["function"]["parameters"]["type"] == "object"
        json.dumps(schemas(kind))
    with pytest.raises(KeyError, match="kinds with tools"):
        schemas("io")


@pytest.mark.parametrize("call, reason", [
    (ToolCall("delete", {}), "unknown tool 'delete'"),
    (ToolCall("write_file", {"path": "a.py"}), "missing argument(s) ['content']"),
    (ToolCall("run", {"command": 3}), "'command' must be string, got int"),
    (ToolCall("submit", {"now": True}), "unknown argument(s) ['now']"),
])
def test_a_call_that_does_not_fit_its_tool_is_malformed_saying_why(call, reason):
    out = check_call("agent", call)
    assert isinstance(out, Malformed) and reason in out.reason


def test_agent_calls_become_the_agent_kinds_actions_for_its_own_parser():
    from envs.agent.episode import Action, parse_actions

    calls = list(parse_hermes(
        '<tool_call>{"name": "write_file", "arguments": {"path": "solution.py", '
        '"content": "def f(x):\\n    return x\\n"}}</tool_call>'
        '<tool_call>{"name": "run", "arguments": {"command": "python solution.py 1"}}</tool_call>'
        '<tool_call>{"name": "run_tests", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "submit", "arguments": {}}</tool_call>').calls)
    text, refused = action_text("agent", calls)
    assert refused == []
    assert parse_actions(text, {"solution.py": ""}) == [
        Action("write", path="solution.py", body="def f(x):\n    return x\n"),
        Action("run", argv=("solution.py", "1")), Action("run_tests"), Action("submit")]


def test_a_body_holding_its_verbs_closing_tag_is_refused_not_cut_short():
    text, refused = action_text("agent", [
        ToolCall("write_file", {"path": "a.py", "content": "s = '</write>'\n"}),
        ToolCall("run_tests", {})])
    assert text == "<run_tests/>" and "'</write>'" in refused[0].reason


def test_repo_calls_become_the_repo_kinds_actions_for_its_own_parser():
    from envs.repo.actions import parse_actions

    calls = [ToolCall("ls", {}), ToolCall("read", {"path": "pkg/a.py", "start": 3, "end": 9}),
             ToolCall("search", {"pattern": "def f", "path": "pkg"}),
             ToolCall("edit", {"path": "pkg/a.py", "search": "x = 1", "replace": "x = 2"}),
             ToolCall("run", {"command": "pytest -q tests"}), ToolCall("submit", {})]
    text, refused = action_text("repo", calls)
    assert refused == []
    acts = parse_actions(text)
    assert [a[0] for a in acts] == ["ls", "read", "search", "edit", "run", "submit"]
    assert acts[1] == ("read", "pkg/a.py", 3, 9) and acts[4] == ("run", ("pytest", "-q", "tests"))
    assert "<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE" in acts[3][2]
    _, bad = action_text("repo", [ToolCall("read", {"path": "a.py", "start": 0})])
    assert "from 1" in bad[0].reason


def test_the_ops_shell_call_becomes_the_script_the_ops_kind_runs():
    from envs.ops.env import script_of

    script = "mkdir -p srv/www\necho hi > srv/www/index.html\n"
    text, refused = action_text("ops", [ToolCall("shell", {"script": script})])
    assert refused == [] and script_of(text) == script
