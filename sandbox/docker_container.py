"""One sandbox container on the host side: start it, talk to its server, reset, remove; and the
reaper for containers that a crashed owner left behind."""
from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import socket
import struct
import time
from dataclasses import dataclass

from sandbox.docker_server import SERVER_SOURCE

LABEL = "rollforge.sandbox"
OWNER_LABEL = "rollforge.owner"
# one DockerSandbox's containers (`docker ps --filter label=rollforge.pool=ID`): a process may
# hold several sandboxes, each closing only its own
POOL_LABEL = "rollforge.pool"
_MARK = b"\n@rollforge "
_CGROUP_ROOT = "/sys/fs/cgroup/memory"
log = logging.getLogger(__name__)


class ContainerError(RuntimeError):
    """The container or its server failed (not the executed code): an infra_error."""


def _proc_start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_id() -> str:
    """host:pid:start-time of this process; a restarted pid has another start time."""
    return f"{socket.gethostname()}:{os.getpid()}:{_proc_start(os.getpid())}"


def owner_alive(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    if host != socket.gethostname():
        return True  # another host's container: not ours to judge
    pid, _, start = rest.partition(":")
    return pid.isdigit() and _proc_start(int(pid)) == start


def remove_container(container, attempts: int = 5) -> bool:
    """Force-remove `container`, retrying: on a busy engine `rm -f` can fail transiently ("did
    not receive an exit event", "removal already in progress", a client timeout), and a
    container given up on stays until its owner is gone and the reaper runs. True when it is
    gone."""
    from docker.errors import NotFound

    for attempt in range(attempts):
        try:
            container.remove(force=True)
            return True
        except NotFound:
            return True
        except Exception as exc:  # noqa: BLE001 - any engine error is worth another try
            if attempt == attempts - 1:
                log.warning("could not remove sandbox container %s: %s", container.id[:12], exc)
                return False
            time.sleep(0.25 * 2 ** attempt)
    return False


def reap(client) -> list[str]:
    """Remove sandbox containers whose owning process on this host is gone. Returns their ids."""
    removed = []
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        if not owner_alive(c.labels.get(OWNER_LABEL, "")):
            if remove_container(c, attempts=2):
                removed.append(c.id)
    return removed


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    memory_mb: int
    pids: int
    cpus: float
    workspace_mb: int
    pool: str = ""

    def create_kwargs(self) -> dict:
        ws = f"size={self.workspace_mb}m,mode=1777,nosuid,nodev"
        return dict(
            image=self.image,
            command=["python3", "-I", "-S", "-c", SERVER_SOURCE],
            detach=True, stdin_open=True, tty=False,
            network_mode="none", hostname="sandbox", ipc_mode="private",
            mem_limit=f"{self.memory_mb}m", memswap_limit=f"{self.memory_mb}m",
            pids_limit=self.pids + 1,  # + the server itself
            nano_cpus=int(self.cpus * 1e9),
            cap_drop=["ALL"], security_opt=["no-new-privileges"],
            user="65534:65534", read_only=True,
            tmpfs={"/work": ws, "/tmp": ws},
            environment={"HOME": "/work", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
                         "PYTHONHASHSEED": "0", "PATH": "/usr/local/bin:/usr/bin:/bin"},
            ulimits=[{"Name": "nofile", "Soft": 256, "Hard": 256},
                     {"Name": "core", "Soft": 0, "Hard": 0}],
            labels={LABEL: "1", OWNER_LABEL: owner_id(), POOL_LABEL: self.pool},
        )


class Container:
    """A started sandbox container whose pid-1 server answers requests on an attached socket."""

    def __init__(self, client, spec: ContainerSpec, ready_timeout_s: float = 30.0) -> None:
        self.spec = spec
        self.uses = 0
        self._buf = b""
        self._pending = b""
        try:
            self.container = client.containers.create(**spec.create_kwargs())
        except Exception as exc:
            raise ContainerError(f"create: {exc}") from exc
        try:
            self._sock_io = client.api.attach_socket(
                self.container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            self._sock = self._sock_io._sock
            self.container.start()
            self._cgroup = os.path.join(_CGROUP_ROOT, "docker", self.container.id)
            self._read_response(time.monotonic() + ready_timeout_s, nonce=None)
        except Exception as exc:
            self.remove()
            raise ContainerError(f"start: {exc}") from exc

    # -- the multiplexed attach stream ----------------------------------------------------
    def _recv_stdout(self, deadline: float) -> None:
        """Read one frame of the attach stream; stdout payload goes into the buffer."""
        while True:
            while len(self._pending) < 8:
                self._pending += self._recv(deadline)
            kind, size = struct.unpack(">BxxxL", self._pending[:8])
            while len(self._pending) < 8 + size:
                self._pending += self._recv(deadline)
            payload, self._pending = self._pending[8:8 + size], self._pending[8 + size:]
            if kind == 1:
                self._buf += payload
                return

    def _recv(self, deadline: float) -> bytes:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ContainerError("no answer from the sandbox server before the deadline")
        self._sock.settimeout(left)
        try:
            data = self._sock.recv(1 << 20)
        except socket.timeout:
            raise ContainerError("no answer from the sandbox server before the deadline")
        if not data:
            raise ContainerError("the sandbox server closed the stream (container exited)")
        return data

    def _read_response(self, deadline: float, nonce: str | None) -> dict:
        while True:
            start = self._buf.find(_MARK)
            if start >= 0:
                end = self._buf.find(b"\n", start + len(_MARK))
                if end >= 0:
                    line = self._buf[start + len(_MARK):end]
                    self._buf = self._buf[end:]
                    try:
                        msg = json.loads(line)
                    except ValueError:
                        continue
                    if nonce is None and msg.get("ready"):
                        return msg
                    if nonce is not None and msg.get("nonce") == nonce:
                        return msg
                    continue
            self._recv_stdout(deadline)

    # -- requests -------------------------------------------------------------------------
    def execute(self, files: dict, argv: list[str], stdin: bytes | None, timeout_s: float,
                output_bytes: int, file_size_mb: int, collect: list[str]) -> dict:
        nonce = secrets.token_hex(16)
        req = {"nonce": nonce, "argv": argv, "timeout_s": timeout_s,
               "output_bytes": output_bytes, "file_size_mb": file_size_mb, "collect": collect,
               "stdin": base64.b64encode(stdin).decode() if stdin is not None else None,
               "files": {k: base64.b64encode(v if isinstance(v, bytes) else v.encode()).decode()
                         for k, v in files.items()}}
        self.uses += 1
        self._buf = b""
        try:
            self._sock.settimeout(30.0)
            self._sock.sendall(json.dumps(req).encode() + b"\n")
        except OSError as exc:
            raise ContainerError(f"send: {exc}") from exc
        resp = self._read_response(time.monotonic() + timeout_s + 15.0, nonce)
        if "server_error" in resp:
            raise ContainerError(f"sandbox server: {resp['server_error']}")
        return resp

    # -- host-side cgroup (where the engine is local and uses cgroup v1) -------------------
    def reset_peak(self) -> None:
        try:
            with open(os.path.join(self._cgroup, "memory.max_usage_in_bytes"), "w") as fh:
                fh.write("0")
        except OSError:
            pass

    def peak_mb(self) -> float | None:
        try:
            with open(os.path.join(self._cgroup, "memory.max_usage_in_bytes")) as fh:
                return int(fh.read()) / (1024 * 1024)
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int | None:
        try:
            with open(os.path.join(self._cgroup, "memory.oom_control")) as fh:
                for line in fh:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return None

    def oom_killed_flag(self) -> bool:
        try:
            self.container.reload()
            return bool(self.container.attrs["State"].get("OOMKilled"))
        except Exception:
            return False

    def remove(self) -> None:
        try:
            self._sock_io.close()
        except Exception:
            pass
        remove_container(self.container)


def engine_unavailable() -> str | None:
    """Why no Docker engine can be used here (None when one answers)."""
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed"
    try:
        docker.from_env(timeout=10).ping()
        return None
    except Exception as exc:
        why = f"no Docker engine answers ({type(exc).__name__}: {exc})"
        try:
            with open("/tmp/rollforge-docker/status") as fh:
                why += f"; scripts/setup_docker.sh said: {fh.read().strip()}"
        except OSError:
            why += "; run scripts/setup_docker.sh to install and start one"
        return why
