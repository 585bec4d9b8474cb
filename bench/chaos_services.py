"""The services a chaos run is made against, kept up the way an operator keeps them up (a
Prefect server, a Dask scheduler and nannied workers, restarted when they die), and the
killing of process trees that both the faults and the clean-up need."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from dask_cluster import DASK, free_port  # noqa: E402
from prefect_server import api  # noqa: E402

from flows.env import standalone_env  # noqa: E402


def killtree(pid: int, sig: int = signal.SIGKILL) -> int:
    """Send `sig` to `pid` and every process below it; returns how many it reached."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    n = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(sig)
            n += 1
    return n


def group_kill(proc: subprocess.Popen) -> None:
    """SIGKILL the process group `proc` leads (started with a session of its own), and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def descendants(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.NoSuchProcess):
        return psutil.Process(pid).children(recursive=True)
    return []


class Services:
    """The services an operator keeps up (Prefect server, Dask scheduler, workers), each on a
    fixed port so a restart is found where the run looks for it; `supervise` restarts whatever
    is down and due, like systemd's Restart=always with a delay."""

    def __init__(self, work: Path, workers: int = 2):
        self.work, self.n_workers = work, workers
        self.home = work / "prefect-home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.server_port, self.dask_port = free_port(), free_port()
        self.base = f"http://127.0.0.1:{self.server_port}/api"
        self.address = f"tcp://127.0.0.1:{self.dask_port}"
        self.env = {**standalone_env(), "PREFECT_HOME": str(self.home),
                    "PREFECT_API_URL": self.base, "DO_NOT_TRACK": "1",
                    "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        self.log = open(work / "services.log", "a")
        self.server: subprocess.Popen | None = None
        self.scheduler: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen | None] = [None] * workers
        self.down_until: dict[str, float] = {}  # service -> monotonic time it may restart

    def _popen(self, argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=self.log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def supervise(self) -> None:
        now = time.monotonic()
        if (self.server is None or self.server.poll() is not None) \
                and now >= self.down_until.get("server", 0):
            self.server = self._popen([sys.executable, "-m", "flows.cli", "server", "--port",
                                       str(self.server_port), "--home", str(self.home),
                                       "--no-ui"])
        if (self.scheduler is None or self.scheduler.poll() is not None) \
                and now >= self.down_until.get("scheduler", 0):
            self.scheduler = self._popen([DASK, "scheduler", "--host", "127.0.0.1", "--port",
                                          str(self.dask_port), "--dashboard-address",
                                          "127.0.0.1:0"])
        for i, w in enumerate(self.workers):
            if w is None or w.poll() is not None:
                self.workers[i] = self._popen([DASK, "worker", self.address, "--host",
                                               "127.0.0.1", "--nthreads", "1",
                                               "--no-dashboard"])

    def wait_ready(self, timeout_s: float = 240) -> None:
        """Up and answering: the server's /health, the scheduler with every worker."""
        from distributed import Client

        deadline = time.monotonic() + timeout_s
        while True:
            self.supervise()
            try:
                api(self.base, "GET", "/health", attempts=1)
                with Client(self.address, timeout=10) as c:
                    c.wait_for_workers(self.n_workers, timeout=10)
                return
            except Exception as exc:  # noqa: BLE001  (any failure here means "not yet")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"services not ready after {timeout_s:.0f} s: "
                                       f"{type(exc).__name__}: {exc}") from exc
                time.sleep(1.0)

    def worker_processes(self) -> list[psutil.Process]:
        """The worker processes themselves (the nannies' children)."""
        out = []
        for w in self.workers:
            if w is not None and w.poll() is None:
                with contextlib.suppress(psutil.NoSuchProcess):
                    out += [c for c in psutil.Process(w.pid).children()
                            if "python" in c.name() or "dask" in c.name()]
        return out

    def close(self) -> None:
        for w in self.worker_processes():  # with any sandbox a fault left stopped
            killtree(w.pid)
        for p in [self.server, self.scheduler, *self.workers]:
            if p is not None:
                group_kill(p)
        self.log.close()

