"""Tools: each kind that acts declares its verbs once, as data (name, JSON schema, description),
and says how a parsed call becomes the action its episode already runs.

A model with a chat template is shown these declarations (`schemas(kind)`, the OpenAI
`{"type": "function", "function": {...}}` shape that `apply_chat_template(tools=...)` takes) and
answers with tool calls in its own format (envs/toolcalls.py parses them). `action_text(kind,
calls)` then writes the calls as the kind's own action text (envs/agent/EPISODES.md: `<write>`,
`<run_tests/>`, `<run>`, `<submit/>`; the repo kind's `<ls/>`, `<read/>`, `<edit>`...; the ops
kind's script), so the one episode code behind each kind runs them unchanged and the XML verbs
stay the format of a model without a chat template. A call the action text cannot carry
(arguments of the wrong type, a body holding the closing tag of its verb) is refused here as a
`Malformed` value that says what is wrong, never raised.

The argument check is a small subset of JSON schema (object, required, property types, no
extra properties): enough for these declarations, without a dependency the run does not have.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping

from pydantic import BaseModel, Field

from envs.base import EnvError
from envs.toolcalls import Malformed, ToolCall, parse_tool_calls


@dataclass(frozen=True)
class Tool:
    """One verb a kind offers: `parameters` is a JSON schema of type object."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def schema(self) -> dict:
        """The declaration as `apply_chat_template(tools=[...])` and OpenAI's API take it."""
        return {"type": "function", "function": {"name": self.name,
                                                 "description": self.description,
                                                 "parameters": dict(self.parameters)}}


def _obj(required: tuple[str, ...] = (), **props: tuple[str, str]) -> dict:
    """A JSON schema object of `name=(type, description)` properties."""
    return {"type": "object", "additionalProperties": False, "required": list(required),
            "properties": {k: {"type": t, "description": d} for k, (t, d) in props.items()}}


_PATH = ("string", "a path relative to the workspace root")
AGENT_TOOLS = (
    Tool("write_file", "Create or replace a file of the workspace (solution.py holds the answer).",
         _obj(("path", "content"), path=_PATH, content=("string", "the whole new content"))),
    Tool("run_tests", "Run the task's visible examples against solution.py.", _obj()),
    Tool("run", "Run a Python file of the workspace: `python FILE.py ARGS`.",
         _obj(("command",), command=("string", "python FILE.py [ARGS...]"))),
    Tool("submit", "End the episode; hidden tests grade solution.py. Must be the last call.",
         _obj()),
)
REPO_TOOLS = (
    Tool("ls", "List the files under a folder of the repository.",
         _obj((), path=("string", "a folder (default: the root)"))),
    Tool("read", "Show lines of a file with their numbers (default 1..200).",
         _obj(("path",), path=_PATH, start=("integer", "first line"), end=("integer", "last line"))),
    Tool("search", "Lines matching a regular expression, as FILE:LINE: text.",
         _obj(("pattern",), pattern=("string", "a Python regular expression"),
              path=("string", "a folder or file (default: the root)"))),
    Tool("edit", "Replace text in a file: `search` must occur exactly once.",
         _obj(("path", "search", "replace"), path=_PATH, search=("string", "the old lines"),
              replace=("string", "the new lines"))),
    Tool("write_file", "Create or replace a file.",
         _obj(("path", "content"), path=_PATH, content=("string", "the whole new content"))),
    Tool("run", "Run `pytest ARGS` or `python ARGS` in the repository.",
         _obj(("command",), command=("string", "pytest ARGS | python ARGS"))),
    Tool("submit", "End the episode; the repository's tests grade it. Must be the last call.",
         _obj()),
)
OPS_TOOLS = (
    Tool("shell", "The bash script that brings the system to the required state (it is run "
                  "twice and must leave the same state).",
         _obj(("script",), script=("string", "a bash script"))),
)


def _closing(tag: str, **texts: str) -> str | None:
    """Why the action text cannot carry these arguments (one holds `tag`), or None."""
    for key, text in texts.items():
        if tag in text:
            return f"argument {key!r} holds {tag!r}, which would end the action early"
    return None


def _agent_action(call: ToolCall) -> str | Malformed:
    a = call.arguments
    if call.name == "write_file":
        bad = _closing("</write>", content=a["content"]) or _closing('"', path=a["path"])
        return Malformed(call.raw, bad) if bad else \
            f'<write path="{a["path"]}">\n{a["content"]}</write>'
    if call.name == "run":
        bad = _closing("</run>", command=a["command"])
        return Malformed(call.raw, bad) if bad else f"<run>{a['command']}</run>"
    return "<run_tests/>" if call.name == "run_tests" else "<submit/>"


