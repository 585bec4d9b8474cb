"""A repository's pristine source and its environment layers, fetched and built once, cached by
content.

- the **source**: the package's sdist, fetched by pip (`pip download --no-deps --no-binary
  :all:`), checked against the sha256 the task file records, extracted once under
  `<cache>/repos/src-<sha>/` and held in memory as a tree `{path: bytes}` (an episode's
  workspace is this tree plus an overlay of the files it changed, never a copy);
- the **environment layer**: what the tests import besides the package (pytest and its
  dependencies, plus the repository's own test dependencies), as pure-Python wheels installed
  once into `<cache>/repos/site-<hash>/`. The process sandbox sees it as a read-only venv
  (`venv-<hash>/`, whose site-packages is that folder); the Docker backend as a locally built
  image `rollforge-repo:<hash>` (the sandbox image plus that folder). Both are named by the hash
  of what goes in, so an unchanged layer is never rebuilt.

`<cache>` is `$ROLLFORGE_CACHE` or `~/.cache/rollforge` (sandbox/docker_image.py).
"""
from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from envs.repo.diffs import apply_diff
from sandbox.base import BaseTree
from sandbox.docker_image import cache_dir
from tasks.record import Task

# What every layer holds: the grader's pytest, pinned as in requirements.lock, so that a test's
# outcome never depends on which pytest the host happens to have.
PYTEST_PINS = ("pytest==9.2.0", "pluggy==1.7.0", "iniconfig==2.3.1", "packaging==26.4",
               "Pygments==2.21.0")
_MAX_FILE = 1 << 20  # files of the sdist larger than this are left out of the tree (data blobs)


class RepoSourceError(RuntimeError):
    """The sdist or a layer could not be fetched or built (network, pip, a checksum)."""


def repos_cache() -> Path:
    path = cache_dir() / "repos"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _locked(name: str):
    fh = open(repos_cache() / f"{name}.lock", "w")
    fcntl.flock(fh, fcntl.LOCK_EX)  # several workers may ask for the same thing at once
    return fh


