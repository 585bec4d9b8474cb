"""A `rollforge run` SIGKILLed at a chosen point of its journal, for the resume tests."""
import os
import signal
import subprocess
import time
from pathlib import Path

from flows.stages import read_journal

ROOT = Path(__file__).resolve().parents[2]


def kill_when_stage_starts(cmd: list[str], env: dict, log_path: Path, run_dir: Path, stage: str,
                           iteration: int, timeout_s: float) -> subprocess.Popen:
    """Start `cmd` in its own session and SIGKILL the session (the flow, its Dask workers, its
    temporary API) as soon as `run_dir`'s journal shows `stage` starting for `iteration`;
    returns the reaped process."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + timeout_s
            while not any(r["stage"] == stage and r["event"] == "start"
                          and r["iteration"] == iteration for r in read_journal(run_dir)):
                assert proc.poll() is None, log_path.read_text()[-4000:]
                assert time.monotonic() < deadline, \
                    f"the run never reached {stage} of iteration {iteration}"
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    return proc
