"""Where the store lives: a local folder or any fsspec URI, and atomic writes on it.

Every file the store writes goes to a hidden temporary name beside its final name and is then
renamed into place. Readers never pick up the temporary name: it starts with "." (pyarrow.dataset
ignores such files by default) and does not end in ".parquet"/".json" (the globs of DuckDB and of
this package do not match it).

Local folders: `os.replace` (atomic on POSIX, replacing any previous file) between an fsync of
the file and one of its folder (`durable_replace`), so a crash can lose neither.
Other filesystems (memory://, s3://, gs://, ...): the temporary object is moved with fsspec's
`mv`. On object stores that is a copy then a delete; what makes it safe there is that an object
store never shows a partially uploaded object, so a reader sees either the old object or the new one.
"""
from __future__ import annotations

import os
import posixpath
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem


@dataclass(frozen=True)
class Location:
    """A path on a filesystem. `path` is the filesystem's own path (no protocol)."""

    fs: Any  # fsspec.AbstractFileSystem
    path: str

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    @property
    def name(self) -> str:
        return posixpath.basename(self.path.rstrip("/"))

    @property
    def uri(self) -> str:
        """What a user would pass back in: a plain path for local files, else protocol://path."""
        return self.path if self.is_local else self.fs.unstrip_protocol(self.path)

    def join(self, *parts: str) -> Location:
        return Location(self.fs, posixpath.join(self.path, *parts))

    def parent(self) -> Location:
        return Location(self.fs, posixpath.dirname(self.path.rstrip("/")))

    def exists(self) -> bool:
        return bool(self.fs.exists(self.path))

    def is_dir(self) -> bool:
        return bool(self.fs.isdir(self.path))

    def names(self) -> list[str]:
        """Names of the entries directly inside this folder ([] if it does not exist)."""
        if not self.fs.isdir(self.path):
            return []
        return sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self.path, detail=False))

    def read_bytes(self) -> bytes:
        return self.fs.cat_file(self.path)

    def remove(self) -> None:
        if self.fs.exists(self.path):
            self.fs.rm(self.path)


def locate(uri: str | os.PathLike[str]) -> Location:
    """A local path, `file://...`, `memory://...`, `s3://...` (needs s3fs), ... -> Location."""
    text = os.fspath(uri)
    if not text:
        raise ValueError("store path is empty; expected a folder or an fsspec URI such as memory://store")
    fs, path = fsspec.core.url_to_fs(text)
    return Location(fs, path.rstrip("/") or "/")


def _temporary_sibling(loc: Location) -> Location:
    return loc.parent().join(f".{loc.name}.tmp-{uuid.uuid4().hex[:12]}")


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_replace(src: str, dst: str) -> None:
    """`os.replace` that survives a crash: the file's data is synced before the name points at
    it, and the folder after, since the new name is an entry of the folder that a crash could
    otherwise lose (leaving the old file, or none). Local paths only."""
    _fsync_path(src)
    os.replace(src, dst)
    _fsync_path(os.path.dirname(os.path.abspath(dst)))


def _makedirs(folder: Location) -> None:
    """Create `folder` and its missing parents; locally, each new entry is synced into its
    parent, so a crash cannot lose the folder that a durable file was renamed into."""
    if not folder.is_local:
        folder.fs.makedirs(folder.path, exist_ok=True)
        return
    missing, path = [], os.path.abspath(folder.path)
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    os.makedirs(folder.path, exist_ok=True)
    for new in reversed(missing):
        _fsync_path(os.path.dirname(new))


def atomic_write(loc: Location, write: Callable[[Any], None]) -> Location:
    """Write `loc` through `write(target)` under a temporary name, then rename it into place.

    `write` receives a local path (str) on local filesystems, so native writers can be used,
    and an open binary file object elsewhere. A crash or an exception leaves the final name
    untouched (the old file, if any, stays) and no file that a reader would pick up.
    """
    tmp = _temporary_sibling(loc)
    _makedirs(loc.parent())
    try:
        if loc.is_local:
            write(tmp.path)
            durable_replace(tmp.path, loc.path)
        else:
            with loc.fs.open(tmp.path, "wb") as f:
                write(f)
            loc.fs.mv(tmp.path, loc.path)
    except BaseException:
        try:
            tmp.remove()
        except Exception:  # noqa: BLE001 - cleaning up is best effort; the original error matters
            pass
        raise
    return loc


def atomic_write_bytes(loc: Location, data: bytes) -> Location:
    def write(target: Any) -> None:
        if isinstance(target, str):
            with open(target, "wb") as f:
                f.write(data)
        else:
            target.write(data)

    return atomic_write(loc, write)
