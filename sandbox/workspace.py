"""The throw-away workspace of one execution: where it lives, how files go in and come back."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Mapping, Sequence


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


def collect_files(root: str, names: Sequence[str], cap_bytes: int) -> dict[str, str]:
    """Read back the named regular files (not links: they could point at host files)."""
    out: dict[str, str] = {}
    for rel in names:
        path = os.path.join(root, check_relpath(rel))
        real = os.path.realpath(path)
        if not real.startswith(os.path.realpath(root) + os.sep) or os.path.islink(path):
            continue
        if os.path.isfile(path) and os.path.getsize(path) <= cap_bytes:
            with open(path, "rb") as fh:
                out[rel] = fh.read().decode("utf-8", errors="replace")
    return out
