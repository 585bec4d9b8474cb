"""Episodes as conversations in the policy's own chat template, token-exact, turn by turn.

An episode is a list of messages (system with the tool declarations, user with the task,
assistant turns, tool results). The tokens the trainer sees are built by appending, never by
re-rendering the history:

    prompt: template(system, user) + generation prompt
    assistant turn: the ids as they were sampled (mask 1, with their log-probs)
    new messages (tool results, a user reply): the template's closing of the assistant turn
        after the sampled end-of-turn token (e.g. "\\n" after <|im_end|>), then
        template(history + new, generation prompt) minus template(history)   (mask 0)

The difference is taken in token ids and its prefix is checked: where the template renders the
history the same once the new messages are there, the appended ids are exactly the template's.
Where it does not (a template that rewrites earlier turns: Qwen3 drops the `<think>` block of
assistant turns before the last user message, and renders the last assistant turn with an empty
`<think>` that it leaves out once the turn is no longer last), the new messages' ids are taken
after the same number of closed turns in the new rendering, and the append is recorded as not
prefix-stable. Either way the sampled ids stay as drawn: the conversation's text keeps each
assistant turn as the decoded sample, not a re-parsed tool call.

`ChatEpisode.check()` compares the trainer's sequence with the template's own full rendering of
the same messages and says where they first differ; `template_report` says so for a whole
episode. Where the tokenizer's template cannot take `tools=` (SmolLM2's), the declarations and
the Hermes call format go into the system message as text (`tools_prompt`).

Token bookkeeping is the caller's record (training/episodes.py `EpisodeTokens`, or anything
with `prompt_ids`, `context()`, `add_policy(ids, logprobs)` and `add_env(ids)`), so there is
one record of an episode's ids, mask and log-probs.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Protocol, Sequence

_PROBE = [{"role": "user", "content": "x"}]
_PROBE_TOOL = [{"type": "function", "function": {"name": "probe", "description": "d",
                                                 "parameters": {"type": "object",
                                                                "properties": {}}}}]


class TokenSink(Protocol):
    prompt_ids: list[int]

    def context(self) -> list[int]: ...

    def add_policy(self, ids: Sequence[int], logprobs: Sequence[float]) -> None: ...

    def add_env(self, ids: Sequence[int]) -> None: ...


def tools_prompt(tools: list[dict]) -> str:
    """The tool declarations and the Hermes call format as system-message text, for a template
    that cannot render `tools=` itself."""
    decl = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return ("You may call one or more functions. Their signatures are within <tools></tools>:\n"
            f"<tools>\n{decl}\n</tools>\n\nFor each call, reply with a JSON object inside "
            "<tool_call></tool_call> tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


class ChatRenderer:
    """One tokenizer and one chat template (the tokenizer's own unless `template` is given)."""

    def __init__(self, tok: Any, template: str | None = None, tools: list[dict] | None = None,
                 name: str = "", **template_kwargs: Any) -> None:
        self.tok = getattr(tok, "tok", tok)  # training.tokenizer.HFTokenizer or a HF tokenizer
        self.template = template or getattr(self.tok, "chat_template", None)
        if not self.template:
            raise ValueError(f"tokenizer {getattr(self.tok, 'name_or_path', '?')!r} has no chat "
                             "template and none was given: use the XML action format instead")
        if self.tok.eos_token_id is None:
            raise ValueError("the tokenizer has no eos_token: an assistant turn could not end")
        self.end_id = int(self.tok.eos_token_id)
        self.name = name or getattr(self.tok, "name_or_path", "") or "template"
        self.kwargs = template_kwargs
        self.tools = list(tools or [])
        self.supports_tools = bool(self.tools) and (
            self._render(_PROBE, False, _PROBE_TOOL) != self._render(_PROBE, False, None))
        # a template that shows tools with <tool_call> (Hermes/Qwen) or our own prompt, which
        # asks for that format too
        self.tool_format = "hermes" if (not self.supports_tools
                                        or "<tool_call>" in self.template) else "json"

    def _render(self, messages: list[dict], gen: bool, tools: list[dict] | None) -> str:
        return self.tok.apply_chat_template(messages, tools=tools, chat_template=self.template,
                                            tokenize=False, add_generation_prompt=gen,
                                            **self.kwargs)

    def text(self, messages: list[dict], add_generation_prompt: bool) -> str:
        return self._render(messages, add_generation_prompt,
                            self.tools if self.supports_tools else None)

    def ids(self, messages: list[dict], add_generation_prompt: bool) -> list[int]:
        """The template's ids for `messages` (the text tokenized as `apply_chat_template(...,
        tokenize=True)` does: no special tokens added)."""
        text = self.text(messages, add_generation_prompt)
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        """An assistant turn's text: its ids less a final end-of-turn token, special tokens kept
        (a template's `<tool_call>` may be one)."""
        ids = list(ids)
        if ids and ids[-1] == self.end_id:
            ids = ids[:-1]
        return self.tok.decode(ids, skip_special_tokens=False)

    def opening(self, user: str, system: str | None = None) -> list[dict]:
        """The first messages: the system message (with the tools as text where the template
        cannot render them) and the user's."""
        return self.with_tools(([{"role": "system", "content": system}] if system else [])
                               + [{"role": "user", "content": user}])

    def with_tools(self, messages: list[dict]) -> list[dict]:
        """`messages` with the tools as text at the end of the system message (one first where
        there is none) when the template cannot render them; else unchanged."""
        if not (self.tools and not self.supports_tools):
            return [dict(m) for m in messages]
        out = [dict(m) for m in messages]
        if out and out[0].get("role") == "system":
            out[0]["content"] = (str(out[0]["content"]) + "\n\n" if out[0]["content"] else "") \
                + tools_prompt(self.tools)
            return out
        return [{"role": "system", "content": tools_prompt(self.tools)}] + out


@dataclass(frozen=True)
class AppendCheck:
    """How one batch of new messages was appended."""

    turn: int
    prefix_stable: bool  # the template rendered the history the same with the new messages
    method: str  # "difference" (prefix-stable) | "after_turns" (history rewritten) | "suffix"
    closing: int  # template tokens appended after the sampled end of the assistant turn
    appended: int  # all tokens appended (closing + the new messages + generation prompt)
    note: str = ""


@dataclass(frozen=True)
class PrefixCheck:
    """The trainer's sequence against the template's own full rendering of the same messages."""

    equal: bool
    trainer_len: int
    template_len: int
    first_diff: int | None = None
    trainer_text: str = ""  # a few tokens from the first difference, as text
    template_text: str = ""


class ChatEpisode:
    """The messages and the appended token sequence of one episode (module docstring)."""

    def __init__(self, renderer: ChatRenderer, messages: list[dict],
                 make_tokens: Callable[[list[int]], TokenSink]) -> None:
        if not messages or messages[-1].get("role") == "assistant":
            raise ValueError("an episode starts with messages that end before an assistant turn")
        self.r = renderer
        self.messages = [dict(m) for m in messages]
        self.tokens = make_tokens(renderer.ids(self.messages, True))
        self.appends: list[AppendCheck] = []
        self.awaiting = True  # the context ends with a generation prompt
        self.turn = 0
        self._ended = True  # whether the last sampled turn ended with the end-of-turn token

    def context(self) -> list[int]:
        return self.tokens.context()

    def cache_form(self) -> dict:
        """What this episode is, for a stage's cache key (flows/stages.py `_canonical`): its
        messages, tokens and appends, and the template that rendered them (by name and text;
        the renderer's tokenizer object has no stable form of its own)."""
        return {"template": [self.r.name, self.r.template, self.r.tools], "messages":
                self.messages, "tokens": self.tokens, "appends": self.appends,
                "turn": self.turn, "awaiting": self.awaiting, "ended": self._ended}

    def add_assistant(self, ids: Sequence[int], logprobs: Sequence[float]) -> str:
        """Record a sampled turn as drawn; returns its text (also the message's content)."""
        if not self.awaiting:
            raise RuntimeError("an assistant turn must follow new messages (add_messages)")
        self.tokens.add_policy(list(ids), list(logprobs))
        text = self.r.decode(ids)
        self.messages.append({"role": "assistant", "content": text})
        self._ended = bool(ids) and ids[-1] == self.r.end_id
        self.awaiting, self.turn = False, self.turn + 1
        return text

    def add_messages(self, new: list[dict]) -> list[int]:
        """Append tool results or a user reply after an assistant turn; returns the ids
        appended (mask 0)."""
        if self.awaiting:
            raise RuntimeError("new messages must follow an assistant turn (add_assistant)")
        if not new or any(m.get("role") not in ("tool", "user", "system") for m in new):
            raise ValueError(f"new messages must be tool, user or system messages, got "
                             f"{[m.get('role') for m in new]}")
        prev = self.r.ids(self.messages, False)
        full = self.r.ids(self.messages + list(new), True)
        tail, note = self._tail(prev)
        closing = tail if self._ended else [self.r.end_id] + tail
        if full[:len(prev)] == prev:
            delta, method, stable = full[len(prev):], "difference", True
        else:
            delta, method = self._after_turns(prev, full, tail)
            stable = False
        ids = closing + delta
        self.tokens.add_env(ids)
        self.messages += [dict(m) for m in new]
        self.awaiting = True
        self.appends.append(AppendCheck(self.turn, stable, method, len(closing), len(ids), note))
        return ids

    def _tail(self, prev: list[int]) -> tuple[list[int], str]:
        """What the template renders after the last assistant turn's end-of-turn token."""
        if self.r.end_id not in prev:
            return [], "the template's assistant turn has no end-of-turn token"
        k = len(prev) - 1 - prev[::-1].index(self.r.end_id)
        return prev[k + 1:], ""

    def _after_turns(self, prev: list[int], full: list[int], tail: list[int]
                     ) -> tuple[list[int], str]:
        """The new messages' ids in a rendering whose history changed: what follows the same
        number of closed turns (and the tail) as the old rendering has; failing that, the
        new rendering's end past its longest common prefix with the old (recorded)."""
        n = prev.count(self.r.end_id)
        ends = [i for i, t in enumerate(full) if t == self.r.end_id]
        if len(ends) >= n > 0:
            start = ends[n - 1] + 1
            if full[start:start + len(tail)] == tail:
                return full[start + len(tail):], "after_turns"
        common = next((i for i, (a, b) in enumerate(zip(prev, full)) if a != b),
                      min(len(prev), len(full)))
        return full[max(common, len(prev)):], "suffix"

    def check(self) -> PrefixCheck:
        """Whether the appended sequence equals the template's full rendering of the messages
        (a finished episode's last assistant turn is compared with its closing added)."""
        template = self.r.ids(self.messages, self.awaiting)
        trainer = self.tokens.context()
        if not self.awaiting:
            tail, _ = self._tail(template)
            trainer = trainer + (tail if self._ended else [self.r.end_id] + tail)
        if trainer == template:
            return PrefixCheck(True, len(trainer), len(template))
        i = next((i for i, (a, b) in enumerate(zip(trainer, template)) if a != b),
                 min(len(trainer), len(template)))
        show = lambda ids: self.r.tok.decode(ids[i:i + 12], skip_special_tokens=False)  # noqa: E731
        return PrefixCheck(False, len(trainer), len(template), i, show(trainer), show(template))


@dataclass(frozen=True)
class TemplateReport:
    """Whether a template is prefix-stable over one episode, and where not."""

    template: str
    supports_tools: bool
    prefix_stable: bool  # every append was a clean difference and the full rendering matches
    full: PrefixCheck
    appends: list[AppendCheck] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def template_report(ep: ChatEpisode) -> TemplateReport:
    full = ep.check()
    stable = full.equal and all(a.prefix_stable for a in ep.appends)
    return TemplateReport(ep.r.name, ep.r.supports_tools, stable, full, list(ep.appends))
