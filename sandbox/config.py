"""Which sandbox backend to use, its limits, and the options of each backend."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sandbox.base import Limits

Backend = Literal["process", "docker"]


class SandboxConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Backend = Field(
        "process", description="process: the embedded default (bubblewrap namespaces, cgroups, "
        "rlimits; no daemon). docker: containers from a locally built image via a Docker engine.")
    timeout_s: float = Field(5.0, gt=0, description="wall-clock limit of one execution")
    memory_mb: int = Field(512, gt=0, description="memory limit of one execution")
    pids: int = Field(64, gt=0, description="process/thread limit of one execution")
    output_bytes: int = Field(65536, gt=0, description="cap on captured stdout and stderr, each")
    file_size_mb: int = Field(16, gt=0, description="largest file one execution may write")
    strict: bool = Field(
        False, description="process backend: refuse to start (instead of warning) when the host "
        "cannot apply every protection (bubblewrap, cgroups, a private uid)")
    use_bwrap: bool = Field(True, description="process backend: use bubblewrap when it works")
    use_cgroups: bool = Field(True, description="process backend: use cgroup v1 memory/pids "
                              "groups where writable (else rlimits stand in)")
    tmp_mb: int = Field(64, gt=0, description="process backend: size of the private /tmp")
    site_packages: bool = Field(False, description="process backend: show the interpreter's "
                                "site-packages read-only inside the sandbox (data-analysis tasks "
                                "need pandas); off, only the standard library is importable")
    fork_server: bool = Field(
        True, description="process backend: run `python script.py` and `python -c` executions "
        "as forks of a warm zygote that lives inside the same bubblewrap boundary (its own uid, "
        "cgroups, rlimits, workspace and /tmp per execution; same result record): no interpreter "
        "start per execution. Needs bubblewrap and root; elsewhere, and when off, every "
        "execution starts a fresh interpreter. The environment variable ROLLFORGE_FORK_SERVER=0 "
        "turns it off everywhere. See sandbox/FORK_SERVER.md")
    pool_size: int = Field(2, ge=0, description="docker backend: warm containers kept per "
                           "limit pair; 0 starts a fresh container per execution (cold)")
    cpus: float = Field(1.0, gt=0, description="docker backend: CPU limit of one container")
    workspace_mb: int = Field(64, gt=0, description="docker backend: size of the tmpfs /work "
                              "and /tmp of each container")
    max_uses: int = Field(200, gt=0, description="docker backend: executions one warm container "
                          "serves before it is replaced")
    image: str | None = Field(None, description="docker backend: image tag to use instead of "
                              "building `rollforge-sandbox:<recipe digest>`")

    def limits(self) -> Limits:
        return Limits(timeout_s=self.timeout_s, memory_mb=self.memory_mb, pids=self.pids,
                      output_bytes=self.output_bytes, file_size_mb=self.file_size_mb)
