"""Progress of long work (the SFT warm start, sampling, rollouts, evaluation, the RL update), so
that a run never looks hung: never more than about ten seconds without a line.

Two outputs, at two rates:
- the log: a record on the `rollforge.progress` logger once the work has gone on for
  `interval_s` (5 s), then at most one every `interval_s`, and at least one every
  `interval_s` + 1 s, from a heartbeat thread, even when one unit of work takes longer than
  that (a sampling batch on a loaded machine); a last one when it ends. Work done within
  `interval_s` says nothing (a run has many short sampling and rollout phases). The flows list
  this logger in PREFECT_LOGGING_EXTRA_LOGGERS (training/env.py), so its records are in the
  Prefect run's logs.
- the terminal (stderr): on a TTY, after `quiet_s` (1 s), one line redrawn in place (a bar,
  carriage return) a few times a second; otherwise each logged line, in the shape of the
  other log lines.

The logger does not propagate, so the terminal gets each line once, from here. Plain Python:
the flows pass nothing in, and training/ imports no Prefect.

    shown = Progress("sft warm start", total=1200, unit="steps")
    for step in shown.over(range(1200)):
        ...
        shown.set(loss=smoothed_loss)
    # 12:00:05.001 | INFO    | progress - sft warm start: 20/1200 steps (2%), loss 2.31,
    #                                      4.02 steps/s, 5s elapsed, 4m53s left
"""
from __future__ import annotations

import contextvars
import logging
import math
import sys
import threading
import time
from typing import Callable, Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")

LOGGER = "rollforge.progress"
LOG = logging.getLogger(LOGGER)
LOG.setLevel(logging.INFO)
LOG.propagate = False  # the terminal line is written here; the root's console would repeat it

BAR_WIDTH = 20
INTERVAL_S = 5.0  # the log's pace: at most a line this often, at least one every INTERVAL_S + BEAT_S
BEAT_S = 1.0  # how often the heartbeat looks whether a line is due


