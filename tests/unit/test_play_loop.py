"""`play`'s event loop (flows/episodes.py) with a fake policy and fake steps whose durations
differ: under `per_episode` an episode's next action is requested as soon as its own step
returned, under `synchronous` only after the whole turn stepped; with a sampler whose actions
depend only on the context both give the same rows. The fakes stand in for the layers below
(the sampler, the Dask steps): what is tested is the order `play` asks them in."""
from __future__ import annotations

import threading
import time

import pytest

from envs.base import Environment
from flows.config import load_config
from flows.episode_exec import Stepped
from flows.episodes import play
from flows.scoring import episode_rows
from tasks.record import Task
from training.generate import Sample
from training.tokenizer import ByteTokenizer

TOK = ByteTokenizer()
WAIT_S = 120.0  # a generous bound on any wait: the loop is stuck, not slow, past it


class Countdown(Environment):
    """A multi-turn kind whose episode ends at `<submit/>` or its turn limit."""

    name = "countdown"
    max_turns = 3
    obs_tokens = 64

    def reset(self, task):
        return (task.task_id, 0), f"count down from {task.task_id}"


def _tasks(n: int) -> list[Task]:
    return [Task(task_id=f"t{i}", suite="fake", family="fake", difficulty=1, split="train",
                 prompt=f"task {i}") for i in range(n)]


def _action(context: list[int]) -> str:
    """What the fake policy says: decided by its context alone (as a seeded sampler per
    context would be), a submit once the context holds two observations."""
    h = sum((i + 1) * t for i, t in enumerate(context)) % 997
    return "<submit/>" if TOK.decode(context).count("<obs>") >= 2 else f"try {h}"


def _sample(context: list[int]) -> Sample:
    text = _action(context)
    ids = TOK.encode(text, bos=False) + [TOK.eos_token_id]
    return Sample(list(context), ids, [-0.5 - 0.01 * (j % 7) for j in range(len(ids))], text, True)


def _step(env, state, action) -> Stepped:
    task_id, turn = state
    turn += 1
    done = action is None or "<submit/>" in action or turn >= env.max_turns
    info = {"end_reason": "context_full" if action is None else
            "submit" if action and "<submit/>" in action else "max_turns",
            "action": "none" if action is None else "write"} if done else {}
    return Stepped((task_id, turn), f"turn {turn} of {task_id}", done, info, 0.01)


class Recorder:
    """The fake policy and steps, logging (event, task, turn) in the order they happen."""

    def __init__(self, hold: dict[tuple[str, int], threading.Event] | None = None,
                 stagger: bool = False):
        self.log: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()
        self.hold = hold or {}
        self.stagger = stagger
        self.sample_calls: list[tuple[int, int, int]] = []  # (turn, contexts, k)

    def note(self, *event):
        with self.lock:
            self.log.append(event)

    def sample_fn(self, turn, contexts, episodes, max_new_tokens, k):
        with self.lock:
            self.sample_calls.append((turn, len(contexts), k))
        for e in episodes:
            self.note("sample", e.task.task_id, turn)
        return [_sample(c) for c in contexts], 0.0

    def step_fn(self, turn, items):
        out = []
        for env, state, action in items:
            task_id = state[0]
            gate = self.hold.get((task_id, turn))
            if gate is not None:
                assert gate.wait(WAIT_S), f"{task_id}'s turn-{turn} step was never released"
            if self.stagger:  # steps of different lengths, so they return out of order
                time.sleep(0.002 * (int(task_id[1:]) % 4))
            out.append(_step(env, state, action))
            self.note("stepped", task_id, turn)
        return out


def _play(rec: Recorder, turns: str, n: int = 4, concurrent: bool = False, max_len: int = 4096):
    return play(_tasks(n), [Countdown()] * n, 1, max_len, TOK, 16, rec.sample_fn, rec.step_fn,
                turns=turns, concurrent=concurrent)


