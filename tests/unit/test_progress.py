"""The progress reporter of long work (training/progress.py): its pace with a fake clock, the
shape of its lines, the TTY line redrawn in place, the heartbeat, and the step lines of a real
(tiny) SFT warm start."""
from __future__ import annotations

import io
import logging
import re
import time

import pytest

from training import progress as progress_mod
from training.progress import Progress, duration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def log():
    logger = logging.getLogger("rollforge.progress.test")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = Records()
    logger.addHandler(handler)
    yield logger, handler.lines
    logger.removeHandler(handler)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_come_at_most_every_interval_and_the_heartbeat_fills_a_silence(log):
    logger, lines = log
    clock, out = Clock(), io.StringIO()
    p = Progress("sft warm start", 100, "steps", logger=logger, clock=clock, stream=out,
                 interval_s=5.0, heartbeat=False).start()
    for step in range(1, 5):  # 1 step a second: nothing for the first 4 s
        clock.now += 1
        p.update(step, loss=2.5)
    assert lines == []
    clock.now += 1
    p.update(5, loss=2.3456789)
    # 5 steps in 5 s: 1 step/s, 95 steps left: 1m35s
    assert lines == ["sft warm start: 5/100 steps (5%), loss 2.346, 1 steps/s, 5s elapsed, "
                     "1m35s left"]
    clock.now += 4.9  # one slow step: the heartbeat's tick finds no line due yet ...
    p.tick()
    assert len(lines) == 1
    clock.now += 0.1  # ... and then one, with the same count and the time gone by
    p.tick()
    assert lines[-1].startswith("sft warm start: 5/100 steps (5%)") and "10s elapsed" in lines[-1]
    clock.now += 1
    p.update(11)
    p.close()  # the last line comes whatever the pace: 11 steps in 11 s
    assert lines[-1] == "sft warm start: done, 11/100 steps in 11s (1 steps/s), loss 2.346"
    assert len(lines) == 3
    plain = out.getvalue().splitlines()  # not a TTY: the same lines, stamped
    assert len(plain) == 3 and all(re.match(r"\d\d:\d\d:\d\d\.\d{3} \| INFO    \| progress - ", x)
                                   for x in plain)
    assert plain[1].endswith(lines[1])


def test_work_done_within_the_interval_says_nothing(log):
    logger, lines = log
    clock, out = Clock(), Terminal()
    with Progress("sampling", 16, "sequences", logger=logger, clock=clock, stream=out,
                  heartbeat=False) as p:
        clock.now += 0.9
        p.update(16)
    assert lines == [] and out.getvalue() == ""


def test_on_a_tty_one_line_is_redrawn_in_place_and_the_log_keeps_its_pace(log):
    logger, lines = log
    clock, term = Clock(), Terminal()
    with Progress("rollouts", 8, "steps", logger=logger, clock=clock, stream=term,
                  interval_s=5.0, redraw_s=0.25, quiet_s=1.0, heartbeat=False) as p:
        for done in range(1, 9):
            clock.now += 0.5
            p.update(done, shards=f"{done // 4}/2")
    text = term.getvalue()
    assert "\n" not in text[:-1] and text.endswith("\n")  # one line, ended once at the end
    draws = text.split("\r")[1:]
    assert len(draws) == 8  # from 1 s on, the updates 0.5 s apart, then the end
    assert draws[2].startswith("[##########..........] rollouts: 4/8 steps (50%), shards 1/2")
    assert draws[-1].startswith("[####################] rollouts: done, 8/8 steps in 4s")
    assert lines == []  # 4 s never reached the log's 5 s pace


def test_a_loop_through_over_is_counted_and_an_exception_ends_it_as_stopped(log):
    logger, lines = log
    kw = dict(logger=logger, clock=Clock(), stream=io.StringIO(), interval_s=0, heartbeat=False)
    p = Progress("work", 3, "items", **kw)
    assert list(p.over("abc")) == ["a", "b", "c"]
    assert [x.split(",")[0] for x in lines] == ["work: 0/3 items (0%)", "work: 1/3 items (33%)",
                                                "work: 2/3 items (67%)", "work: 3/3 items (100%)",
                                                "work: done"]
    lines.clear()
    with pytest.raises(RuntimeError):
        for i in Progress("work", 3, "items", **kw).over(range(3)):
            if i == 1:
                raise RuntimeError("boom")
    assert lines[-1].startswith("work: stopped, 1/3 items")
    lines.clear()
    assert list(Progress("none", 0, "items", **kw).over([])) == []
    assert lines[-1] == "none: done, 0/0 items in 0s"


def test_the_heartbeat_thread_writes_a_line_while_a_long_unit_of_work_goes_on(log, monkeypatch):
    logger, lines = log
    monkeypatch.setattr(progress_mod, "BEAT_S", 0.02)
    with Progress("slow", 2, "batches", logger=logger, stream=io.StringIO(), interval_s=0.05):
        deadline = time.monotonic() + 30
        while len(lines) < 3 and time.monotonic() < deadline:  # no update comes meanwhile
            time.sleep(0.01)
    assert len(lines) >= 4 and all(x.startswith("slow: 0/2 batches") for x in lines[:3])
    assert lines[-1].startswith("slow: done")


def test_durations_read_as_a_person_says_them():
    assert [duration(s) for s in (0, 12.4, 65, 3599, 3720, float("nan"))] == [
        "0s", "12s", "1m05s", "59m59s", "1h02m", "?"]


def test_a_warm_start_of_a_few_steps_logs_its_steps_with_loss_and_time_left(tmp_path, caplog,
                                                                            monkeypatch):
    from training.config import PolicyConfig, RLConfig, SFTConfig
    from training.trainer import sft_warm_start

    monkeypatch.setattr(progress_mod, "INTERVAL_S", 0.0)  # every step a line
    logger = logging.getLogger(progress_mod.LOGGER)
    logger.addHandler(caplog.handler)  # the logger does not propagate to the root's
    try:
        with caplog.at_level(logging.INFO, logger=progress_mod.LOGGER):
            sft_warm_start(str(tmp_path), ["def f():"] * 4, ["    return 1"] * 4,
                           PolicyConfig(n_layer=1, n_embd=32, n_head=2, max_len=64),
                           SFTConfig(steps=3, batch_size=4, warmup_steps=1), RLConfig(), 0)
    finally:
        logger.removeHandler(caplog.handler)
    msgs = [r.getMessage() for r in caplog.records if r.name == progress_mod.LOGGER]
    assert msgs[0].startswith("sft warm start: 0/3 steps (0%)")
    for step in (1, 2, 3):
        assert re.search(rf"^sft warm start: {step}/3 steps \(\d+%\), loss \d[\d.]*, "
                         r"[\d.e+-]+ steps/s, \d+s elapsed, \d+s left$",
                         next(m for m in msgs if m.startswith(f"sft warm start: {step}/3")))
    assert msgs[-1].startswith("sft warm start: done, 3/3 steps in ")
