"""A `rollforge run` sent a signal, the way `timeout` and Ctrl-C send it, at a chosen point of its
journal, for the clean-stop test and bench: how long it took to exit and what it left running."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from flows.stages import read_journal

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Stop:
    returncode: int
    seconds_to_exit: float
    left: list[str]  # processes of the run (its session or its descendants) alive after exit


def _reached(run_dir: Path, stage: str, iteration: int) -> bool:
    return any(r["stage"] == stage and r["event"] == "start" and r.get("iteration") == iteration
               for r in read_journal(run_dir))


def _alive(procs: list[psutil.Process], sid: int) -> list[str]:
    """What is still running of `procs` (matched by pid and start time) or of session `sid`."""
    found = {}
    for p in [*procs, *psutil.process_iter()]:
        try:
            mine = p in procs or os.getsid(p.pid) == sid
            if mine and p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                found[p.pid] = f"{p.pid} {' '.join(p.cmdline())[:160]}"
        except (psutil.Error, ProcessLookupError):
            continue
    return sorted(found.values())


def stop_when_stage_starts(cmd: list[str], env: dict, log_path: Path, run_dir: Path, stage: str,
                           iteration: int, reach_s: float, exit_s: float,
                           sig: int = signal.SIGTERM, delay_s: float = 0.0,
                           cwd: Path = ROOT) -> Stop:
    """Start `cmd` in its own session; `delay_s` after `run_dir`'s journal shows `stage`
    starting for `iteration`, send `sig` to the whole process group (as `timeout` and a
    terminal's Ctrl-C do), from `cwd` (another checkout's code). Waits up to `exit_s` for the exit; whatever of the run (its session,
    or a descendant that left it) is alive then is reported, and SIGKILLed so nothing leaks."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    kids: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + reach_s
        while not _reached(run_dir, stage, iteration):
            assert proc.poll() is None, log_path.read_text()[-4000:]
            assert time.monotonic() < deadline, f"the run never reached {stage} of {iteration}"
            time.sleep(0.05)
        time.sleep(delay_s)
        kids = psutil.Process(proc.pid).children(recursive=True)
        t = time.monotonic()
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=exit_s)
        except subprocess.TimeoutExpired:
            pass
        seconds = time.monotonic() - t
        time.sleep(1.0)  # a watched child notices its parent's end within half a second
        left = _alive(kids, proc.pid) + ([] if proc.poll() is not None else [f"{proc.pid} (run)"])
        return Stop(proc.returncode if proc.returncode is not None else -999, seconds, left)
    finally:  # nothing of the run outlives the test, whatever it found
        for p in kids:
            _kill(p)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.poll()


def _kill(p: psutil.Process) -> None:
    try:
        p.kill()
    except psutil.Error:
        pass