def _repo_action(call: ToolCall) -> str | Malformed:
    a = call.arguments
    quoted = {k: v for k, v in a.items() if k in ("path", "pattern")}
    bad = next((f"argument {k!r} holds '\"', which the repo action format cannot carry"
                for k, v in quoted.items() if '"' in v), None)
    if bad:
        return Malformed(call.raw, bad)
    if call.name == "ls":
        return f'<ls path="{a.get("path", ".")}"/>'
    if call.name == "read":
        if any(a.get(k, 1) < 1 for k in ("start", "end")):
            return Malformed(call.raw, "read: start and end are line numbers, from 1")
        span = "".join(f' {k}="{a[k]}"' for k in ("start", "end") if k in a)
        return f'<read path="{a["path"]}"{span}/>'
    if call.name == "search":
        return f'<search pattern="{a["pattern"]}" path="{a.get("path", ".")}"/>'
    if call.name == "edit":
        bad = _closing("</edit>", search=a["search"], replace=a["replace"])
        return Malformed(call.raw, bad) if bad else (
            f'<edit path="{a["path"]}">\n<<<<<<< SEARCH\n{a["search"]}\n=======\n'
            f'{a["replace"]}\n>>>>>>> REPLACE\n</edit>')
    if call.name == "write_file":
        bad = _closing("</write>", content=a["content"])
        return Malformed(call.raw, bad) if bad else \
            f'<write path="{a["path"]}">\n{a["content"]}</write>'
    if call.name == "run":
        bad = _closing("</run>", command=a["command"])
        return Malformed(call.raw, bad) if bad else f"<run>{a['command']}</run>"
    return "<submit/>"


def _ops_action(call: ToolCall) -> str | Malformed:
    """The script as it is: a turn's shell calls joined are one script that runs them in
    order (envs/ops/env.py), and a fence inside one would make `script_of` read only it."""
    script = call.arguments["script"]
    bad = _closing("```", script=script)
    return Malformed(call.raw, bad) if bad else script.rstrip("\n") + "\n"


@dataclass(frozen=True)
class KindTools:
    """A kind's tools and the writer of one checked call as the kind's action text."""

    tools: tuple[Tool, ...]
    to_action: Callable[[ToolCall], "str | Malformed"]

    def get(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)


TOOLS: dict[str, KindTools] = {
    "agent": KindTools(AGENT_TOOLS, _agent_action),
    "repo": KindTools(REPO_TOOLS, _repo_action),
    "ops": KindTools(OPS_TOOLS, _ops_action),
}


def tools_of(kind: str) -> KindTools:
    if kind not in TOOLS:
        raise KeyError(f"kind {kind!r} declares no tools; kinds with tools: {sorted(TOOLS)}")
    return TOOLS[kind]


def schemas(kind: str) -> list[dict]:
    """The kind's tool declarations for `apply_chat_template(tools=...)`."""
    return [t.schema() for t in tools_of(kind).tools]


_TYPES = {"string": str, "integer": int, "boolean": bool, "number": (int, float),
          "object": dict, "array": list}


def check_arguments(tool: Tool, args: Mapping[str, Any]) -> str | None:
    """What is wrong with `args` for `tool` (the schema subset above), or None."""
    props = tool.parameters.get("properties", {})
    missing = [k for k in tool.parameters.get("required", []) if k not in args]
    if missing:
        return f"{tool.name}: missing argument(s) {missing}; it takes {sorted(props)}"
    extra = sorted(set(args) - set(props))
    if extra and tool.parameters.get("additionalProperties") is False:
        return f"{tool.name}: unknown argument(s) {extra}; it takes {sorted(props)}"
    for k, v in args.items():
        want = props.get(k, {}).get("type")
        py = _TYPES.get(want)
        if py and (not isinstance(v, py) or (want in ("integer", "number")
                                             and isinstance(v, bool))):
            return f"{tool.name}: argument {k!r} must be {want}, got {type(v).__name__} {v!r:.40}"
    return None


def check_call(kind: str, call: ToolCall | Malformed) -> ToolCall | Malformed:
    """`call` if it names one of the kind's tools with arguments that fit its schema, else a
    `Malformed` saying which."""
    if isinstance(call, Malformed):
        return call
    kt = tools_of(kind)
    tool = kt.get(call.name)
    if tool is None:
        return Malformed(call.raw, f"unknown tool {call.name!r}; the tools are "
                                   f"{[t.name for t in kt.tools]}")
    bad = check_arguments(tool, call.arguments)
    return Malformed(call.raw, bad) if bad else call


def _check_all(kind: str, calls: list[ToolCall | Malformed]
               ) -> tuple[list[str], list[ToolCall | Malformed]]:
    """The action text of each valid call, and every call checked (a call the action text
    cannot carry becomes the `Malformed` saying why), in order."""
    kt = tools_of(kind)
    parts: list[str] = []
    checked: list[ToolCall | Malformed] = []
    for c in calls:
        c = check_call(kind, c)
        out = c if isinstance(c, Malformed) else kt.to_action(c)
        if isinstance(out, Malformed):
            checked.append(out)
        else:
            parts.append(out)
            checked.append(c)
    return parts, checked


