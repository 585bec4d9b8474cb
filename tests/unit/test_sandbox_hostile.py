"""Every hostile program is contained and reported by the process backend, the host is unharmed,
and the next execution works normally."""
from __future__ import annotations

import os
import secrets
import socket
import threading

import pytest

from sandbox.hostile import HOSTILE, HostContext, problems
from sandbox.process import ProcessSandbox


@pytest.fixture(scope="module")
def sandbox():
    sbx = ProcessSandbox()
    if sbx.missing:  # the suite is about the full set; degraded hosts are covered elsewhere
        pytest.skip(f"host cannot apply every protection: {sbx.missing}")
    return sbx


class Listener:
    """A TCP listener on the host's loopback that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
                self.accepted += 1
                conn.close()
            except OSError:
                pass

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self.sock.close()


@pytest.fixture
def host(tmp_path, monkeypatch):
    token = secrets.token_hex(8)
    secret = "rollforge-secret-" + secrets.token_hex(8)
    outside = str(tmp_path / f"outside-{token}.txt")
    with open(outside + ".secret", "w") as fh:
        fh.write(secret)
    monkeypatch.setenv("ROLLFORGE_TEST_SECRET", secret)
    listener = Listener()
    yield HostContext(token, listener.port, secret, outside), listener
    listener.close()


@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.name for h in HOSTILE])
def test_hostile_program_is_contained_and_next_execution_works(sandbox, host, hostile):
    ctx, listener = host
    result = sandbox.run({"main.py": ctx.fill(hostile)}, ["python", "main.py"], hostile.limits)
    assert problems(hostile, result, ctx, listener.accepted) == [], result
    after = sandbox.run({"main.py": "print(6 * 7)"}, ["python", "main.py"])
    assert (after.status, after.stdout) == ("ok", "42\n"), after


def test_private_uid_cannot_read_host_root_files_even_inside_the_workspace_mount(sandbox, tmp_path):
    result = sandbox.run({"main.py": "import os\nprint(os.getuid(), os.geteuid())"},
                         ["python", "main.py"])
    uid = int(result.stdout.split()[0])
    assert uid not in (0, os.getuid()) and uid >= 2_000_000
