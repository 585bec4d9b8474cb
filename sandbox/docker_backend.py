"""The Docker backend: executions in locally built, locked-down containers from a warm pool.

Every container runs with no network, memory (+swap), cpu and pids limits, all capabilities
dropped, no-new-privileges, uid 65534, a read-only root and tmpfs /work and /tmp. Its pid 1 is a
small server (`sandbox/docker_server.py`) that runs one execution per request and then resets the
container (kills every other process, empties /work and /tmp), so a warm container serves the
next execution as if it were fresh. Containers are kept per (memory, pids) limit pair, since those
are fixed when a container is made. `pool_size=0` gives a cold start per execution.

A failure of Docker or of the container itself is returned as `infra_error` (and the container
is thrown away); only what the executed code did is reported as ok/failed/timeout/...
"""
from __future__ import annotations

import atexit
import base64
import logging
import secrets
import threading
import time
from typing import Mapping, Sequence

from sandbox.base import BaseTree, ExecResult, Limits, verdict
from sandbox.docker_container import Container, ContainerError, ContainerSpec, reap
from sandbox.process import python_flags
from sandbox.workspace import check_relpath

log = logging.getLogger(__name__)


class DockerSandbox:
    name = "docker"

    def __init__(self, *, pool_size: int = 2, cpus: float = 1.0, workspace_mb: int = 64,
                 max_uses: int = 200, image: str | None = None, client=None,
                 prewarm: Limits | None = Limits(), fixed_hash_seed: bool = False) -> None:
        import docker  # local: only this backend needs the SDK

        self.client = client or docker.from_env(timeout=60)
        from sandbox.docker_image import ensure_image

        self.image = image or ensure_image(self.client)
        self.pool_size, self.cpus, self.workspace_mb = pool_size, cpus, workspace_mb
        self.max_uses = max_uses
        # the server starts "python" with -I -B; with a fixed hash seed the host names the
        # interpreter and its options itself (sandbox/process.py python_flags)
        self._python = ["python3", *python_flags(True)] if fixed_hash_seed else None
        self._idle: dict[tuple[int, int], list[Container]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.pool_id = secrets.token_hex(6)  # the label its containers carry (POOL_LABEL)
        reaped = reap(self.client)
        if reaped:
            log.info("removed %d sandbox containers left behind by a crashed owner", len(reaped))
        atexit.register(self.close)
        if prewarm is not None and pool_size > 0:
            self._prewarm(prewarm)

    def _spec(self, limits: Limits) -> ContainerSpec:
        return ContainerSpec(self.image, limits.memory_mb, limits.pids, self.cpus,
                             self.workspace_mb, self.pool_id)

    def _prewarm(self, limits: Limits) -> None:
        spec = self._spec(limits)
        made = []
        threads = [threading.Thread(target=lambda: made.append(Container(self.client, spec)))
                   for _ in range(self.pool_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with self._lock:
            self._idle.setdefault((limits.memory_mb, limits.pids), []).extend(made)

    def _acquire(self, limits: Limits) -> Container:
        with self._lock:
            idle = self._idle.get((limits.memory_mb, limits.pids))
            if idle:
                return idle.pop()
        return Container(self.client, self._spec(limits))

    def _release(self, c: Container, healthy: bool) -> None:
        key = (c.spec.memory_mb, c.spec.pids)
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if healthy and not self._closed and c.uses < self.max_uses \
                    and len(idle) < self.pool_size:
                idle.append(c)
                return
        c.remove()

    def run(
        self,
        files: Mapping[str, str | bytes],
        argv: Sequence[str],
        limits: Limits = Limits(),
        stdin: bytes | None = None,
        collect: Sequence[str] = (),
        base: BaseTree | None = None,
        preload: Sequence[str] = (),  # a container has no zygote: its program imports them
    ) -> ExecResult:
        if not argv:
            raise ValueError("argv must name a command, got an empty sequence")
        files = {check_relpath(k): v for k, v in files.items()}
        if self._python is not None and argv[0] == "python":
            argv = [*self._python, *argv[1:]]
        if base is not None:  # the container cannot see the host's folder: the files go along
            files = {**base.read(skip=files), **files}
        collect = [check_relpath(c) for c in collect]
        start = time.perf_counter()
        try:
            c = self._acquire(limits)
        except ContainerError as exc:
            return ExecResult("infra_error", None, "", "", time.perf_counter() - start,
                              self.name, error=str(exc))
        healthy = False
        try:
            c.reset_peak()
            ooms_before = c.oom_kills()
            try:
                resp = c.execute(dict(files), list(argv), stdin, limits.timeout_s,
                                 limits.output_bytes, limits.file_size_mb, collect)
            except ContainerError as exc:
                if c.oom_killed_flag():  # the code's memory use took the whole container down
                    return ExecResult("memory_exceeded", 137, "", "",
                                      time.perf_counter() - start, self.name,
                                      peak_memory_mb=c.peak_mb())
                return ExecResult("infra_error", None, "", "", time.perf_counter() - start,
                                  self.name, error=str(exc))
            healthy = True
            ooms_after = c.oom_kills()
            code = resp["returncode"]
            out = base64.b64decode(resp["stdout"]).decode("utf-8", errors="replace")
            err = base64.b64decode(resp["stderr"]).decode("utf-8", errors="replace")
            if ooms_before is not None and ooms_after is not None:
                oom = ooms_after > ooms_before
            else:  # remote engine: no cgroup to read; a SIGKILL we did not send is the OOM killer
                oom = code == -9 and not resp["timed_out"] and not resp["overflow"]
            status = verdict(timed_out=resp["timed_out"], oom=oom, overflow=resp["overflow"],
                             exit_code=code, stderr=err)
            collected = {k: base64.b64decode(v).decode("utf-8", errors="replace")
                         for k, v in resp["files"].items()}
            return ExecResult(status, code, out, err, float(resp["duration_s"]), self.name,
                              peak_memory_mb=c.peak_mb(), files=collected)
        finally:
            self._release(c, healthy)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [c for cs in self._idle.values() for c in cs]
            self._idle.clear()
        for c in idle:
            c.remove()