def duration(seconds: float) -> str:
    """12s, 4m05s, 1h02m: short enough for a progress line."""
    if not math.isfinite(seconds):
        return "?"
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _value(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


class Progress:
    """`done` of `total` units of one piece of work, reported as the module docstring says.

    `update(done, **fields)` sets the count and extra fields shown after it (`loss=0.84`,
    `shards="3/8"`); `advance(n)` adds to it. Use it as a context manager (that starts the
    heartbeat and writes the last line), or call `start()` and `close()`. `clock`, `stream` and
    `heartbeat=False` are for tests; `enabled=False` (a process other than rank 0) makes every
    call do nothing."""

    def __init__(self, what: str, total: int, unit: str = "steps", *, start: int = 0,
                 stream: TextIO | None = None, logger: logging.Logger = LOG,
                 clock: Callable[[], float] = time.monotonic, interval_s: float | None = None,
                 redraw_s: float = 0.25, quiet_s: float = 1.0, heartbeat: bool = True,
                 enabled: bool = True) -> None:
        self.what, self.total, self.unit = what, max(0, int(total)), unit
        self.done = self.first = int(start)
        self.fields: dict[str, object] = {}
        self.stream = sys.stderr if stream is None else stream
        self.logger, self.clock = logger, clock
        self.interval_s = INTERVAL_S if interval_s is None else interval_s
        self.redraw_s, self.quiet_s = redraw_s, quiet_s
        self.enabled, self.heartbeat = enabled, heartbeat
        self.tty = enabled and bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = clock()
        self._logged, self._drawn, self._lines = self.t0, -math.inf, 0
        self._lock = threading.RLock()  # the work's thread and the heartbeat both report
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    # -- what the work calls ------------------------------------------------------------------
    def start(self) -> "Progress":
        if not self.enabled:
            return self
        self.t0 = self.clock()
        self._logged = self.t0  # the first line when the work has gone on for interval_s
        self._report()
        if self.heartbeat:
            # The thread runs in a copy of this context: a Prefect run's log handler finds the
            # task run its records belong to there.
            ctx = contextvars.copy_context()
            self._thread = threading.Thread(target=ctx.run, args=(self._beat,), daemon=True,
                                            name=f"progress: {self.what}")
            self._thread.start()
        return self

    def update(self, done: int, **fields) -> None:
        if not self.enabled:
            return
        with self._lock:
            self.done = int(done)
            self.fields.update(fields)
        self._report()

    def advance(self, n: int = 1, **fields) -> None:
        self.update(self.done + n, **fields)

    def set(self, **fields) -> None:
        """Fields shown from the next line on (`loss=0.84`), the count unchanged."""
        if self.enabled:
            with self._lock:
                self.fields.update(fields)

    def over(self, items: Iterable[T]) -> Iterator[T]:
        """`items`, one unit of work each, counted as each one's loop body finishes; the
        reporting starts with the loop and its last line is written when the loop ends, by
        `break` or an exception too (as tqdm wraps a loop)."""
        finished, begun = False, False
        self.start()
        try:
            for item in items:
                if begun:
                    self.advance()
                begun = True
                yield item
            if begun:
                self.advance()
            finished = True
        finally:
            self.close(failed=not finished)

    def tick(self) -> None:
        """What the heartbeat calls about once a second: a line if one is due."""
        if self.enabled:
            self._report()

    def close(self, failed: bool = False) -> None:
        if not self.enabled or self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._report(final="stopped" if failed else "done")

    def __enter__(self) -> "Progress":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(failed=exc_type is not None)

    # -- the lines ----------------------------------------------------------------------------
    def line(self, final: str | None = None) -> str:
        """`what: done/total unit (pct%), fields..., rate, elapsed, time left` (at the end:
        `what: done, done/total unit in elapsed (rate), fields...`)."""
        with self._lock:
            done, fields = self.done, dict(self.fields)
        elapsed = self.clock() - self.t0
        rate = (done - self.first) / elapsed if elapsed > 0 else math.nan
        count = f"{done}/{self.total} {self.unit}"
        speed = f"{rate:.3g} {self.unit}/s" if done > self.first and math.isfinite(rate) else ""
        extra = [f"{k} {_value(v)}" for k, v in fields.items()]
        if final:
            parts = [f"{final}, {count} in {duration(elapsed)}" + (f" ({speed})" if speed else ""),
                     *extra]
        else:
            pct = f" ({100 * done / self.total:.0f}%)" if self.total else ""
            left = (self.total - done) / rate if speed else math.nan
            parts = [count + pct, *extra, *([speed] if speed else []),
                     f"{duration(elapsed)} elapsed", *([f"{duration(left)} left"] if speed else [])]
        return f"{self.what}: " + ", ".join(parts)

    def _report(self, final: str | None = None) -> None:
        with self._lock:
            self._report_locked(final)

    def _report_locked(self, final: str | None) -> None:
        now = self.clock()
        if final:  # the last line, where there were lines before it
            log_due, draw_due = self._lines > 0, self._drawn > -math.inf
        else:
            log_due = now - self._logged >= self.interval_s
            draw_due = (self.tty and now - self.t0 >= self.quiet_s
                        and now - self._drawn >= self.redraw_s)
        if not (log_due or draw_due):
            return
        text = self.line(final)
        if log_due:
            self._logged, self._lines = now, self._lines + 1
            self.logger.info(text)
            if not self.tty:
                self._write(_stamped(text) + "\n")
        if draw_due:
            self._drawn = now
            self._write("\r" + self._bar() + " " + text + "\x1b[K" + ("\n" if final else ""))

    def _bar(self) -> str:
        filled = BAR_WIDTH if not self.total else round(BAR_WIDTH * min(self.done, self.total)
                                                        / self.total)
        return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed terminal must not stop the training
            pass

    def _beat(self) -> None:
        while not self._stop.wait(BEAT_S):
            self.tick()


def _stamped(text: str) -> str:
    """A line in the shape of Prefect's console lines: `12:00:05.001 | INFO    | progress - ...`."""
    now = time.time()
    return f"{time.strftime('%H:%M:%S', time.localtime(now))}.{int(now % 1 * 1000):03d} | " \
           f"INFO    | progress - {text}"
