"""A Dask cluster of separate processes on loopback, as an operator starts one: a `dask
scheduler` and `dask worker`s, named by address."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DASK = str(Path(sys.executable).parent / "dask")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scheduler_address(info: Path, proc: subprocess.Popen, timeout_s: float = 120.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the dask scheduler exited with {proc.returncode} at start")
        try:
            return json.loads(info.read_text())["address"]
        except (OSError, ValueError, KeyError):  # not written yet, or half-written
            time.sleep(0.2)
    raise RuntimeError(f"the dask scheduler wrote no {info} within {timeout_s:g}s")


@contextlib.contextmanager
def dask_cluster(log_path: Path, cwd: Path, workers: int = 2, nanny: bool = True,
                 env: dict | None = None):
    """(address, client, processes); every process is killed on the way out. Without a nanny
    a killed worker stays dead."""
    from distributed import Client

    log = open(log_path, "w")
    kw = dict(cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    # port 0: the kernel's pick, bound at once, read back from the scheduler file (a port
    # picked here and bound by the scheduler after its imports could be taken in between)
    info = Path(str(log_path) + ".scheduler.json")
    info.unlink(missing_ok=True)
    procs = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--scheduler-file", str(info),
                               "--dashboard-address", "127.0.0.1:0"], **kw)]
    try:
        address = _scheduler_address(info, procs[0])
        for _ in range(workers):
            procs.append(subprocess.Popen(
                [DASK, "worker", address, "--host", "127.0.0.1", "--nthreads", "1",
                 "--no-dashboard", *([] if nanny else ["--no-nanny"])], **kw))
        client = Client(address, timeout=60)
        client.wait_for_workers(workers, timeout=120)
        yield address, client, procs
        client.close()
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        log.close()
