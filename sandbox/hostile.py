"""A catalogue of hostile programs and the verdicts a sandbox may give each.

Shared by the tests of every backend (and handy by hand): each program attacks one protection.
`{token}`, `{port}`, `{secret}` and `{outside}` are filled in by the caller: a unique string to
find leftover processes by, a TCP port listening on the host's loopback, a secret the host
holds in its environment and in a file, and a host path outside the workspace.
"""
from __future__ import annotations

from dataclasses import dataclass

from sandbox.base import Limits


@dataclass(frozen=True)
class Hostile:
    name: str
    source: str
    limits: Limits
    allowed: frozenset[str]  # statuses that show it was contained and reported


_SHORT = Limits(timeout_s=3.0, memory_mb=128, pids=32, output_bytes=4096, file_size_mb=8)
_NOT_OK = frozenset({"failed", "timeout", "memory_exceeded", "output_truncated"})

HOSTILE: tuple[Hostile, ...] = (
    Hostile("fork_bomb", """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
""", Limits(timeout_s=2.0, memory_mb=256, pids=32), frozenset({"timeout", "memory_exceeded"})),
    Hostile("memory_bomb", """
chunks = []
while True:
    chunks.append(bytearray(16 << 20))
""", _SHORT, frozenset({"memory_exceeded"})),
    Hostile("infinite_loop", "while True:\n    pass\n", Limits(timeout_s=1.5),
            frozenset({"timeout"})),
    Hostile("output_flood", """
import sys
while True:
    sys.stdout.write("x" * 65536)
""", _SHORT, frozenset({"output_truncated"})),
    # Prints how many 4 MiB files it wrote where before it was stopped; `problems` checks the
    # total stays within the limits.
    Hostile("disk_fill", """
import os
for where in (".", "/tmp"):
    i = 0
    try:
        while True:
            with open(os.path.join(where, "fill%d" % i), "wb") as fh:
                fh.write(b"x" * (4 << 20))
            i += 1
    except OSError as exc:
        print(where, i, exc.errno, flush=True)
raise SystemExit(1)
""", _SHORT, _NOT_OK),
    Hostile("network_to_host_loopback", """
import socket
s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
s.sendall(b"{token}")
print("connected")
""", _SHORT, frozenset({"failed"})),
    # Prints whatever it could find; the caller checks the secret is not in the output.
    Hostile("read_host_env_and_files", """
import os
print(dict(os.environ))
for path in ({outside!r} + ".secret", "/proc/1/environ", "/etc/shadow", "/root/.bash_history"):
    try:
        with open(path, "rb") as fh:
            print(path, fh.read()[:2000])
    except OSError as exc:
        print(path, "refused", exc.errno)
""", _SHORT, frozenset({"ok"})),
    Hostile("write_outside_workspace", """
wrote = []
for path in ({outside!r}, "/etc/rollforge-{token}", "/usr/rollforge-{token}",
             "/rollforge-{token}"):
    try:
        with open(path, "w") as fh:
            fh.write("pwned")
        wrote.append(path)
    except OSError:
        pass
print("wrote", wrote)
""", _SHORT, frozenset({"ok"})),
    Hostile("kill_parent", """
import os, signal
for sig in (signal.SIGTERM, signal.SIGSTOP, signal.SIGKILL):
    for target in (os.getppid(), 1):
        try:
            os.kill(target, sig)
        except OSError:
            pass
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
print("survived")
""", _SHORT, frozenset({"ok", "failed"})),
    Hostile("leave_child_running", """
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # {token}"],
                 start_new_session=True)
if os.fork() == 0:
    os.setsid()
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)  # {token}"])
print("left children behind")
""", _SHORT, frozenset({"ok"})),
)

BY_NAME = {h.name: h for h in HOSTILE}


@dataclass(frozen=True)
class HostContext:
    """What the host prepared for one hostile run and can inspect afterwards."""

    token: str
    port: int
    secret: str
    outside: str  # a host path outside the workspace; `outside + ".secret"` holds the secret

    def fill(self, h: Hostile) -> str:
        return (h.source.replace("{token}", self.token).replace("{port}", str(self.port))
                .replace("{outside!r}", repr(self.outside)))


def leftover_processes(token: str) -> list[int]:
    """Host pids whose command line carries `token` (containers' processes are visible too)."""
    import os

    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if token.encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def problems(h: Hostile, result, ctx: HostContext, connections: int) -> list[str]:
    """Ways in which `result` shows `h` was not contained. Empty means contained and reported.

    `connections` is how many connections the host's loopback listener received.
    """
    import os

    out = []
    if result.status not in h.allowed:
        out.append(f"status {result.status!r}, expected one of {sorted(h.allowed)}")
    text = result.stdout + result.stderr
    if ctx.secret in text:
        out.append("the host's secret reached the executed code")
    if connections:
        out.append(f"the host's loopback listener accepted {connections} connection(s)")
    for path in (ctx.outside, f"/etc/rollforge-{ctx.token}", f"/usr/rollforge-{ctx.token}",
                 f"/rollforge-{ctx.token}"):
        if os.path.exists(path):
            out.append(f"a file appeared on the host outside the workspace: {path}")
    left = leftover_processes(ctx.token)
    if left:
        out.append(f"processes left running after the execution: {left}")
    if h.name == "disk_fill":
        for line in result.stdout.splitlines():
            where, count = line.split()[:2]
            if int(count) * 4 > 2 * h.limits.memory_mb:
                out.append(f"wrote {int(count) * 4} MiB to {where}")
    if h.name == "output_flood" and len(result.stdout.encode()) > h.limits.output_bytes:
        out.append(f"captured {len(result.stdout)} bytes past the cap")
    return out


class Listener:
    """A TCP listener on the host's loopback that counts the connections it accepts."""

    def __init__(self) -> None:
        import socket
        import threading

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


def make_context(directory: str, port: int) -> HostContext:
    """A fresh token and secret; the secret is written next to `outside`. The caller also puts
    the secret in its own environment (`ROLLFORGE_TEST_SECRET`), which must not leak either."""
    import os
    import secrets

    token = secrets.token_hex(8)
    secret = "rollforge-secret-" + secrets.token_hex(8)
    outside = os.path.join(directory, f"outside-{token}.txt")
    with open(outside + ".secret", "w") as fh:
        fh.write(secret)
    return HostContext(token, port, secret, outside)
