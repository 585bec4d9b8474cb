"""A Dask cluster of separate processes on loopback, as an operator starts one: a `dask
scheduler` and `dask worker`s, named by address."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

DASK = str(Path(sys.executable).parent / "dask")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def dask_cluster(log_path: Path, cwd: Path, workers: int = 2, nanny: bool = True,
                 env: dict | None = None):
    """(address, client, processes); every process is killed on the way out. Without a nanny
    a killed worker stays dead."""
    from distributed import Client

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = open(log_path, "w")
    kw = dict(cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    procs = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--dashboard-address", "127.0.0.1:0"], **kw)]
    try:
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