@pytest.mark.parametrize("concurrent", [False, True])
def test_an_episodes_next_turn_is_requested_before_a_slow_step_of_another_returns(concurrent):
    # t0's first step is held until t1's second action has been requested: per episode, t1
    # goes on without waiting for t0; a turn-synchronous loop would wait for it forever.
    released = threading.Event()
    rec = Recorder(hold={("t0", 1): released})
    original = rec.sample_fn

    def sample_fn(turn, contexts, episodes, max_new_tokens, k):
        if turn == 2 and any(e.task.task_id == "t1" for e in episodes):
            released.set()
        return original(turn, contexts, episodes, max_new_tokens, k)

    rec.sample_fn = sample_fn
    eps = _play(rec, "per_episode", n=2, concurrent=concurrent)
    log = rec.log
    assert log.index(("sample", "t1", 2)) < log.index(("stepped", "t0", 1))
    assert all(e.final is not None and e.turns == 3 for e in eps)


def test_synchronous_turns_step_every_episode_before_any_next_action():
    rec = Recorder(stagger=True)
    _play(rec, "synchronous", n=4)
    log = rec.log
    for turn in (1, 2):
        last_step = max(i for i, (ev, _, t) in enumerate(log) if ev == "stepped" and t == turn)
        first_next = min(i for i, (ev, _, t) in enumerate(log) if ev == "sample" and t == turn + 1)
        assert last_step < first_next
    # one call per turn, each with every live episode, numbered as the turn's first
    assert rec.sample_calls == [(1, 4, 0), (2, 4, 0), (3, 4, 0)]


@pytest.mark.parametrize("concurrent", [False, True])
def test_per_episode_rows_equal_the_synchronous_rows_when_the_sampler_is_deterministic(concurrent):
    cfg = load_config(None, ["sampling.group_size=2"])

    def rows(turns):
        rec = Recorder(stagger=True)
        eps = play(_tasks(6), [Countdown()] * 6, 2, 4096, TOK, 16, rec.sample_fn, rec.step_fn,
                   turns=turns, concurrent=concurrent)
        keep = ("task_id", "sample_index", "episode_id", "prompt_token_ids",
                "completion_token_ids", "sampling_logprobs", "completion_mask", "completion",
                "turns", "turn_actions", "turn_observations", "end_reason")
        return [{k: getattr(r, k) for k in keep} for r in episode_rows(cfg, 0, 0, eps, 2, cfg.hash())]

    sync, each = rows("synchronous"), rows("per_episode")
    assert len(each) == 12 and each == sync
    assert {r["turns"] for r in each} == {3}  # two observations, then the submit


def test_the_local_sampler_gets_one_call_at_a_time_holding_every_ready_episode():
    # the sampler is busy until every turn-1 step has returned: its next call holds them all
    rec = Recorder()
    busy = threading.Lock()
    original = rec.sample_fn

    def sample_fn(*args):
        assert busy.acquire(blocking=False), "two sample calls at once"
        try:
            return original(*args)
        finally:
            busy.release()

    rec.sample_fn = sample_fn
    _play(rec, "per_episode", n=3)
    assert sum(n for t, n, _ in rec.sample_calls if t == 1) == 3
    assert [k for t, _, k in rec.sample_calls if t == 2] == list(
        range(len([1 for t, _, _ in rec.sample_calls if t == 2])))  # distinct seeds per call


def test_an_episode_with_no_room_left_is_ended_as_it_stands_in_both_modes():
    for turns in ("synchronous", "per_episode"):
        rec = Recorder()
        # room for the prompt and one action, not for the first observation and another
        eps = _play(rec, turns, n=2, max_len=len(TOK.encode_prompt("count down from t0")) + 30)
        for e in eps:
            assert e.turns == 1 and e.final["end_reason"] == "context_full", turns
        assert ("stepped", "t0", 2) in rec.log  # its ending step, at the next turn


@pytest.mark.parametrize("concurrent", [False, True])
def test_the_local_sampler_samples_on_the_loops_own_thread_and_an_engine_in_its_pool(concurrent):
    # The thread the flow's other torch work runs on: one more thread with an OpenMP team than
    # cores makes every op of a batch wait for a sleeping helper (flows/episodes.py
    # `called_here`). An engine's concurrent calls need the pool.
    here, seen = threading.current_thread(), []
    rec = Recorder()
    original = rec.sample_fn

    def sample_fn(*args):
        seen.append(threading.current_thread())
        return original(*args)

    rec.sample_fn = sample_fn
    for turns in ("synchronous", "per_episode"):
        seen.clear()
        eps = _play(rec, turns, n=3, concurrent=concurrent)
        assert all(e.final is not None for e in eps) and seen, turns
        assert all((t is here) is not concurrent for t in seen), (turns, seen)


