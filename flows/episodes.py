"""The one loop's episodes, for every kind and turn count (no Prefect here; flows/iteration.py
wires these to its stages).

An episode alternates the two places work happens (DESIGN.md): the policy samples its next
action where it lives (the sample stage), then its environment step runs on Dask (the rollout
stage, flows/episode_exec.py), and the observation comes back into its token sequence
(training/episodes.py). `play` moves each episode on by itself (`sampling.turns: per_episode`):
its next action is requested as soon as its own step returned, so a slow step holds up its
episode only, and every request ready at once goes out together (one batch for the local
sampler, concurrent calls for an engine, which batches what is in flight). `synchronous` is the
same loop with a barrier at each turn. A single-turn kind ends at its first step, which grades
the answer; a multi-turn kind ends at its submit, its turn limit or its time budget. Then one
row per episode goes to the store (flows/scoring.py `episode_rows`), GRPO gets one advantage
per episode (group = the task's G episodes), split over its turns with `rl.turn_credit:
progress`, and trains on the policy's tokens only.
"""
from __future__ import annotations

import contextvars
import json
import threading
import time
from collections import defaultdict
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from engine.stopping import SamplingStopped
from envs.base import Environment, breakdown_of
from envs.chat import ChatEpisode, ChatRenderer
from envs.tools import schemas
from flows.episode_exec import Stepped
from flows.stop import raise_if_stopped, stops_held
from rewards import outcome
from rewards.aggregate import RewardBreakdown
from tasks.record import Task
from training.episodes import EpisodeTokens, fit_observation, observation_text
from training.generate import Sample

# (turn, contexts, episodes, max_new_tokens, k) -> (one action per context, the seconds the
# sampler spent). `episodes` are the episodes the contexts belong to (a scripted policy reads
# them, a model needs only the contexts), all at the same turn; `k` numbers the calls of one
# turn (under `synchronous`, one per action budget). Calls may come from several threads at
# once (`play`'s `concurrent`), and so may the step function's. The seconds are the sampler's own, so a call answered from the cache reports
# the time it first took and the rows built from it are the same.
SampleFn = Callable[[int, list[list[int]], list["Episode"], int, int],
                    tuple[list[Sample], float]]
StepFn = Callable[[int, list[tuple[Environment, Any, "str | None"]]], list[Stepped]]


@dataclass
class Episode:
    """One episode as the flow tracks it between turns."""

    task: Task
    env: Environment
    index: int  # sample index within the task's group
    state: Any
    intro: str  # the first observation (the row's prompt)
    tokens: EpisodeTokens
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)  # as the policy saw them
    turn_seconds: list[float] = field(default_factory=list)
    gen_s: float = 0.0
    wall_s: float = 0.0  # worker seconds of its steps, grading included
    text: list[str] = field(default_factory=list)  # the completion's text, piece by piece
    executed: str | None = None  # the last action as run, where it differs from its text
    final: dict | None = None  # the closing turn's info (grade, end_reason)
    backend: str = ""
    image_digest: str | None = None
    chat: ChatEpisode | None = None  # the messages, where the kind acts through tools
    calls: list[dict] = field(default_factory=list)  # each tool call's outcome (envs/tools.py)
    progress: list[float | None] = field(default_factory=list)  # per turn: `turn_progress`

    @property
    def done(self) -> bool:
        return self.final is not None

    @property
    def turns(self) -> int:
        return len(self.actions)

    @property
    def tool_calls(self) -> int:
        return len(self.calls)

    @property
    def malformed_calls(self) -> int:
        return sum(c["status"] == "malformed" for c in self.calls)

    @property
    def grade(self) -> RewardBreakdown | None:
        return breakdown_of(self.final or {})


Turns = Literal["synchronous", "per_episode"]
_DRAIN_S = 30.0  # the longest a stopping loop waits for its calls in flight


