"""Run an OpenEnv environment server for the openenv kind, and stop it when the process that
started it is gone (envs/openenv/server.py starts this with the kind's venv's interpreter).

    python launch.py PARENT_PID app MODULE:ATTR PORT
    python launch.py PARENT_PID command ARGV...

`app`: uvicorn serves the ASGI app (what openenv-core's `create_app` returns) on 127.0.0.1:PORT.
`command`: ARGV runs in this process group (it binds the port it was given). Either way a
watchdog ends the server when PARENT_PID is no longer this process's parent: a Dask worker
killed without running its exit handlers leaves no server behind. Standard library and uvicorn
only; runs outside .venv.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time


def _parent_gone(parent: int) -> bool:
    return os.getppid() != parent


def _serve_app(parent: int, target: str, port: int) -> None:
    import uvicorn  # noqa: PLC0415

    def watch() -> None:
        while not _parent_gone(parent):
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
    uvicorn.run(target, host="127.0.0.1", port=port, log_level="warning")


def _serve_command(parent: int, argv: list[str]) -> None:
    # the command stays in this process group (the starter made it ours): stopping the group
    # stops it and whatever it started
    child = subprocess.Popen(argv)

    def stop(*_a) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.killpg(0, signal.SIGTERM)
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(0, signal.SIGKILL)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    while child.poll() is None:
        if _parent_gone(parent):
            stop()
        time.sleep(0.5)
    sys.exit(child.returncode)


def main(argv: list[str]) -> None:
    parent, mode, rest = int(argv[0]), argv[1], argv[2:]
    if mode == "app":
        _serve_app(parent, rest[0], int(rest[1]))
    elif mode == "command":
        _serve_command(parent, rest)
    else:
        sys.exit(f"launch.py: unknown mode {mode!r}")


if __name__ == "__main__":
    # this folder is not the server's: its modules must not shadow the environment's
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    main(sys.argv[1:])
