"""The sandbox interface: every backend takes files and a command and returns an `ExecResult`.

A backend never raises for something the executed code did; it returns a result record. A failure
of the sandbox itself (it could not start, its workspace could not be made) is `infra_error`, which
callers retry and never score as the candidate's failure. Once the program has run, nothing is
`infra_error` any more: reading back what it left (its output, its collected files) is the
program's own result, so a candidate can never turn its failure into "not scored".
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Literal, Mapping, Protocol, Sequence

Status = Literal["ok", "failed", "timeout", "memory_exceeded", "output_truncated", "infra_error"]
STATUSES: tuple[str, ...] = Status.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Limits:
    """Resource limits of one execution."""

    timeout_s: float = 10.0  # wall clock; the whole process tree is killed past it
    memory_mb: int = 512  # address space / cgroup memory limit
    pids: int = 64  # processes and threads the execution may hold at once
    output_bytes: int = 64 * 1024  # cap on captured stdout and on stderr, each
    file_size_mb: int = 16  # largest file the execution may write

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "pids", "output_bytes", "file_size_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class ExecResult:
    """What one execution did. `status` is the verdict; the rest is evidence."""

    status: Status
    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    backend: str
    peak_memory_mb: float | None = None
    # infra_error: what went wrong with the sandbox itself; otherwise what could not be read
    # back of what the execution left (a collected file that is a link, a fifo, too big, ...)
    error: str | None = None
    files: Mapping[str, str] = field(default_factory=dict)  # collected output files, if asked

    @property
    def infra_error(self) -> bool:
        return self.status == "infra_error"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class BaseTree:
    """Files a run's workspace starts with that already lie in a host folder (a repository's
    extracted source): `paths` under `root`, regular files. A backend that can shows them in
    place, read-only, instead of copying them (the process backend under bubblewrap: a
    read-only bind mount per file, every folder a real, writable one); the others copy them.
    The run's `files` are written over them, so only what an episode changed is copied."""

    root: str
    paths: tuple[str, ...]

    def read(self, skip: Mapping[str, object] = {}) -> dict[str, bytes]:
        """The files' contents (for a backend that copies them), those in `skip` left out."""
        out = {}
        for rel in self.paths:
            if rel not in skip:
                with open(os.path.join(self.root, rel), "rb") as fh:
                    out[rel] = fh.read()
        return out


class Sandbox(Protocol):
    """An isolated place to run a command over a set of files.

    `argv[0] == "python"` means the sandbox's own Python interpreter (isolated mode). Paths in
    `files` are relative to a fresh, private working directory that is thrown away afterwards.
    `collect` names files to read back from that directory after the run. `base`: files the
    workspace starts with, from a host folder, under `files` (see `BaseTree`). `preload`: module
    names the program will import, which a backend may load ahead of it (the process backend's
    fork server keeps zygotes that have imported them, for runs that name the same ones:
    sandbox/FORK_SERVER.md); the program must still import what it uses.
    """

    name: str

    def run(
        self,
        files: Mapping[str, str | bytes],
        argv: Sequence[str],
        limits: Limits = Limits(),
        stdin: bytes | None = None,
        collect: Sequence[str] = (),
        base: BaseTree | None = None,
        preload: Sequence[str] = (),
    ) -> ExecResult: ...

    def close(self) -> None: ...


def verdict(*, timed_out: bool, oom: bool, overflow: bool, exit_code: int | None,
            stderr: str) -> Status:
    """The status of an execution that ran, from what every backend observes.

    The wall-clock limit wins (the tree was killed for it), then a kill by the memory limit, then
    the output cap; a `MemoryError` traceback is a memory verdict too (rlimit fallback).
    """
    if timed_out:
        return "timeout"
    if oom:
        return "memory_exceeded"
    if overflow:
        return "output_truncated"
    if exit_code == 0:
        return "ok"
    if "MemoryError" in stderr[-2000:]:
        return "memory_exceeded"
    return "failed"
