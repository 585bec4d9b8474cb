"""The environment server an openenv source names: an address (`url`), or one the run starts
(`app`: an ASGI app as `module:attr`, served by uvicorn; `command`: any argv that serves on the
port it is given) as a subprocess on 127.0.0.1, from the kind's own venv (envs/openenv/
setup_venv.sh; ROLLFORGE_OPENENV_VENV names another).

A started server belongs to the process that started it: each process that plays the kind (the
flow, each Dask worker) starts its own on first use and stops it when it exits (an exit handler,
and envs/openenv/launch.py's watchdog when the process is killed). Episodes never depend on
which server they reach: an episode is replayed from its reset on every step
(envs/openenv/env.py), so no server holds an episode between two steps.
"""
from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from envs.base import EnvError
from envs.openenv.client import ServerUnreachable, get_json

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_VENV = ROOT / ".openenv-venv"
VENV_ENV = "ROLLFORGE_OPENENV_VENV"
SETUP = "bash envs/openenv/setup_venv.sh"
LAUNCH = Path(__file__).resolve().parent / "launch.py"


def venv_python() -> str:
    """The kind's venv's interpreter; EnvError with the command that builds it when missing."""
    venv = Path(os.environ.get(VENV_ENV) or DEFAULT_VENV)
    exe = venv / "bin" / "python"
    if not exe.is_file():
        raise EnvError(f"the openenv kind starts servers from its own venv at {venv} "
                       f"(openenv-core's gradio pins pillow<13, against .venv's pins): build it "
                       f"with `{SETUP}` (set {VENV_ENV} to use another), or give the server's "
                       "`url`")
    return str(exe)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server subprocess on loopback; `url` once it answers `GET /health`."""

    def __init__(self, argv: list[str], what: str, cwd: str | None, python_path: list[str],
                 start_timeout_s: float) -> None:
        self.what = what
        # The port is picked free here and bound by the server after its imports: another
        # process can take it in between; then the server starts again on another one.
        for attempt in range(3):
            self._launch(argv, cwd, python_path)
            if self._wait(start_timeout_s, retry_port=attempt < 2):
                return

    def _launch(self, argv: list[str], cwd: str | None, python_path: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        exe = venv_python()
        env = dict(os.environ)
        # the venv's bin first: a `command` of `python ...` or `uvicorn ...` runs the venv's
        env["PATH"] = os.pathsep.join([str(Path(exe).parent), env.get("PATH", "")])
        if python_path:  # the user's folders first: the module the app names lives there
            env["PYTHONPATH"] = os.pathsep.join(
                [str(Path(p).resolve()) for p in python_path]
                + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        argv = [a.replace("{port}", str(self.port)) for a in argv]
        # its output to a file: a pipe nobody reads would block a server that logs
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([exe, str(LAUNCH), str(os.getpid()), *argv],
                                     cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def _wait(self, timeout_s: float, retry_port: bool) -> bool:
        """True once it answers; False when it exited on a port taken and may try another."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                err = self.log.read().decode(errors="replace")
                if retry_port and "address already in use" in err.lower():
                    self.log.close()
                    return False
                raise EnvError(f"OpenEnv server {self.what} exited with code "
                               f"{self.proc.returncode} before it answered: {err.strip()[-800:]}")
            try:
                get_json(self.url, "/health", 1.0)
                return True
            except ServerUnreachable:
                time.sleep(0.1)
        self.stop()
        raise EnvError(f"OpenEnv server {self.what} did not answer GET /health at {self.url} "
                       f"within {timeout_s:g} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.log.close()


_lock = threading.Lock()
_servers: dict[tuple, Server] = {}


def started(app: str | None, command: list[str] | None, cwd: str | None,
            python_path: list[str], start_timeout_s: float) -> Server:
    """This process's server for (app | command, cwd, python_path), started on first use."""
    key = (app, tuple(command or ()), cwd, tuple(python_path), os.getpid())
    with _lock:
        srv = _servers.get(key)
        if srv is not None and srv.proc.poll() is None:
            return srv
        argv = ["app", app, "{port}"] if app else ["command", *(command or [])]
        what = f"app {app!r}" if app else f"command {command!r}"
        srv = _servers[key] = Server(argv, what, cwd, python_path, start_timeout_s)
        return srv


def stop_all() -> None:
    """Stop every server this process started (at exit; tests call it too)."""
    with _lock:
        for key, srv in list(_servers.items()):
            if key[-1] == os.getpid():
                srv.stop()
            _servers.pop(key, None)


atexit.register(stop_all)
