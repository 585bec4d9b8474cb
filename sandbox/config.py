"""Which sandbox backend to use and its limits."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sandbox.base import Limits

Backend = Literal["process"]


class SandboxConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Backend = Field("process", description="process: the embedded default (no daemon)")
    timeout_s: float = Field(5.0, gt=0, description="wall-clock limit of one execution")
    memory_mb: int = Field(512, gt=0, description="memory limit of one execution")
    pids: int = Field(64, gt=0, description="process/thread limit of one execution")
    output_bytes: int = Field(65536, gt=0, description="cap on captured stdout and stderr, each")

    def limits(self) -> Limits:
        return Limits(timeout_s=self.timeout_s, memory_mb=self.memory_mb, pids=self.pids,
                      output_bytes=self.output_bytes)
