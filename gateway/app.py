"""The OpenAI-compatible HTTP face of a run's policy (gateway/README.md).

Every request is answered through flows/sampler.py `sample(cfg, version, request)`, the one
sampling boundary, so the run's engine (the local sampler or its vLLM server) answers it, and
every answer is recorded token-exact under its episode (gateway/records.py) before it is sent.

A gateway serves one version, or (`follow`) the run's newest: before each request it looks for
a newer published version (at most once every `FOLLOW_CHECK_S`) and, when there is one, answers
from then on with it, episodes already open included (as PipelineRL's in-flight weight updates
do). Each turn is sampled by one version and recorded with it; an episode whose turns span a
change becomes one row per version (gateway/rows.py), each row keeping its own version.
"""
from __future__ import annotations

import hmac
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from engine.boundary import Completion, SampleRequest
from flows import sampler
from flows.config import RunConfig
from gateway import openai_api as api
from gateway.batching import Batcher
from gateway.records import EpisodeLog, check_episode_id, new_episode_id
from training import checkpoints

EPISODE_HEADER = "X-Episode-Id"
FOLLOW_CHECK_S = 1.0  # a following gateway looks for a newer version at most this often
log = logging.getLogger(__name__)


@dataclass
class Gateway:
    """What the app serves: a run's policy at one version (or, with `follow`, its newest),
    behind one key."""

    cfg: RunConfig
    version: int
    key: str
    records: EpisodeLog
    chat_template: str | None = None  # used when the policy's tokenizer has none
    play: Any = None  # gateway/play.py Episodes: the run's tasks as episodes (None: not served)
    follow: bool = False  # move to each newer version the run publishes

    def __post_init__(self):
        if not self.key:
            raise ValueError("the gateway needs an API key (an empty key would let anyone in)")
        self.tok = sampler.policy_tokenizer(self.cfg.run_dir, self.version)
        self._checked = time.monotonic()
        self._version_lock = threading.Lock()
        # The boundary is called by one thread at a time (the local sampler's policy and a
        # managed engine's version sync are not safe from two); requests that arrive meanwhile
        # are sampled together in the next call.
        self.batcher = Batcher(self._call)

    # -- the door ----------------------------------------------------------------------------
    def authorize(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        if not header:
            raise api.GatewayError(401, "no API key: send `Authorization: Bearer KEY`",
                                   "missing_api_key")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(),
                                                                 self.key.encode()):
            raise api.GatewayError(401, "incorrect API key", "invalid_api_key")

    @property
    def models(self) -> tuple[str, str]:
        return self.model_names(self.version)

    def model_names(self, version: int) -> tuple[str, str]:
        return (self.cfg.run_id, f"{self.cfg.run_id}-v{version}")

    def current_version(self) -> int:
        """The version that answers the next request: the one served, or, when following, the
        newest the run has published (looked for at most once every FOLLOW_CHECK_S)."""
        if not self.follow:
            return self.version
        with self._version_lock:
            now = time.monotonic()
            if now - self._checked >= FOLLOW_CHECK_S:
                self._checked = now
                found = checkpoints.versions(self.cfg.run_dir)
                if found and found[-1] > self.version:
                    log.info("gateway: run %s published v%d; answering with it from now on "
                             "(was v%d)", self.cfg.run_id, found[-1], self.version)
                    self.version = found[-1]
            return self.version

    def check_model(self, body: dict, version: int) -> str:
        model = body.get("model")
        names = self.model_names(version)
        if model not in names:
            follows = (f" (it follows the run's newest version: ask for {self.cfg.run_id!r})"
                       if self.follow else "")
            raise api.GatewayError(400, f"model={model!r}: this gateway serves "
                                   f"{' or '.join(map(repr, names))}{follows}", "model_not_found",
                                   "model")
        return model

    def episodes(self):
        """The run's tasks as episodes (gateway/play.py), or a named 404 when not served."""
        if self.play is None:
            raise api.GatewayError(404, "this gateway serves no episodes of the run's tasks "
                                   "(start it with `rollforge gateway --episodes`)",
                                   "episodes_not_served")
        return self.play

    @staticmethod
    def episode_of(request: Request) -> str:
        given = request.headers.get(EPISODE_HEADER)
        if given is None:
            return new_episode_id()
        try:
            return check_episode_id(given)
        except ValueError as exc:
            raise api.GatewayError(400, f"{EPISODE_HEADER}: {exc}", "invalid_episode_id",
                                   EPISODE_HEADER) from None

    # -- prompts -----------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """A text prompt as the policy's own prompts begin (its BOS where it has one)."""
        return self.tok.encode(text)

    def render_chat(self, messages: list[dict]) -> list[int]:
        """The messages in the policy tokenizer's chat template, with the generation prompt;
        the gateway's `chat_template` where the tokenizer has none; otherwise a named 400."""
        hf = getattr(self.tok, "tok", None)  # training/tokenizer.py HFTokenizer's transformers one
        own = getattr(hf, "chat_template", None) if hf is not None else None
        template = own or self.chat_template
        if template is None:
            raise api.GatewayError(
                400, f"the policy of run {self.cfg.run_id!r} has no chat template "
                f"({getattr(self.tok, 'kind', '?')} tokenizer): use /v1/completions, or start the "
                "gateway with --chat-template FILE", "chat_template_missing", "messages")
        if hf is None:  # the byte tokenizer: the same ids through its Hugging Face twin
            from training.tokenizer import byte_tokenizer_hf  # noqa: PLC0415

            hf = byte_tokenizer_hf()
        try:
            out = hf.apply_chat_template(messages, chat_template=template, tokenize=True,
                                         add_generation_prompt=True, return_dict=True)
        except Exception as exc:  # noqa: BLE001 - a template that refuses these messages
            raise api.bad(f"messages: the chat template refused them: {exc}", "messages",
                          "invalid_messages") from None
        return [int(t) for t in out["input_ids"]]

    # -- sampling ----------------------------------------------------------------------------
    def request_for(self, prompts: list[list[int]], s: api.Sampling) -> SampleRequest:
        max_tokens = s.max_tokens or self.cfg.sampling.max_new_tokens
        limit = self.cfg.policy.max_len
        for i, p in enumerate(prompts):
            bad_id = next((t for t in p if not 0 <= t < self.tok.vocab_size), None)
            if bad_id is not None:
                raise api.bad(f"prompt[{i}] holds token id {bad_id}, outside the policy's "
                              f"vocabulary (0..{self.tok.vocab_size - 1})", "prompt", "invalid_prompt")
            if len(p) + max_tokens > limit:
                raise api.bad(f"prompt[{i}] is {len(p)} tokens and max_tokens {max_tokens}: more "
                              f"than the policy's context of {limit} (policy.max_len)",
                              "max_tokens", "context_length_exceeded")
        try:
            return SampleRequest(prompts, s.n, s.temperature, s.top_p, max_tokens, s.stop,
                                 s.greedy, s.seed)
        except ValueError as exc:
            raise api.bad(str(exc), None) from None

    def _call(self, request: SampleRequest, version: int) -> list[Completion]:
        """One call of the boundary: flows/sampler.py, whichever engine the run names."""
        try:
            return sampler.sample(self.cfg, version, request)
        except ValueError as exc:
            raise api.bad(str(exc), None) from None
        except Exception as exc:  # the engine failed: not the client's fault
            raise api.GatewayError(503, f"the policy's engine failed: {type(exc).__name__}: "
                                   f"{exc}", "engine_unavailable") from None

    def sample(self, request: SampleRequest, version: int) -> tuple[list[Completion], float]:
        """`request`'s completions by `version` and the seconds of the call that sampled them
        (with the requests queued beside it under the same settings: gateway/batching.py)."""
        return self.batcher.submit(request, version)

    def record(self, episode: str, endpoint: str, model: str, request: SampleRequest,
               comps: list[Completion], seconds: float, messages: list[dict] | None,
               version: int) -> int:
        # Which prompt a choice continues is its place: the boundary's answers are prompt-major,
        # n per prompt (engine/boundary.py), so choice i continues prompt i // n.
        rec = {"run_id": self.cfg.run_id, "endpoint": endpoint, "model": model,
               "policy_version": version, "created": time.time(), "seconds": seconds,
               "request": {"n": request.n, "temperature": request.temperature,
                           "top_p": request.top_p, "max_tokens": request.max_new_tokens,
                           "stop": list(request.stop), "greedy": request.greedy,
                           "seed": request.seed},
               "messages": messages, "prompts": [list(p) for p in request.prompts],
               "choices": [{"index": i, "prompt_index": i // request.n,
                            "token_ids": list(c.token_ids), "logprobs": list(c.logprobs),
                            "finish_reason": c.finish_reason, "text": c.text}
                           for i, c in enumerate(comps)]}
        return self.records.append(episode, rec)

    # -- answers -----------------------------------------------------------------------------
    def token_str(self, tid: int, as_ids: bool) -> str:
        return f"token_id:{tid}" if as_ids else self.tok.decode([tid])

    def completions(self, body: dict, episode: str) -> tuple[dict, int]:
        version = self.current_version()
        model = self.check_model(body, version)
        s = api.sampling(body, chat=False)
        req = self.request_for(api.completion_prompts(body, self.encode), s)
        comps, seconds = self.sample(req, version)
        turn = self.record(episode, "completions", model, req, comps, seconds, None, version)
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        choices = []
        for i, c in enumerate(comps):
            lp = None
            if s.logprobs is not None:
                toks = [self.token_str(t, as_ids) for t in c.token_ids]
                offsets = [sum(len(x) for x in toks[:k]) for k in range(len(toks))]
                # the boundary returns the sampled tokens' log-probs only, no alternatives
                lp = {"tokens": toks, "token_logprobs": list(c.logprobs), "top_logprobs": None,
                      "text_offset": offsets}
            choices.append({"index": i, "text": c.text, "logprobs": lp,
                            "finish_reason": c.finish_reason, "token_ids": list(c.token_ids)})
        return self.envelope("cmpl", "text_completion", model, req, comps, choices, episode,
                             turn, version), turn

    def chat(self, body: dict, episode: str) -> tuple[dict, int]:
        version = self.current_version()
        model = self.check_model(body, version)
        s = api.sampling(body, chat=True)
        messages = api.chat_messages(body)
        req = self.request_for([self.render_chat(messages)], s)
        comps, seconds = self.sample(req, version)
        turn = self.record(episode, "chat.completions", model, req, comps, seconds, messages,
                           version)
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        choices = []
        for i, c in enumerate(comps):
            lp = None
            if s.logprobs is not None:
                lp = {"content": [{"token": (t := self.token_str(tid, as_ids)), "logprob": x,
                                   "bytes": list(t.encode()), "top_logprobs": []}
                                  for tid, x in zip(c.token_ids, c.logprobs)], "refusal": None}
            choices.append({"index": i, "message": {"role": "assistant", "content": c.text},
                            "logprobs": lp, "finish_reason": c.finish_reason,
                            "token_ids": list(c.token_ids)})
        return self.envelope("chatcmpl", "chat.completion", model, req, comps, choices, episode,
                             turn, version), turn

    def envelope(self, prefix, obj, model, req, comps, choices, episode, turn, version) -> dict:
        prompt_tokens = sum(len(p) for p in req.prompts)
        completion_tokens = sum(len(c.token_ids) for c in comps)
        return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": obj, "created": int(time.time()),
                "model": model, "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens},
                "prompt_token_ids": [list(p) for p in req.prompts],
                "rollforge": {"episode_id": episode, "turn": turn,
                              "policy_version": version}}
