"""Many clients' requests as one call of the sampling boundary.

The boundary is called one request at a time (the local sampler's model and a managed engine's
version sync are not safe from two threads), so requests that arrive while a call runs wait in
a queue; when the call returns, the next one takes the request at the head of the queue and
every queued request sampled under the same settings, as one `SampleRequest` with all their
prompts. The engine then batches them (the local sampler in its batched KV-cache loop, vLLM
continuously), and each request gets back its own prompts' completions, prompt-major as ever:

    queued: A (2 prompts, n=4, T=1)   B (1 prompt, n=4, T=1)   C (1 prompt, n=1, T=0.7)
    call 1: A + B as 3 prompts, n=4, T=1   -> A gets completions 0..7, B gets 8..11
    call 2: C

No timer: nothing waits for company; a request waits only while the boundary is busy. A request
with a `seed` goes alone, so the seed draws what it draws for that request by itself. Requests
for different policy versions (a gateway that follows the run's new versions) are never merged.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from engine.boundary import Completion, SampleRequest


def _settings(it: "_Pending") -> tuple:
    r = it.request
    return (it.version, r.n, r.temperature, r.top_p, r.max_new_tokens, r.stop, r.greedy)


@dataclass(eq=False)  # one waiting request: compared by identity
class _Pending:
    request: SampleRequest
    version: int
    done: bool = False
    result: tuple[list[Completion], float] | None = None
    error: BaseException | None = None


class Batcher:
    """`submit(request, version)` -> (its completions, the seconds of the call that sampled
    them); `call(request, version)` samples."""

    def __init__(self, call: Callable[[SampleRequest, int], list[Completion]],
                 max_prompts: int = 256):
        self.call, self.max_prompts = call, max_prompts
        self.cv = threading.Condition()
        self.queue: list[_Pending] = []
        self.busy = False

    def submit(self, request: SampleRequest, version: int = 0
               ) -> tuple[list[Completion], float]:
        item = _Pending(request, version)
        with self.cv:
            self.queue.append(item)
        while True:
            with self.cv:
                while not item.done and self.busy:
                    self.cv.wait()
                if item.done:
                    break
                batch, self.busy = self._take(), True
            try:
                self._run(batch)  # this thread samples for the batch, whoever's it holds
            finally:
                with self.cv:
                    self.busy = False
                    self.cv.notify_all()
        if item.error is not None:
            raise item.error
        return item.result

    def _take(self) -> list[_Pending]:
        head = self.queue[0]
        if head.request.seed is not None:
            batch = [head]
        else:
            batch, prompts = [], 0
            for it in self.queue:
                r = it.request
                if r.seed is None and _settings(it) == _settings(head) and (
                        not batch or prompts + len(r.prompts) <= self.max_prompts):
                    batch.append(it)
                    prompts += len(r.prompts)
        taken = {id(it) for it in batch}
        self.queue = [it for it in self.queue if id(it) not in taken]
        return batch

    def _run(self, batch: list[_Pending]) -> None:
        first = batch[0].request
        merged = first if len(batch) == 1 else SampleRequest(
            [p for it in batch for p in it.request.prompts], first.n, first.temperature,
            first.top_p, first.max_new_tokens, first.stop, first.greedy)
        t = time.perf_counter()
        try:
            out = self.call(merged, batch[0].version)
            seconds = time.perf_counter() - t
            start = 0
            for it in batch:  # prompt-major: each request's prompts' n completions in a run
                k = len(it.request.prompts) * first.n
                mine = out[start:start + k]
                it.result = ([Completion(i // first.n, c.token_ids, c.logprobs, c.finish_reason,
                                         c.text) for i, c in enumerate(mine)], seconds)
                start += k
        except BaseException as exc:  # every request of the call gets the failure
            for it in batch:
                it.error = exc
        finally:
            with self.cv:
                for it in batch:
                    it.done = True
