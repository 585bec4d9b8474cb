"""flows/stop.py: a signal during a run becomes `Stopped` in the main thread (so the cleanup on
the way out runs), and a second one during that stop takes the default action."""
import os
import signal

import pytest

from flows.stop import Stopped, stop_on_signals


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_raises_stopped_and_rearms_the_default_for_a_second(sig):
    before = signal.getsignal(sig)
    with pytest.raises(Stopped) as caught:
        with stop_on_signals():
            try:
                os.kill(os.getpid(), sig)  # its handler runs as this call returns
            finally:
                # during the stop: a second signal would end the process at once
                assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
                assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL
    assert caught.value.signum == sig and caught.value.name == signal.Signals(sig).name
    assert signal.getsignal(sig) is before  # the caller's handlers are back


def test_stopped_is_not_an_exception_so_except_exception_does_not_swallow_it():
    assert not issubclass(Stopped, Exception)


def test_a_stop_dropped_inside_a_finalizer_is_raised_at_the_next_check(monkeypatch):
    """The handler's exception, raised while the main thread runs a weakref finalizer (the
    garbage collector runs them at any allocation), is printed and dropped by Python; the
    flow's next check (each stage's start, the episode loop's wait) raises it again."""
    import sys
    import time
    import weakref

    from flows.stop import raise_if_stopped

    dropped = []  # what Python reports as "Exception ignored in ..."
    monkeypatch.setattr(sys, "unraisablehook", dropped.append)

    class Held:
        pass

    with stop_on_signals():
        held = Held()
        weakref.finalize(held, lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(1.0)))
        del held  # the finalizer runs here: the signal's Stopped is raised in it, and dropped
        assert [type(d.exc_value) for d in dropped] == [Stopped]
        with pytest.raises(Stopped, match="SIGINT"):
            raise_if_stopped()
        try:  # during the stop's own cleanup the check stays quiet
            raise Stopped(signal.SIGINT)
        except Stopped:
            raise_if_stopped()
    raise_if_stopped()  # nothing pending once the run's handlers are gone


def test_a_stage_does_not_start_once_a_stop_was_received(monkeypatch):
    from flows import staging, stop

    monkeypatch.setattr(stop, "_received", [signal.SIGTERM])
    with pytest.raises(Stopped, match="SIGTERM"):
        staging.call_stage(None, {})


def test_a_stop_ends_a_batch_being_sampled_at_its_next_token():
    """A batch in a thread of `play` would otherwise hold the process's exit until it is done
    (minutes for the real model): the signal sets `stop_sampling`, which the sampler checks at
    every token; leaving the stop clears it for the next run in the process."""
    import torch  # noqa: PLC0415

    from training.config import PolicyConfig  # noqa: PLC0415
    from training.generate import SamplingStopped, sample, stop_sampling  # noqa: PLC0415
    from training.policy import build_policy  # noqa: PLC0415

    model = build_policy(PolicyConfig(n_layer=1, n_embd=32, n_head=2))
    assert len(sample(model, ["def f(x):"], 4, generator=torch.Generator().manual_seed(0))) == 1
    with pytest.raises(Stopped):
        with stop_on_signals():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
            finally:
                assert stop_sampling.is_set()
                with pytest.raises(SamplingStopped, match="token 0 of 64"):
                    sample(model, ["def f(x):"], 64)
    assert not stop_sampling.is_set()
    assert len(sample(model, ["def f(x):"], 4, generator=torch.Generator().manual_seed(0))) == 1