def play(tasks: list[Task], envs: list[Environment], group: int, max_len: int, tok,
         action_tokens: int, sample_fn: SampleFn, step_fn: StepFn,
         turns: Turns = "synchronous", concurrent: bool = False) -> list[Episode]:
    """Run `group` episodes per task (`envs[i]` plays `tasks[i]`) to the end (see the module
    docstring). A task whose first observation leaves no room for an action is refused
    (ValueError); after the first turn, an episode whose context has no room left for another
    action is ended and graded as it stands (`end_reason` context_full).
    `action_tokens` is the default action budget (`sampling.max_new_tokens`). With prompts
    in a chat template the policy is an instruct model: each action is what its answer stands
    for (`Environment.answer`, e.g. the code of a fenced block), and the text stays as written.

    `turns`: `per_episode`, each episode's next action is requested as soon as its own step
    returned and its step submitted as soon as its action came back; `synchronous`, the same
    loop with a barrier at each turn (every live episode samples, then every one steps).
    `concurrent`: the sampler takes many calls at once (an engine that batches continuously);
    otherwise one call is in flight and it holds every episode ready when it went out (the
    local sampler: with equal step times, its batches are the synchronous turns')."""
    instruct = _instruct(tok)
    if turns not in ("synchronous", "per_episode"):
        raise ValueError(f"turns={turns!r}: expected 'synchronous' or 'per_episode'")
    eps = _start(tasks, envs, group, max_len, tok, action_tokens, instruct)
    _Loop(eps, max_len, tok, action_tokens, instruct, sample_fn, step_fn,
          turns == "synchronous", concurrent).run()
    return eps


class BusyClock:
    """Seconds during which at least one of some calls was running: `with clock:` around each.
    Calls that overlap (`play`'s per-episode turns) count once, so the figure stays a share of
    the wall time."""

    def __init__(self) -> None:
        self.seconds, self._running, self._since = 0.0, 0, 0.0
        self._lock = threading.Lock()

    def __enter__(self) -> "BusyClock":
        with self._lock:
            if not self._running:
                self._since = time.perf_counter()
            self._running += 1
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._running -= 1
            if not self._running:
                self.seconds += time.perf_counter() - self._since


