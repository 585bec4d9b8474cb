"""The sandboxes a repository's tests run in: the worker's backend, with the repository's
environment layer (envs/repo/source.py) in place of the bare interpreter. One per backend and
layer in a process, made on first use."""
from __future__ import annotations

import threading

from sandbox.base import Sandbox

_MADE: dict[tuple[str, tuple[str, ...]], Sandbox] = {}
_LOCK = threading.Lock()


def layer_sandbox(backend: str, test_deps: tuple[str, ...] = ()) -> Sandbox:
    """A sandbox of `backend` ('process' or 'docker') whose interpreter sees the layer: a
    process sandbox over the layer's read-only venv, or Docker containers of the layer image.
    Its interpreter keeps the sandbox's PYTHONHASHSEED=0: a test's output (a set diff quoted in
    a problem statement) is the same on every run, so a rebuild writes the same bytes."""
    key = (backend, tuple(test_deps))
    with _LOCK:
        if key in _MADE:
            return _MADE[key]
        if backend == "docker":
            import docker  # noqa: PLC0415

            from envs.repo.source import layer_image  # noqa: PLC0415
            from sandbox.docker_backend import DockerSandbox  # noqa: PLC0415

            client = docker.from_env(timeout=120)
            sb: Sandbox = DockerSandbox(image=layer_image(client, test_deps), client=client,
                                        pool_size=1, workspace_mb=256, prewarm=None,
                                        fixed_hash_seed=True)
        elif backend == "process":
            from envs.repo.source import layer_python  # noqa: PLC0415
            from sandbox.process import ProcessSandbox  # noqa: PLC0415

            sb = ProcessSandbox(python=layer_python(test_deps), site_packages=True,
                                fork_server=False, fixed_hash_seed=True)
        else:
            raise ValueError(f"sandbox backend {backend!r}: expected 'process' or 'docker'")
        _MADE[key] = sb
        return sb
