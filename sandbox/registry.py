"""Backend names to implementations."""
from __future__ import annotations

from typing import Callable

from sandbox.base import Sandbox
from sandbox.config import SandboxConfig
from sandbox.process import ProcessSandbox

BACKENDS: dict[str, Callable[[SandboxConfig], Sandbox]] = {
    "process": lambda cfg: ProcessSandbox(),
}


def make_sandbox(cfg: SandboxConfig) -> Sandbox:
    try:
        factory = BACKENDS[cfg.backend]
    except KeyError:
        raise ValueError(f"sandbox.backend={cfg.backend!r}; expected one of {sorted(BACKENDS)}")
    return factory(cfg)