def test_prefects_termination_signal_dropped_inside_a_finalizer_is_raised_at_the_next_check(
        monkeypatch):
    """While a flow runs, Prefect's handler holds SIGTERM (ours never sees it) and raises its
    TerminationSignal where the main thread is; dropped in a finalizer (seen: distributed's
    gc callback), the run went on and exited 0. The drop itself is noted."""
    import sys
    import time
    import weakref

    from prefect.exceptions import TerminationSignal
    from prefect.utilities.engine import capture_sigterm

    from engine.stopping import stop_sampling
    from flows.stop import raise_if_stopped

    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", dropped.append)

    class Held:
        pass

    with stop_on_signals():
        with capture_sigterm():  # what Prefect's flow engine wraps a flow run in
            held = Held()
            weakref.finalize(held, lambda: (os.kill(os.getpid(), signal.SIGTERM),
                                            time.sleep(1.0)))
            del held
            assert [type(d.exc_value) for d in dropped] == [TerminationSignal]
            assert stop_sampling.is_set()  # a batch in another thread ends at its next token
            try:  # Prefect's own way out of the flow is not interrupted by the check
                raise TerminationSignal(signal.SIGTERM)
            except TerminationSignal:
                raise_if_stopped()
            with pytest.raises(Stopped, match="SIGTERM"):
                raise_if_stopped()
    raise_if_stopped()
    assert not stop_sampling.is_set()


@pytest.mark.parametrize("prefects", [False, True])
def test_a_stop_during_a_held_block_ends_sampling_at_once_and_is_raised_as_the_block_ends(
        prefects):
    """`stops_held`: the local sampler's calls on the main thread run inside Prefect's task
    engine, whose bookkeeping a signal's exception left broken; held, the signal ends the
    batch (`stop_sampling`) and is raised by the handler it would have met once the call is
    out of the engine: ours (`Stopped`) or, while a flow runs, Prefect's (TerminationSignal)."""
    import contextlib

    from prefect.exceptions import TerminationSignal
    from prefect.utilities.engine import capture_sigterm

    from engine.stopping import stop_sampling
    from flows.stop import stops_held

    went_on = []
    with pytest.raises(Stopped) as caught:
        with stop_on_signals():
            with capture_sigterm() if prefects else contextlib.nullcontext():
                with stops_held():
                    os.kill(os.getpid(), signal.SIGTERM)
                    assert stop_sampling.is_set()
                    went_on.append(True)
    # Prefect's way out of a flow re-sends the signal to the run's own handler
    assert isinstance(caught.value.__context__, TerminationSignal) is prefects
    assert went_on == [True]
    assert not stop_sampling.is_set()


def test_stops_held_is_nothing_off_the_main_thread():
    import threading

    from flows.stop import stops_held

    seen = []

    def worker():
        with stops_held():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [before]


def test_the_main_thread_sampler_raises_a_stop_received_before_or_while_its_batch_ran(
        monkeypatch):
    """flows/episodes.py `called_here` (the local sampler on the flow's thread): a stop whose
    exception was dropped (noted in `_received`, `stop_sampling` set) is raised as `Stopped`
    before a batch begins; one noted while the batch ran ends the batch (`SamplingStopped`)
    and comes out as the `Stopped` it is, so the run exits as stopped (128 + signal), not as
    failed. Without a received signal, the batch's own `SamplingStopped` goes on as it is.
    (Seen in CI: a SIGINT as the update ended was dropped, and the evaluation after it failed
    with SamplingStopped, exit 1.)"""
    from engine.stopping import SamplingStopped
    from flows import stop
    from flows.episodes import called_here

    ran = []
    monkeypatch.setattr(stop, "_received", [signal.SIGINT])
    with pytest.raises(Stopped, match="SIGINT"):
        called_here(ran.append, 1)
    assert ran == []

    def batch_sees_a_noted_stop():
        stop._received.append(signal.SIGINT)
        raise SamplingStopped("sampling stopped at token 0 of 16")

    monkeypatch.setattr(stop, "_received", [])
    with pytest.raises(Stopped, match="SIGINT"):
        called_here(batch_sees_a_noted_stop)

    def batch_stopped():
        raise SamplingStopped("sampling stopped at token 3 of 16")

    monkeypatch.setattr(stop, "_received", [])
    with pytest.raises(SamplingStopped):
        called_here(batch_stopped)
    assert called_here(lambda x: x + 1, 1).result() == 2
