"""The throw-away workspace of one execution: where it lives, how files go in and come back."""
from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from sandbox.base import Status

# The whole environment an execution starts with: none of the host's variables are passed on.
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/workspace", "TMPDIR": "/tmp",
               "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}


def give_to(workdir: str, uid: int) -> None:
    """Make the workspace the private uid's own, and nobody else's."""
    for dirpath, dirnames, filenames in os.walk(workdir):
        os.lchown(dirpath, uid, uid)
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, uid)
    os.chmod(workdir, 0o700)


def workspace_base() -> str:
    """A tmpfs directory when one is writable (/dev/shm), else the system temp directory.

    On tmpfs the files an execution writes are memory pages charged to its memory cgroup, so the
    memory limit also bounds how much it can write: a disk-filling program cannot fill a disk.
    """
    override = os.environ.get("ROLLFORGE_SANDBOX_TMP")
    if override:
        return override
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return tempfile.gettempdir()


def remove_tree(path: str) -> bool:
    """Remove a folder and everything in it, links removed and never followed; True if gone.

    An execution controls what is in its workspace: a tree a few thousand folders deep makes
    `shutil.rmtree` (recursive in Python 3.11) raise RecursionError, and one deeper than
    PATH_MAX defeats path-based removal. Those fall back to `rm -rf`, which walks by file
    descriptor to any depth."""
    try:
        shutil.rmtree(path)
        return True
    except FileNotFoundError:
        return True
    except (OSError, RecursionError):
        pass
    subprocess.run(["rm", "-rf", "--one-file-system", "--", path], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return not os.path.lexists(path)


def make_workspace() -> str:
    return tempfile.mkdtemp(prefix="rf-sbx-", dir=workspace_base())


def check_relpath(rel: str) -> str:
    """Normalise a workspace-relative path; refuse absolute paths and `..` escapes."""
    norm = os.path.normpath(rel)
    if os.path.isabs(rel) or norm == ".." or norm.startswith(".." + os.sep) or norm == ".":
        raise ValueError(f"file path {rel!r} must be relative and stay inside the workspace")
    return norm


def write_files(root: str, files: Mapping[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = os.path.join(root, check_relpath(rel))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = content if isinstance(content, bytes) else content.encode()
        with open(path, "wb") as fh:
            fh.write(data)


@dataclass(frozen=True)
class Collected:
    """What was read back of the files a run was asked to leave. `problems` names each one that
    is there but could not be read back as a regular file within the cap (a link, a fifo, a
    folder, too big, unreadable): the execution made it so, so it is the execution's failure."""

    files: dict[str, str] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    too_big: bool = False

    def verdict(self, status: Status) -> Status:
        """The run's status with what it left: a run that ended well but left a collected file
        that cannot be read is `output_truncated` (over the cap) or `failed`; never infra."""
        if not self.problems or status != "ok":
            return status
        return "output_truncated" if self.too_big else "failed"

    @property
    def error(self) -> str | None:
        return "collected files: " + "; ".join(self.problems) if self.problems else None


def collect_files(root: str, names: Sequence[str], cap_bytes: int) -> Collected:
    """Read back the named regular files. Never raises for what the workspace holds: the names
    are the caller's, but everything at them is the execution's, so each folder on the way and
    the file itself are opened without following links (a link could point at host files, and a
    chain of them defeats `os.path.realpath`), a fifo is never waited on, and every failure is
    one of the result's `problems`. A name with nothing at it is simply not collected."""
    out: dict[str, str] = {}
    problems: list[str] = []
    too_big = False
    for rel in names:
        try:
            data = _read_back(root, check_relpath(rel), cap_bytes)
        except FileNotFoundError:
            continue
        except _TooBig as exc:
            too_big = True
            problems.append(f"{rel}: {exc}")
            continue
        except (OSError, ValueError) as exc:
            problems.append(f"{rel}: {_why(exc)}")
            continue
        out[rel] = data.decode("utf-8", errors="replace")
    return Collected(out, tuple(problems), too_big)


class _TooBig(Exception):
    pass


_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY


def _read_back(root: str, rel: str, cap_bytes: int) -> bytes:
    parts = rel.split(os.sep)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
        ffd = os.open(parts[-1], os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        st = os.fstat(ffd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > cap_bytes:
            raise _TooBig(f"{st.st_size} bytes, over the cap of {cap_bytes}")
        chunks, size = [], 0
        while chunk := os.read(ffd, min(1 << 16, cap_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > cap_bytes:
                raise _TooBig(f"over the cap of {cap_bytes} bytes")
        return b"".join(chunks)
    finally:
        os.close(ffd)


def _why(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
        return "a symbolic link, not read"
    if isinstance(exc, OSError) and exc.errno == errno.ENOTDIR:
        return "a folder on its path is not a folder (or is a link), not read"
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