def action_text(kind: str, calls: list[ToolCall | Malformed]) -> tuple[str, list[Malformed]]:
    """The kind's action text for a turn's calls, in order, and the calls refused (checked
    here). The text holds the valid calls only; `read_turn` decides what a turn with refused
    calls does."""
    parts, checked = _check_all(kind, calls)
    return "\n".join(parts), [c for c in checked if isinstance(c, Malformed)]


class ToolOptions(BaseModel):
    """The options of a kind that can act through tools (its config inherits them)."""

    action_format: Literal["xml", "tools"] = Field(
        "xml", description="xml = actions in the kind's own text format (rollforge's verbs "
        "such as `<write>`, `<run>`, `<submit/>`; the ops kind's script) inside one token "
        "sequence, for a model without a chat template (the tiny default); tools = the episode "
        "as messages in the policy's chat template, the verbs as tools (envs/tools.py) called "
        "in `tool_format`, each turn's result a tool message, token-exact (envs/chat.py, "
        "envs/CHAT.md); needs a policy tokenizer with a chat template")
    tool_format: Literal["hermes", "json"] = Field(
        "hermes", description="how tool calls are read with action_format=tools: hermes = JSON "
        "in `<tool_call>...</tool_call>` (Hermes, Qwen, and the prompt rollforge writes for a "
        "template without tools); json = the reply is plain JSON calls (envs/toolcalls.py)")


# -- one tools turn, for every kind ---------------------------------------------------------
@dataclass(frozen=True)
class ToolTurn:
    """A tools turn read for a kind: the valid calls as the kind's action text, every call
    checked and in order, and why none of the turn may run (None: it runs)."""

    action: str
    calls: tuple[ToolCall | Malformed, ...]
    refusal: str | None

    @property
    def malformed(self) -> int:
        return sum(isinstance(c, Malformed) for c in self.calls)


def read_turn(kind: str, text: str, fmt: str) -> ToolTurn:
    """The policy's reply `text` as the kind's tool calls (`fmt`: envs/toolcalls.py). A turn
    with a malformed call runs none of its calls (as a malformed XML action runs nothing), so
    the model is never left guessing which of its calls ran; a turn without a call is refused
    with the kind's tool names."""
    parts, checked = _check_all(kind, list(parse_tool_calls(text, fmt).calls))  # type: ignore[arg-type]
    kt = tools_of(kind)
    bad = [c for c in checked if isinstance(c, Malformed)]
    refusal = None
    if bad:
        refusal = (f"{len(bad)} of {len(checked)} tool calls cannot run: "
                   + "; ".join(m.reason for m in bad))
    elif not checked:
        refusal = (f"no tool call found: call {', '.join(t.name for t in kt.tools)} "
                   f"({fmt} format)")
    return ToolTurn("\n".join(parts), tuple(checked), refusal)


# A call's outcome, one per call of a turn, as the trajectory row's `tool_calls` column keeps
# it (docs/analysts.md): ran = the verb executed and its result is in the tool message;
# failed = it executed and did not do its work (a command's non-zero exit, an edit whose
# SEARCH did not match once, a file that does not exist); malformed = it could not be read or
# does not fit its tool's schema; not_run = a valid call the kind did not run (another call
# of its turn was malformed, it came after submit, the time budget was spent).
CALL_STATUSES = ("ran", "failed", "malformed", "not_run")
_NAME = re.compile(r'"name"\s*:\s*"([^"]{1,64})"')


def tool_results(parts: list[str], limit: int, cut: Callable[[str, int], str]) -> list[str]:
    """A turn's observation as tool messages, one per action it ran: `parts` are the actions'
    texts in order, then the turn's last line (its counter, or the episode's end), which goes
    with the last message. Each is cut (`cut(text, bytes)`) to its share of the observation's
    `limit`. A turn that ran no action (malformed, submit alone) is one message."""
    *body, last = parts
    msgs = body[:-1] + [body[-1] + "\n" + last] if body else [last]
    share = max(256, limit // len(msgs))
    return [cut(m, share) for m in msgs]


def outcome(status: str, detail: str = "", tests_passed: int | None = None,
            tests_total: int | None = None) -> dict:
    """One executed action's outcome as a kind reports it (`name` and `turn` come later)."""
    return {"status": status, "detail": detail[:200], "tests_passed": tests_passed,
            "tests_total": tests_total}


def call_outcomes(turn: ToolTurn, ran: list[dict], turn_no: int) -> list[dict]:
    """Each call of `turn` with its outcome: the malformed ones with their reason, the valid
    ones matched in order with `ran`, the kind's outcomes of the actions it executed (one per
    action, as `read_turn` writes one action per call)."""
    left = list(ran)
    out = []
    for c in turn.calls:
        if isinstance(c, Malformed):
            m = _NAME.search(c.raw)
            o = dict(outcome("malformed", c.reason), name=m.group(1) if m else "")
        elif turn.refusal is None and left:
            o = dict(left.pop(0), name=c.name)
        else:
            o = dict(outcome("not_run", "another call of the turn was malformed"
                             if turn.refusal else "the turn ended before it"), name=c.name)
        out.append(dict(o, turn=turn_no))
    return out
