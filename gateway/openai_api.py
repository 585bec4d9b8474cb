"""The OpenAI request bodies the gateway accepts, checked at the door, and the error shape it
answers with. A field the API defines but the sampling boundary cannot honour (penalties,
`logit_bias`, `echo`, `best_of` > n, tools) is refused by name rather than ignored, so a client
never trains on samples drawn under settings it did not get."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_N = 128
MAX_STOP = 4  # as the OpenAI API allows


class GatewayError(Exception):
    """An answer in OpenAI's error shape: {"error": {message, type, param, code}}."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None,
                 type_: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.type = type_ or {401: "authentication_error", 404: "not_found_error",
                              503: "service_unavailable"}.get(
            status, "invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def bad(message: str, param: str | None, code: str = "invalid_value") -> GatewayError:
    return GatewayError(400, message, code, param)


@dataclass(frozen=True)
class Sampling:
    """The sampling settings of one request, as the boundary takes them."""

    n: int
    temperature: float  # the log-probs' temperature (1.0 under greedy)
    greedy: bool  # temperature 0: argmax
    top_p: float
    max_tokens: int | None  # None: the gateway's default
    stop: tuple[str, ...]
    seed: int | None
    logprobs: int | None  # completions: k; chat: 0 when asked (top_logprobs otherwise)
    stream: bool


_UNSUPPORTED_NONZERO = ("presence_penalty", "frequency_penalty")
_UNSUPPORTED_SET = ("logit_bias", "tools", "functions", "tool_choice", "function_call",
                    "response_format", "suffix")


def _number(body: dict, name: str, default: float, lo: float, hi: float,
            lo_open: bool = False) -> float:
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad(f"{name}={v!r}: expected a number", name, "invalid_type")
    if v > hi or v < lo or (lo_open and v == lo):
        interval = f"{'(' if lo_open else '['}{lo}, {hi}]"
        raise bad(f"{name}={v}: expected a number in {interval}", name)
    return float(v)


def _int(body: dict, name: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad(f"{name}={v!r}: expected an integer", name, "invalid_type")
    if v < lo or (hi is not None and v > hi):
        raise bad(f"{name}={v}: expected an integer >= {lo}" + (f" and <= {hi}" if hi else ""), name)
    return v


def _stop(body: dict) -> tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    stops = [v] if isinstance(v, str) else v
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise bad(f"stop={v!r}: expected a non-empty string or a list of them", "stop", "invalid_type")
    if len(stops) > MAX_STOP:
        raise bad(f"stop: {len(stops)} strings, at most {MAX_STOP}", "stop")
    return tuple(stops)


def sampling(body: dict, chat: bool) -> Sampling:
    """The request's sampling settings, or a named 400."""
    for name in _UNSUPPORTED_NONZERO:
        if body.get(name) not in (None, 0, 0.0):
            raise bad(f"{name}={body[name]!r}: not supported by the sampling boundary (only 0)",
                      name, "unsupported_parameter")
    for name in _UNSUPPORTED_SET:
        if body.get(name) not in (None, {}, [], "", "none"):
            raise bad(f"{name}: not supported by this gateway", name, "unsupported_parameter")
    if body.get("echo"):
        raise bad("echo=true: not supported by this gateway", "echo", "unsupported_parameter")
    n = _int(body, "n", 1, 1, MAX_N)
    if body.get("best_of") not in (None, n):
        raise bad(f"best_of={body['best_of']!r}: only best_of = n is supported", "best_of",
                  "unsupported_parameter")
    temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True)
    name = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None \
        else "max_tokens"
    max_tokens = _int(body, name, None, 1)
    seed = _int(body, "seed", None, 0, 2 ** 63 - 1)
    if chat:
        lp = body.get("logprobs")
        if lp not in (None, True, False):
            raise bad(f"logprobs={lp!r}: expected true or false", "logprobs", "invalid_type")
        _int(body, "top_logprobs", 0, 0, 20)
        logprobs = 0 if lp else None
    else:
        logprobs = _int(body, "logprobs", None, 0, 5)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad(f"stream={stream!r}: expected true or false", "stream", "invalid_type")
    return Sampling(n, 1.0 if temperature == 0 else temperature, temperature == 0, top_p,
                    max_tokens, _stop(body), seed, logprobs, stream)


def completion_prompts(body: dict, encode) -> list[list[int]]:
    """`prompt` as token id lists: a string, a list of strings, a list of ids or a list of id
    lists (`encode(text)` tokenises text as the policy's prompts are)."""
    p = body.get("prompt")
    if isinstance(p, str):
        items: list[Any] = [p]
    elif isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        items = [p]
    elif isinstance(p, list) and p:
        items = p
    else:
        raise bad(f"prompt={str(p)[:80]!r}: expected a string, a list of strings, a list of token "
                  "ids or a list of token id lists (non-empty)", "prompt", "invalid_prompt")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str) and item:
            out.append(encode(item))
        elif isinstance(item, list) and item and all(
                isinstance(t, int) and not isinstance(t, bool) for t in item):
            out.append(list(item))
        else:
            raise bad(f"prompt[{i}]={str(item)[:80]!r}: expected a non-empty string or a list "
                      "of token ids", "prompt", "invalid_prompt")
    return out


ROLES = ("system", "developer", "user", "assistant", "tool")


def chat_messages(body: dict) -> list[dict]:
    """`messages` as [{role, content: str}], or a named 400 (text content only)."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("messages: expected a non-empty list of {role, content}", "messages",
                  "invalid_messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            role = m.get("role") if isinstance(m, dict) else None
            raise bad(f"messages[{i}].role={role!r}: expected one of {', '.join(ROLES)}",
                      f"messages[{i}].role", "invalid_messages")
        content = m.get("content")
        if isinstance(content, list):  # content parts: text only
            if not all(isinstance(c, dict) and c.get("type") == "text"
                       and isinstance(c.get("text"), str) for c in content):
                raise bad(f"messages[{i}].content: only text parts ({{type: text, text}}) are "
                          "supported", f"messages[{i}].content", "invalid_messages")
            content = "".join(c["text"] for c in content)
        if not isinstance(content, str):
            raise bad(f"messages[{i}].content={str(content)[:80]!r}: expected a string or a list "
                      "of text parts", f"messages[{i}].content", "invalid_messages")
        out.append({"role": m["role"], "content": content})
    return out
