"""A clean stop for `rollforge run`: the temporary Prefect API outlives the flow it records.

Without a Prefect API configured, Prefect starts a temporary one as a child process in the run's
process group. A SIGTERM or SIGINT sent to the group (`timeout`, Ctrl-C, `make run` stopped)
reached that server too: it exited first, the flow could not record its final state (it stayed
Running), its client retried against the dead API for minutes, and the server's exit status was
never collected (a zombie). Here the run starts that server itself, in a session of its own so
that a signal to the run's group does not reach it, watched so that it ends once the run's
process is gone however it went (a second signal, SIGKILL), and stopped by the run at its end,
after the flow's last state is recorded.
"""
from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator

from engine.vllm_server import watched

def _server_class():
    import prefect  # noqa: PLC0415
    from prefect.server.api.server import SubprocessASGIServer  # noqa: PLC0415
    from prefect.settings import get_current_settings  # noqa: PLC0415

    class SessionServer(SubprocessASGIServer):
        """Prefect's temporary server (same app, same settings), in a session of its own and
        ended with the process that started it."""

        def _run_uvicorn_command(self) -> subprocess.Popen:
            env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
                   "PREFECT__SERVER_FINAL": "1",
                   **get_current_settings().to_environment_variables(exclude_unset=True)}
            env.pop("PREFECT_API_URL", None)  # the server is the API; it is not its client
            # watched: it ends its session once the run's process is gone however it went
            # (SIGKILL too), from whichever thread started it (engine/vllm_server.py)
            return subprocess.Popen(watched(
                [sys.executable, "-m", "uvicorn", "--app-dir",
                 str(prefect.__module_path__.parent), "--factory",
                 "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port",
                 str(self.port), "--log-level", "error", "--lifespan", "on"], os.getpid()),
                env=env, stdin=subprocess.DEVNULL, start_new_session=True)

    return SessionServer


@contextmanager
def prefect_api() -> Iterator[str | None]:
    """The Prefect API for a run: the configured one (PREFECT_API_URL, from the environment or
    the profile) as it is, or else a temporary server started here and stopped on the way out
    (yields its API URL), so the flow's final state (Completed, Crashed on a signal) is recorded
    before it goes. Prefect must not have started its own temporary server yet."""
    from prefect.context import refresh_global_settings_context  # noqa: PLC0415
    from prefect.settings import PREFECT_API_URL  # noqa: PLC0415

    if PREFECT_API_URL.value():
        yield None
        return
    server = _server_class()()
    server.start()
    os.environ["PREFECT_API_URL"] = server.api_url
    refresh_global_settings_context()  # every thread's client, not only this context's
    try:
        yield server.api_url
    finally:
        _drain_prefect()
        os.environ.pop("PREFECT_API_URL", None)
        refresh_global_settings_context()
        server.stop()


def _drain_prefect(timeout_s: float = 10.0) -> None:
    """Send Prefect's queued logs and events while its API is still up. Left to Prefect's own
    exit hook, they went after the server had stopped, and its client retried each batch with
    back-off for a minute and a half (measured) before the process could end."""
    from prefect.events.worker import EventsWorker  # noqa: PLC0415
    from prefect.logging.handlers import APILogWorker  # noqa: PLC0415

    for service in (APILogWorker, EventsWorker):
        service.drain_all(timeout=timeout_s)