@pytest.mark.parametrize("concurrent", [False, True])
def test_a_failing_sample_fails_play(concurrent):
    def sample_fn(turn, contexts, episodes, max_new_tokens, k):
        raise RuntimeError("the sampler failed")

    for turns in ("synchronous", "per_episode"):
        with pytest.raises(RuntimeError, match="the sampler failed"):
            play(_tasks(2), [Countdown()] * 2, 1, 4096, TOK, 16, sample_fn, Recorder().step_fn,
                 turns=turns, concurrent=concurrent)


def test_a_failing_step_fails_play():
    def step_fn(turn, items):
        raise RuntimeError("the shard failed")

    with pytest.raises(RuntimeError, match="the shard failed"):
        play(_tasks(2), [Countdown()] * 2, 1, 4096, TOK, 16, Recorder().sample_fn, step_fn,
             turns="per_episode")
    with pytest.raises(ValueError, match="turns='batched'"):
        play(_tasks(1), [Countdown()], 1, 4096, TOK, 16, Recorder().sample_fn, step_fn,
             turns="batched")


def test_the_busy_clock_counts_overlapping_calls_once(monkeypatch):
    import flows.episodes as episodes

    now = [0.0]
    monkeypatch.setattr(episodes.time, "perf_counter", lambda: now[0])
    clock = episodes.BusyClock()
    clock.__enter__()      # t=0: one call
    now[0] = 2.0
    clock.__enter__()      # t=2: a second, overlapping
    now[0] = 3.0
    clock.__exit__(None, None, None)
    now[0] = 5.0
    clock.__exit__(None, None, None)   # busy 0..5
    now[0] = 9.0
    with clock:            # 9..10
        now[0] = 10.0
    assert clock.seconds == 6.0


def test_auto_turns_are_per_episode_for_an_engine_and_synchronous_for_the_local_sampler():
    from flows.sampler import play_options

    def options(*sets):
        return play_options(load_config(None, list(sets)))

    assert options() == {"turns": "synchronous", "concurrent": False}
    assert options("sampling.engine=vllm") == {"turns": "per_episode", "concurrent": True}
    assert options("sampling.turns=per_episode") == {"turns": "per_episode", "concurrent": False}
    assert options("sampling.engine=vllm", "sampling.turns=synchronous") == {
        "turns": "synchronous", "concurrent": True}
    # how turns are scheduled is not what a run computes: a resume may change it
    assert load_config(None, ["sampling.turns=per_episode"]).hash() == load_config(None, []).hash()


@pytest.mark.parametrize("concurrent", [False, True])
def test_a_stopped_play_returns_only_after_its_batch_in_flight_ended(concurrent):
    """A stop (SIGTERM) raises in the loop's thread while a batch samples, in another (an
    engine's) or in that thread itself (the local sampler's); the batch ends at its next token
    (`stop_sampling`) or with the stop, and the loop waits for it before the stop goes on, so
    nothing of the run reports to Prefect after the run's API is gone."""
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415

    from flows.stop import Stopped, stop_on_signals  # noqa: PLC0415
    from training.generate import SamplingStopped, stop_sampling  # noqa: PLC0415

    started, ended = threading.Event(), threading.Event()

    def sample_fn(turn, contexts, episodes, max_new_tokens, k):
        started.set()
        try:
            while not stop_sampling.wait(0.05):  # a long batch, token by token
                pass
            time.sleep(0.3)  # the token it was computing
            raise SamplingStopped("stopped")
        finally:
            ended.set()

    def signal_when_sampling():
        assert started.wait(WAIT_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=signal_when_sampling, daemon=True).start()
    with pytest.raises(Stopped):
        with stop_on_signals():
            play(_tasks(2), [Countdown()] * 2, 1, 4096, TOK, 16, sample_fn,
                 Recorder().step_fn, turns="per_episode", concurrent=concurrent)
    assert ended.is_set()  # not still running in the play's thread pool
