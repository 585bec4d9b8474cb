"""Backend names to implementations."""
from __future__ import annotations

from typing import Callable

from sandbox.base import Sandbox
from sandbox.config import SandboxConfig


def _process(cfg: SandboxConfig) -> Sandbox:
    from sandbox.process import ProcessSandbox

    return ProcessSandbox(use_bwrap=cfg.use_bwrap, use_cgroups=cfg.use_cgroups,
                          tmp_mb=cfg.tmp_mb, strict=cfg.strict,
                          site_packages=cfg.site_packages, fork_server=cfg.fork_server)


def _docker(cfg: SandboxConfig) -> Sandbox:
    from sandbox.docker_backend import DockerSandbox  # imports the docker SDK: only when chosen

    return DockerSandbox(pool_size=cfg.pool_size, cpus=cfg.cpus, workspace_mb=cfg.workspace_mb,
                         max_uses=cfg.max_uses, image=cfg.image, prewarm=cfg.limits())


BACKENDS: dict[str, Callable[[SandboxConfig], Sandbox]] = {
    "process": _process,
    "docker": _docker,
}


def make_sandbox(cfg: SandboxConfig) -> Sandbox:
    """Make the configured backend once per worker process; its `run()` is thread-safe."""
    try:
        factory = BACKENDS[cfg.backend]
    except KeyError:
        raise ValueError(f"sandbox.backend={cfg.backend!r}; expected one of {sorted(BACKENDS)}")
    return factory(cfg)