class Stopped(BaseException):
    """The run was asked to stop by a signal (SIGTERM, SIGINT). A BaseException, as
    KeyboardInterrupt is: no `except Exception` on the way out swallows it, and Prefect records
    the flow as Crashed (interrupted), not Failed."""

    def __init__(self, signum: int) -> None:
        import signal  # noqa: PLC0415

        self.signum, self.name = signum, signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGINT raise `Stopped` in the main thread, so the `finally` clauses on the
    way out (the flow's: the trainer group, the engines, the Dask cluster; then the temporary
    API) run instead of the default action ending the process on the spot. Prefect's flow engine
    takes SIGTERM over while the flow runs (to record Crashed) and then re-sends it to this
    handler. Once that handler has run, the default is back: a further signal ends the
    process at once (the temporary API, the Dask workers and the trainer ranks each watch for
    their parent's end and follow it); `second_signal_ends_it` gives the flow's cleanup the
    same behaviour while Prefect's handler is still installed."""
    import signal  # noqa: PLC0415

    from engine.stopping import stop_sampling  # noqa: PLC0415

    def handler(signum, _frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _received.append(signum)
        stop_sampling.set()  # a batch sampling in another thread ends at its next token
        raise Stopped(signum)

    before = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    hook = sys.unraisablehook
    sys.unraisablehook = _noting_dropped_stops(hook)
    try:
        yield
    finally:
        sys.unraisablehook = hook
        _received.clear()
        stop_sampling.clear()
        for s, h in before.items():
            signal.signal(s, h)


_received: list[int] = []  # signals taken by `stop_on_signals`' handler, or dropped


def _noting_dropped_stops(hook):
    """`sys.unraisablehook` that notes a stop Python had to drop, then reports it as `hook`
    does. A signal handler raises where the main thread is; in a garbage-collector callback,
    a weakref finalizer or a `__del__` the exception cannot propagate and Python drops it.
    That happens to Prefect's TerminationSignal too (its handler holds SIGTERM while a flow
    runs, so ours never sees it): seen in distributed's gc-diagnosis callback, after which the
    run went on and exited 0. Noted here, `raise_if_stopped` takes it up."""
    import signal  # noqa: PLC0415

    from prefect.exceptions import TerminationSignal  # noqa: PLC0415

    from engine.stopping import stop_sampling  # noqa: PLC0415

    def noting(unraisable) -> None:
        exc = unraisable.exc_value
        signum = (exc.signum if isinstance(exc, Stopped) else
                  exc.signal if isinstance(exc, TerminationSignal) else
                  signal.SIGINT if isinstance(exc, KeyboardInterrupt) else None)
        if signum is not None:
            _received.append(int(signum))
            stop_sampling.set()
        hook(unraisable)

    return noting


@contextmanager
def stops_held() -> Iterator[None]:
    """SIGTERM and SIGINT held for the block (main thread only; elsewhere a no-op): one that
    comes sets `stop_sampling` at once, so a batch sampling in the block ends at its next
    token, and is delivered, as the block ends, to the handler it would have met (ours, or
    Prefect's while a flow runs), which raises there. For a Prefect task run on the main
    thread: a TerminationSignal raised inside the task engine's own bookkeeping left it broken
    (seen: the run exited 1 with "ValueError: Task run is not set")."""
    import signal  # noqa: PLC0415
    import threading  # noqa: PLC0415

    from engine.stopping import stop_sampling  # noqa: PLC0415

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []

    def hold(signum, _frame):
        got.append(signum)
        stop_sampling.set()

    before = {s: signal.signal(s, hold) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)
        if got:
            handler = before[signal.Signals(got[0])]
            if callable(handler):
                handler(got[0], None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(got[0])


def raise_if_stopped() -> None:
    """Raise `Stopped` in the main thread for a signal already received, unless a `Stopped`
    (or KeyboardInterrupt) is on its way out already. The handler raises it wherever the main
    thread is; when that is a weakref finalizer or a `__del__` (the garbage collector runs them
    at any allocation) Python prints "Exception ignored in" and drops it, and the run went on
    while its Dask workers, which had the same signal, were gone: its next rollouts waited
    for workers until their deadline (seen in CI). The flow calls this as each stage starts
    and while it waits on calls in flight, so a dropped stop is taken up there."""
    import threading  # noqa: PLC0415

    if not _received or threading.current_thread() is not threading.main_thread():
        return
    from prefect.exceptions import TerminationSignal  # noqa: PLC0415

    if isinstance(sys.exc_info()[1], (Stopped, KeyboardInterrupt, TerminationSignal)):
        return  # a cleanup during the stop itself
    raise Stopped(_received[-1])


def second_signal_ends_it() -> None:
    """Called first in the flow's cleanup: when the cleanup runs because of a signal
    (Prefect's TerminationSignal for SIGTERM, `Stopped`, KeyboardInterrupt), a further SIGTERM
    or SIGINT takes the default action and ends the process at once, rather than landing in
    Prefect's handler midway through the cleanup (observed: the cleanup cut short, then the
    process hung at its exit). What it started follows it: each watches for its parent's end.
    Prefect puts the run's own handler back before it re-sends the first signal."""
    import signal  # noqa: PLC0415
    import threading  # noqa: PLC0415

    from prefect.exceptions import TerminationSignal  # noqa: PLC0415

    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers
    if isinstance(sys.exc_info()[1], (TerminationSignal, Stopped, KeyboardInterrupt)):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)


EXIT_GRACE_S = 20.0  # a stopped command's exit, once its cleanup is done, takes 1-3 s


def exit_within(seconds: float, code: int) -> None:
    """End the process with `code` if its exit has not finished `seconds` from now. Called once
    a stopped command has cleaned up and said so: `Stopped` is raised wherever the main thread
    was, and a library whose code it went through can be left with a non-daemon thread nothing
    will wake, which interpreter exit waits for forever (seen in CI: a thread-pool worker blocked
    on its queue; most likely the pool transformers loads weights with, entered as the stop came).
    Past the grace the stacks of every thread are printed to stderr, so such a hang is found,
    and the process ends at once (`os._exit`: the cleanup is done; only the hang is cut)."""
    import faulthandler  # noqa: PLC0415
    import threading  # noqa: PLC0415
    import time  # noqa: PLC0415

    def watch() -> None:
        time.sleep(seconds)
        sys.stderr.write(f"rollforge: the exit did not finish in {seconds:.0f} s; it ends now "
                         f"(exit {code}); the threads still running:\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(code)

    threading.Thread(target=watch, daemon=True, name="rollforge-exit-watch").start()


def report_stop(exc: Stopped, message: str) -> int:
    """What a command does once a signal stopped it and its cleanup is done: say `message` on
    stderr, bound the exit (`exit_within`), return the exit status (128 + the signal)."""
    print(message, file=sys.stderr)
    exit_within(EXIT_GRACE_S, 128 + exc.signum)
    return 128 + exc.signum