def _pip(args: list[str], what: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check",
                           "-q"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RepoSourceError(f"{what}: pip {' '.join(args[:2])} exited {proc.returncode}: "
                              f"{proc.stderr.strip()[-600:]}")


def split_spec(spec: str) -> tuple[str, str]:
    """'NAME==VERSION' -> (name, version); anything else is a usage error (ValueError)."""
    name, sep, version = spec.partition("==")
    if not sep or not name.strip() or not version.strip() or any(c in spec for c in " ;<>[],"):
        raise ValueError(f"repository {spec!r}: expected NAME==VERSION, e.g. toolz==0.12.1")
    return name.strip(), version.strip()


def fetch_sdist(spec: str, sha256: str | None = None) -> Path:
    """The sdist of `spec` in the cache (fetched by pip when missing); with `sha256`, the file
    must have it (a re-released sdist would make different instances)."""
    name, version = split_spec(spec)
    with _locked("fetch"):
        dest = repos_cache() / "sdists"
        dest.mkdir(exist_ok=True)
        norm = name.lower().replace("_", "-")
        found = [p for p in dest.iterdir()
                 if p.name.lower().replace("_", "-").startswith(f"{norm}-{version}.")]
        if not found:
            tmp = Path(tempfile.mkdtemp(dir=dest, prefix=".dl-"))
            try:
                _pip(["download", "--no-deps", "--no-binary", ":all:", "-d", str(tmp), spec],
                     f"fetching {spec}")
                got = sorted(tmp.iterdir())
                if len(got) != 1:
                    raise RepoSourceError(f"fetching {spec}: expected one sdist, got "
                                          f"{[p.name for p in got]}")
                os.replace(got[0], dest / got[0].name)
                found = [dest / got[0].name]
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    path = found[0]
    if sha256 is not None and file_sha256(path) != sha256:
        raise RepoSourceError(f"{spec}: sdist {path.name} has sha256 {file_sha256(path)}, the "
                              f"task file expects {sha256}")
    return path


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _extract(sdist: Path) -> Path:
    """The sdist's tree under the cache (extracted once; the top folder stripped)."""
    digest = file_sha256(sdist)
    out = repos_cache() / f"src-{digest[:16]}"
    if out.is_dir():
        return out
    with _locked("extract"):
        if out.is_dir():
            return out
        tmp = Path(tempfile.mkdtemp(dir=repos_cache(), prefix=".src-"))
        try:
            with tarfile.open(sdist) as tar:
                tar.extractall(tmp, filter="data")
            tops = list(tmp.iterdir())
            if len(tops) != 1 or not tops[0].is_dir():
                raise RepoSourceError(f"{sdist.name}: expected one top folder")
            os.replace(tops[0], out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


@lru_cache(maxsize=8)
def pristine_tree(spec: str, sha256: str | None = None) -> dict[str, bytes]:
    """The repository's files as the sdist ships them, {relative path: bytes}, in path order
    (built egg-info and files over 1 MiB left out). Cached per process: episodes share it."""
    root = _extract(fetch_sdist(spec, sha256))
    tree: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if not d.endswith(".egg-info") and d != "__pycache__")
        for f in sorted(filenames):
            p = Path(dirpath) / f
            rel = p.relative_to(root).as_posix()
            if p.is_file() and not p.is_symlink() and p.stat().st_size <= _MAX_FILE \
                    and rel != "PKG-INFO":
                tree[rel] = p.read_bytes()
    return dict(sorted(tree.items()))


def task_trees(task: Task) -> tuple[dict[str, bytes], dict[str, bytes | None]]:
    """A repo task's (pristine tree, the bug's overlay): the tree its episodes start from is
    the overlay applied to the pristine one."""
    p = task.payload
    tree = pristine_tree(p["repo"], p["sdist_sha256"])
    return tree, apply_diff(tree, p["patch"])


def tree_dir(spec: str, sha256: str | None = None) -> Path:
    """Where the pristine tree lies on the host (for benchmarks and the builder's own use)."""
    return _extract(fetch_sdist(spec, sha256))


def pristine_base(spec: str, sha256: str | None, leave_out: Iterable[str] = ()) -> BaseTree:
    """The pristine tree as a sandbox run's base (sandbox/base.py `BaseTree`): its files where
    they were extracted, shown read-only in place by the process backend instead of copied;
    `leave_out`: paths an episode changed or deleted (its overlay goes over the base)."""
    skip = set(leave_out)
    return BaseTree(str(tree_dir(spec, sha256)),
                    tuple(p for p in pristine_tree(spec, sha256) if p not in skip))


# -- environment layers -----------------------------------------------------------------------
def layer_key(test_deps: tuple[str, ...] = ()) -> str:
    """The content hash of a layer: the interpreter's minor version and every pinned wheel."""
    spec = {"python": f"{sys.version_info[0]}.{sys.version_info[1]}",
            "pins": sorted(PYTEST_PINS + tuple(test_deps)), "version": 1}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def layer_site(test_deps: tuple[str, ...] = ()) -> Path:
    """The layer's site-packages folder: pure-Python wheels installed once, read-only after."""
    key = layer_key(test_deps)
    site = repos_cache() / f"site-{key}"
    if site.is_dir():
        return site
    with _locked(f"layer-{key}"):
        if site.is_dir():
            return site
        tmp = Path(tempfile.mkdtemp(dir=repos_cache(), prefix=".site-"))
        try:
            _pip(["install", "--no-deps", "--only-binary", ":all:", "--no-compile",
                  "--target", str(tmp), *sorted(PYTEST_PINS + tuple(test_deps))],
                 "building the repository layer")
            shutil.rmtree(tmp / "bin", ignore_errors=True)
            for p in [tmp, *tmp.rglob("*")]:
                p.chmod(0o755 if p.is_dir() else 0o644)
            os.replace(tmp, site)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return site


def layer_python(test_deps: tuple[str, ...] = ()) -> str:
    """A venv whose only site-packages is the layer (the process sandbox shows it read-only):
    its interpreter, made once."""
    site = layer_site(test_deps)
    key = layer_key(test_deps)
    venv = repos_cache() / f"venv-{key}"
    py = venv / "bin" / "python"
    if py.exists():
        return str(py)
    with _locked(f"venv-{key}"):
        if py.exists():
            return str(py)
        tmp = Path(tempfile.mkdtemp(dir=repos_cache(), prefix=".venv-"))
        try:
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--symlinks",
                            str(tmp)], check=True, capture_output=True)
            # The venv is made with the real base interpreter: a venv of a venv would show the
            # outer venv's site-packages, not only the layer's.
            sp = tmp / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
                "site-packages"
            shutil.rmtree(sp)
            shutil.copytree(site, sp)
            tmp.chmod(0o755)  # mkdtemp's 0700 would close it to the sandbox's private uid
            os.replace(tmp, venv)
        except subprocess.CalledProcessError as exc:
            raise RepoSourceError(f"making the layer venv: {exc.stderr!r}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(py)


def layer_image(client, test_deps: tuple[str, ...] = ()) -> str:
    """The Docker image of the layer: the sandbox image with the layer's wheels in its
    dist-packages, built locally once (tag named by content)."""
    import docker.errors  # noqa: PLC0415 -- the process backend needs no docker SDK

    from sandbox.docker_image import ensure_image  # noqa: PLC0415

    base = ensure_image(client)
    tag = f"rollforge-repo:{hashlib.sha256((base + layer_key(test_deps)).encode()).hexdigest()[:16]}"
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    site = layer_site(test_deps)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        df = (f"FROM {base}\nCOPY site/ /usr/local/lib/python3.11/dist-packages/\n").encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(df)
        tar.addfile(info, io.BytesIO(df))
        tar.add(site, arcname="site")
    buf.seek(0)
    with _locked("image"):
        try:
            client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True)
        except docker.errors.DockerException as exc:
            raise RepoSourceError(f"building image {tag}: {exc}") from None
    return tag