class _Loop:
    """`play`'s event loop. Every episode is in one place: `waiting` (for its next action),
    in a sample call, `sampled` (action in hand, or None for a full context: for its step),
    in a step call, or done. Calls run in threads (the local sampler's in the loop's own,
    `called_here`), each in a copy of the caller's context (a Prefect task called from one
    belongs to the caller's flow run)."""

    def __init__(self, eps: list[Episode], max_len: int, tok, action_tokens: int,
                 instruct: bool, sample_fn: SampleFn, step_fn: StepFn, sync: bool,
                 concurrent: bool) -> None:
        self.max_len, self.tok, self.action_tokens, self.instruct = max_len, tok, action_tokens, instruct
        self.sample_fn, self.step_fn, self.sync, self.concurrent = sample_fn, step_fn, sync, concurrent
        self.last_turn = max((e.env.max_turns for e in eps), default=0)
        self.order = {id(e): i for i, e in enumerate(eps)}
        self.waiting: list[Episode] = list(eps)
        self.sampled: list[tuple[Episode, str | None]] = []
        self.flight: dict[Future, tuple[str, int, list[Episode]]] = {}
        self.calls: dict[int, int] = defaultdict(int)  # sample calls per turn: the next `k`
        self.seq = 0  # calls made, to handle results in the order their calls went out
        self.issued: dict[Future, int] = {}
        self.ending: set[int] = set()  # episodes stepped without an action (context full)
        cap = max(1, min(len(eps), 256))
        self.prefix = f"play-{id(self):x}"  # this loop's threads (`_drain`)
        self.pools = {k: ThreadPoolExecutor(cap, thread_name_prefix=f"{self.prefix}-{k}")
                      for k in ("sample", "step")}

    def run(self) -> None:
        try:
            while True:
                self._dispatch_samples()
                self._dispatch_steps()
                if not self.flight:
                    return
                # woken each second: a stop signal whose exception was dropped (flows/stop.py)
                done, _ = wait(list(self.flight), timeout=1.0, return_when=FIRST_COMPLETED)
                raise_if_stopped()
                for f in sorted(done, key=self.issued.__getitem__):
                    kind, turn, part = self.flight.pop(f)
                    del self.issued[f]
                    if kind == "sample":
                        self._took_actions(part, *f.result())
                    else:
                        self._took_steps(part, f.result())
        except BaseException:
            for f in self.flight:
                f.cancel()
            # A stop ends a batch being sampled at its next token (training.generate
            # .stop_sampling): let the calls in flight end here, while the run's Prefect API is
            # still up. A call that reported its end after the API had gone made Prefect start
            # a temporary server of its own, which nothing stopped.
            self._drain()
            raise
        finally:
            for pool in self.pools.values():  # a failed call's siblings are not waited for
                pool.shutdown(wait=False, cancel_futures=True)

    def _drain(self) -> None:
        """Wait (up to _DRAIN_S) for this loop's pool threads to end. Its threads, found by
        name, not its recorded futures: a stop can land inside a submit, after the thread
        took the call and before the pool or the loop recorded either."""
        for pool in self.pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
        end = time.monotonic() + _DRAIN_S
        for t in threading.enumerate():
            if t.name.startswith(self.prefix):
                t.join(max(0.0, end - time.monotonic()))

    def _busy(self, kind: str) -> bool:
        return any(k == kind for k, _, _ in self.flight.values())

    def _call(self, kind: str, turn: int, part: list[Episode], fn, *args) -> None:
        if kind == "sample" and not self.concurrent:
            f = called_here(fn, *args)
        else:
            f = self.pools[kind].submit(contextvars.copy_context().run, fn, *args)
        self.flight[f], self.issued[f] = (kind, turn, part), self.seq
        self.seq += 1

    # -- the policy's side -----------------------------------------------------------------
    def _dispatch_samples(self) -> None:
        if self.sync and self._busy("step"):  # the barrier: this turn's steps first
            return
        if not self.concurrent and self._busy("sample"):
            return
        groups: dict[tuple[int, int], list[Episode]] = {}
        for e in sorted(self.waiting, key=lambda e: (e.turns, self.order[id(e)])):
            turn = e.turns + 1
            if turn > self.last_turn:  # every kind's limit passed: it stays as it is
                continue
            budget = e.env.action_tokens(self.action_tokens)
            if turn > 1 and len(e.tokens.context()) + budget > self.max_len:
                self.sampled.append((e, None))  # no room: its step ends it as it stands
            else:
                groups.setdefault((turn, budget), []).append(e)
        self.waiting = []
        for n, ((turn, budget), part) in enumerate(groups.items()):
            if n and not self.concurrent:  # one call at a time: the rest wait for the next
                self.waiting += part
                continue
            k = self.calls[turn]
            self.calls[turn] += 1
            self._call("sample", turn, part, self.sample_fn, turn,
                       [e.tokens.context() for e in part], part, budget, k)

    def _took_actions(self, part: list[Episode], samples: list[Sample], seconds: float) -> None:
        gen = seconds / max(1, len(part))
        for e, s in zip(part, samples):
            if e.chat:  # the tool calls are read on the worker (the kind's step)
                e.chat.add_assistant(s.completion_ids, s.logprobs)
            else:
                e.tokens.add_policy(s.completion_ids, s.logprobs)
            action = e.env.answer(e.state, s.text) if self.instruct and not e.chat else s.text
            e.executed = action if action != s.text else None
            e.actions.append(action)
            e.text.append(s.text)
            e.gen_s += gen
            self.sampled.append((e, action))

    # -- the environment's side ------------------------------------------------------------
    def _dispatch_steps(self) -> None:
        if not self.sampled:
            return
        if self.sync:  # the barrier: every live episode's action first
            if self.waiting or self._busy("sample"):
                return
            whole = [self.sampled]
        else:  # one call each, but the last turns (nothing waits on them) together
            whole = [[x] for x in self.sampled if x[1] is not None and x[0].turns < x[0].env.max_turns]
            rest = [x for x in self.sampled if x[1] is None or x[0].turns >= x[0].env.max_turns]
            whole += [rest] if rest else []
        self.sampled = []
        for batch in whole:
            # an action's turn is its own; an episode ended for a full context ends in the next
            by_turn: dict[int, list[tuple[Episode, str | None]]] = {}
            for e, a in sorted(batch, key=lambda x: (x[1] is None, self.order[id(x[0])])):
                by_turn.setdefault(e.turns + (a is None), []).append((e, a))
            for turn, items in by_turn.items():
                self.ending.update(id(e) for e, a in items if a is None)
                self._call("step", turn, [e for e, _ in items], self.step_fn, turn,
                           [(e.env, e.state, a) for e, a in items])

    def _took_steps(self, part: list[Episode], results: list[Stepped]) -> None:
        tok = self.tok
        for e, r in zip(part, results):
            e.state = r.state
            e.wall_s += r.seconds
            e.backend, e.image_digest = r.backend, r.image_digest
            e.calls += r.info.get("calls", [])
            # a chat's turn: a tool message per action the kind ran, sharing the turn's budget
            parts = r.info.get("tool_results") if e.chat else None
            if parts:
                share = max(32, e.env.obs_tokens // len(parts))
                parts = [fit_observation(tok, p, share) for p in parts]
            seen = ("\n".join(parts) if parts else
                    fit_observation(tok, r.observation, e.env.obs_tokens) if r.observation else "")
            if r.info.get("action") != "none":  # a real turn (not an end for a full context)
                e.turn_seconds.append(float(r.info.get("seconds", r.seconds)))
                e.progress.append(turn_progress(r.info))
                e.observations.append(seen)
            if r.done:
                e.final = r.info
                continue
            if id(e) in self.ending:  # a kind that did not end it: it stays as it is
                continue
            if e.chat:  # the turn's results as tool messages, in the template's own tokens
                given = r.info.get("messages")  # a kind's own messages (user replies), by role
                if given:
                    share = max(32, e.env.obs_tokens // len(given))
                    msgs = [{"role": m["role"], "content": fit_observation(tok, m["content"], share)}
                            for m in given]
                else:
                    msgs = [{"role": "tool", "content": p} for p in (parts or [seen])]
                ids = e.chat.add_messages(msgs)
                e.text.append(e.chat.r.tok.decode(ids, skip_special_tokens=False))
            else:
                e.tokens.add_env(tok.encode(observation_text(seen), bos=False))
                e.text.append(observation_text(seen))
            self.waiting.append(e)


def called_here(fn, *args) -> Future:
    """`fn(*args)` run on this thread, as a finished future (an exception in it, too).

    The local sampler's calls go here rather than to a pool thread: it takes one call at a
    time, so the loop has nothing to do until it returns, and this thread is the one the
    flow's other torch work (the update) runs on. torch's OpenMP runtime (libgomp) keeps a team
    of threads for each thread that runs parallel ops; once the process holds more such threads
    than it has cores, every team sleeps between ops instead of spinning, and each parallel op
    of a sampling batch (about 5000 for 64 sequences of 32 tokens) then waits for its sleeping
    helper to be woken. bench/bench_trl.py's sample stage on 2 quiet cores: 0.60 s from a pool
    thread, 0.46 s from this one (`model.generate`, on its main thread: 0.37-0.38 s)."""
    f: Future = Future()
    raise_if_stopped()  # a stop received already (its exception dropped): no batch begun
    try:
        with stops_held():  # a stop lands here, not inside Prefect's task engine
            f.set_result(contextvars.copy_context().run(fn, *args))
    except SamplingStopped:  # the batch saw `stop_sampling`: the stop that set it goes on
        raise_if_stopped()
        raise
    except Exception as exc:  # a stop (BaseException) goes on from here at once
        f.set_exception(exc)
    return f


def _start(tasks: list[Task], envs: list[Environment], group: int, max_len: int, tok,
           action_tokens: int, instruct: bool) -> list[Episode]:
    """`group` new episodes per task: the first observation as the prompt, in one sequence or,
    for a kind that acts through tools, as the opening messages of a chat."""
    renderers: dict[str, ChatRenderer] = {}
    eps = []
    for t, env in zip(tasks, envs):
        state, obs, r, opening, ids = _opening(t, env, tok, instruct, renderers)
        need = len(ids) + env.action_tokens(action_tokens)
        if need > max_len:  # a config that cannot fit the task, not a failure of the model
            raise ValueError(f"task {t.task_id}: its first observation is {len(ids)} tokens and "
                             f"an action up to {need - len(ids)}, more than policy.max_len="
                             f"{max_len}; raise policy.max_len or drop the task")
        for g in range(group):
            chat = ChatEpisode(r, opening, EpisodeTokens) if r else None
            eps.append(Episode(t, env, g, state, obs,
                               chat.tokens if chat else EpisodeTokens(list(ids)), chat=chat))
    return eps


def _instruct(tok) -> bool:
    """Whether the policy is an instruct model: its prompts are in its chat template."""
    return getattr(tok, "kind", "byte") == "hf" and getattr(tok, "use_chat_template", False)


def _opening(t: Task, env: Environment, tok, instruct: bool, renderers: dict):
    """A new episode's (state, first observation, chat renderer or None, opening messages or
    None, prompt ids)."""
    state, obs = env.reset(t)
    r = _renderer(env, tok, instruct, renderers)
    own = getattr(env, "opening_messages", lambda _t: None)(t) if r else None
    opening = (r.with_tools(own) if own else r.opening(obs)) if r else None
    ids = r.ids(opening, True) if r else tok.encode_prompt(obs)
    return state, obs, r, opening, ids


def first_misfit(tasks: list[Task], envs: list[Environment], max_len: int, tok,
                 action_tokens: int) -> tuple[Task, int, int] | None:
    """The first task whose prompt, as `play` renders it for `tok` (its chat template, a
    kind's tools), and an action do not fit `max_len`: (task, tokens needed, action tokens);
    None when all fit."""
    instruct = _instruct(tok)
    renderers: dict[str, ChatRenderer] = {}
    for t, env in zip(tasks, envs):
        ids = _opening(t, env, tok, instruct, renderers)[-1]
        action = env.action_tokens(action_tokens)
        if len(ids) + action > max_len:
            return t, len(ids) + action, action
    return None


def _renderer(env: Environment, tok, instruct: bool, cache: dict[str, ChatRenderer]
              ) -> ChatRenderer | None:
    """The chat renderer of a kind whose episodes run as messages with tools (its
    `tool_kind`), one per kind, or as messages without tools (`chat_messages`: a kind whose
    environment answers in user messages) for an instruct policy; None for text actions."""
    kind = getattr(env, "tool_kind", None)  # only kinds with tools (envs/tools.py) have it
    if kind is None:
        if not (instruct and getattr(env, "chat_messages", False)):
            return None
        tools = list(getattr(env, "chat_tools", None) or [])
        key = f"{env.name}:messages:" + json.dumps(tools, sort_keys=True)
        if key not in cache:
            cache[key] = ChatRenderer(tok, tools=tools or None, name=f"{env.name}:policy template")
        return cache[key]
    if not instruct:
        raise ValueError(f"kind {env.name!r}: action_format='tools' needs a policy tokenizer "
                         "with a chat template (an instruct model with policy.chat_template: "
                         "true); the byte-level default plays action_format='xml'")
    if kind not in cache:
        cache[kind] = ChatRenderer(tok, tools=schemas(kind), name=f"{kind}:policy template")
    return cache[kind]


def solved(e: Episode) -> bool | None:
    """Whether the episode solved its task (rewards/outcome.py); None: not scored."""
    g = e.grade
    if g is None:
        return None
    return outcome.solved(g.tests_passed, g.tests_total, g.hack_flags, g.infra_error)


def turn_progress(info: dict) -> float | None:
    """What one turn's own test run showed, as the share of its tests that passed: the kind's
    visible counts (`visible_passed`/`visible_total`, the agent kind), else the last action of
    the turn that ran tests (`outcomes`, or a tools turn's `calls`: the repo kind's pytest, which
    fails while a test does).
    None: the turn ran no tests, or the turn was flagged (a flagged run's counts are not
    progress)."""
    if info.get("hack_flags"):
        return None
    counts = [(info.get("visible_passed"), info.get("visible_total"))]
    counts += [(c.get("tests_passed"), c.get("tests_total"))
               for c in reversed(info.get("outcomes") or info.get("calls") or [])]
    for passed, total in counts:
        if outcome.count_ok(passed, total):
            return passed / total
    return None
