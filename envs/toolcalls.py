"""Tool calls read from a model's reply, in the model's own format; never an exception.

Two formats:

- `hermes` (Hermes, Qwen2.5, Qwen3 and the templates that copy them): each call is a JSON object
  `{"name": ..., "arguments": {...}}` inside `<tool_call>...</tool_call>`; text outside the tags
  is the reply's content (room to think).
- `json` (plain JSON, for a template without a tool-call syntax): the reply, less one
  surrounding ``` fence, is a JSON object (one call), a JSON array of objects, or objects one
  after another (JSON Lines). A reply that does not start with `{` or `[` holds no call.

Several calls in a turn come back in the order written. A call that cannot be read (bad JSON,
no name, arguments that are not an object, an unclosed tag, text after the calls) is a
`Malformed` value in its place that says exactly what is wrong; `ParsedTurn.malformed` counts
them and `call_metrics` sums a batch's. `"parameters"` is taken for `"arguments"` (Llama 3's
JSON calls) and arguments given as a JSON string are decoded (some models double-encode them);
a call without arguments has none (`{}`).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Literal

ToolFormat = Literal["hermes", "json"]


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    raw: str = ""  # the call as written (for messages about it)


@dataclass(frozen=True)
class Malformed:
    """A call that could not be read or run; `reason` is shown to the model."""

    raw: str
    reason: str


@dataclass(frozen=True)
class ParsedTurn:
    content: str  # the reply's text outside its calls
    calls: tuple[ToolCall | Malformed, ...]

    @property
    def valid(self) -> int:
        return sum(isinstance(c, ToolCall) for c in self.calls)

    @property
    def malformed(self) -> int:
        return sum(isinstance(c, Malformed) for c in self.calls)


def call_from_json(obj: Any, raw: str) -> ToolCall | Malformed:
    """A decoded JSON value as one call, or what is wrong with it."""
    if not isinstance(obj, dict):
        return Malformed(raw, f"a call must be a JSON object, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return Malformed(raw, 'the call has no "name" (a non-empty string); expected '
                              '{"name": <tool name>, "arguments": {...}}')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as exc:
            return Malformed(raw, f'{name}: "arguments" is a string that is not JSON: {exc}')
    if not isinstance(args, dict):
        return Malformed(raw, f'{name}: "arguments" must be a JSON object, got '
                              f'{type(args).__name__}')
    return ToolCall(name, args, raw)


def _json_error(exc: json.JSONDecodeError) -> str:
    return f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"


_FENCE = re.compile(r"\A\s*```[\w-]*\n(.*?)\n?```\s*\Z", re.S)
_TAG = re.compile(r"</?tool_call>")


def _calls_in(body: str) -> list[ToolCall | Malformed]:
    """The call(s) in one `<tool_call>` body: an object, or a list of objects."""
    m = _FENCE.match(body)
    text = (m.group(1) if m else body).strip()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return [Malformed(body, f"<tool_call> body is {_json_error(exc)}")]
    items = obj if isinstance(obj, list) else [obj]
    return [call_from_json(o, body) for o in items] or [Malformed(body, "an empty list of calls")]


def parse_hermes(text: str) -> ParsedTurn:
    """Calls inside `<tool_call>...</tool_call>`; see the module docstring."""
    calls: list[ToolCall | Malformed] = []
    content: list[str] = []
    pos = 0
    tags = list(_TAG.finditer(text))
    i = 0
    while i < len(tags):
        tag = tags[i]
        content.append(text[pos:tag.start()])
        if tag.group(0) == "</tool_call>":
            calls.append(Malformed(tag.group(0), "</tool_call> without a <tool_call> before it"))
            pos, i = tag.end(), i + 1
            continue
        nxt = tags[i + 1] if i + 1 < len(tags) else None
        if nxt is None:
            calls.append(Malformed(text[tag.start():], "unclosed <tool_call>: no </tool_call> "
                                                       "after it (was the reply cut short?)"))
            pos = len(text)
        elif nxt.group(0) == "<tool_call>":
            calls.append(Malformed(text[tag.start():nxt.start()], "<tool_call> not closed "
                                   "before the next <tool_call>"))
            pos = nxt.start()
        else:
            calls.extend(_calls_in(text[tag.end():nxt.start()]))
            pos, i = nxt.end(), i + 1
        i += 1
    content.append(text[pos:])
    return ParsedTurn("".join(content).strip(), tuple(calls))


def parse_json(text: str) -> ParsedTurn:
    """Calls as plain JSON; see the module docstring."""
    m = _FENCE.match(text)
    body = m.group(1) if m else text
    start = len(body) - len(body.lstrip())
    if body[start:start + 1] not in ("{", "["):
        return ParsedTurn(text.strip(), ())
    dec = json.JSONDecoder()
    calls: list[ToolCall | Malformed] = []
    pos = start
    while pos < len(body):
        try:
            obj, end = dec.raw_decode(body, pos)
        except json.JSONDecodeError as exc:
            calls.append(Malformed(body[pos:], f"the call at character {pos} is {_json_error(exc)}"))
            break
        raw = body[pos:end]
        items = obj if isinstance(obj, list) else [obj]
        calls.extend(call_from_json(o, raw) for o in items)
        pos = end + len(body[end:]) - len(body[end:].lstrip())
        if pos < len(body) and body[pos] not in "{[":
            calls.append(Malformed(body[pos:], f"text after the calls at character {pos}: "
                                               f"{body[pos:pos + 40]!r}"))
            break
    return ParsedTurn("", tuple(calls))


PARSERS: dict[str, Callable[[str], ParsedTurn]] = {"hermes": parse_hermes, "json": parse_json}


def parse_tool_calls(text: str, fmt: ToolFormat) -> ParsedTurn:
    if fmt not in PARSERS:
        raise ValueError(f"tool-call format must be one of {sorted(PARSERS)}, got {fmt!r}")
    return PARSERS[fmt](text)


def write_tool_calls(calls: list[tuple[str, dict[str, Any]]], fmt: ToolFormat) -> str:
    """A reply making `calls` ((name, arguments) in order) in `fmt`, as a model trained on the
    format writes them: what `parse_tool_calls` reads back as those calls (the warm start's
    tool-call demonstrations, flows/warm_start.py); ValueError where they would not read
    back so."""
    objs = [{"name": n, "arguments": a} for n, a in calls]
    if fmt == "hermes":
        text = "\n".join(f"<tool_call>\n{json.dumps(o)}\n</tool_call>" for o in objs)
    elif fmt == "json":
        text = "\n".join(json.dumps(o) for o in objs)
    else:
        raise ValueError(f"tool format {fmt!r}: expected one of {sorted(PARSERS)}")
    back = parse_tool_calls(text, fmt).calls
    if [(c.name, c.arguments) if isinstance(c, ToolCall) else c for c in back] != list(calls):
        raise ValueError(f"these calls cannot be written in {fmt!r} so that they read back "
                         "(an argument holds the format's own closing tag)")
    return text


def call_metrics(turns: list[ParsedTurn], prefix: str = "tools") -> dict[str, float]:
    """Counts over a batch of parsed turns: calls, malformed calls, the valid share of calls,
    and the share of turns without any call."""
    calls = sum(len(t.calls) for t in turns)
    bad = sum(t.malformed for t in turns)
    return {f"{prefix}/calls": float(calls), f"{prefix}/malformed": float(bad),
            f"{prefix}/valid_rate": (calls - bad) / calls if calls else float("nan"),
            f"{prefix}/turns_without_call": (sum(not t.calls for t in turns) / len(turns)
                                             if turns else float("nan"))}
