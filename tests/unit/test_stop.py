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
