"""The sandbox's Docker image, built locally (no registry): a minimal Debian with python3.

The recipe (suite, variant, packages, post-install steps) is hashed; the image is tagged
`rollforge-sandbox:<digest>` so a changed recipe makes a new image and an unchanged one is never
rebuilt. The debootstrap root filesystem is cached as a tarball under `~/.cache/rollforge/` (or
`$ROLLFORGE_CACHE`), so rebuilding the image after `docker rmi` or on a fresh engine takes seconds.
Nothing here runs inside the container; the in-container server is passed at container start.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

IMAGE_REPO = "rollforge-sandbox"
RECIPE = {
    "suite": "bookworm",
    "variant": "minbase",
    "include": ["python3"],
    # Post-install: drop what only an administrator needs (package caches, docs, setuid bits) and
    # make the mount points the container expects.
    "post": [
        "rm -rf var/cache/apt/archives/*.deb var/lib/apt/lists/* usr/share/doc/* usr/share/man/*",
        "find . -xdev -perm /6000 -type f -exec chmod ug-s {} +",
        "mkdir -p work && chmod 1777 work tmp",
    ],
    "changes": ["ENV PATH=/usr/local/bin:/usr/bin:/bin", "ENV LANG=C.UTF-8", "WORKDIR /work"],
    "version": 1,
}
DEFAULT_MIRROR = "http://deb.debian.org/debian"


class ImageBuildError(RuntimeError):
    """The sandbox image could not be built (debootstrap or import failed)."""


def recipe_digest(recipe: dict = RECIPE) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def image_tag(recipe: dict = RECIPE) -> str:
    return f"{IMAGE_REPO}:{recipe_digest(recipe)}"


def cache_dir() -> Path:
    root = os.environ.get("ROLLFORGE_CACHE") or os.path.join(Path.home(), ".cache", "rollforge")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _run(argv: list[str], log: Path) -> None:
    with open(log, "ab") as fh:
        proc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-800:]
        raise ImageBuildError(f"{argv[0]} exited {proc.returncode}; log {log}:\n{tail}")


def build_rootfs(recipe: dict = RECIPE, mirror: str | None = None) -> Path:
    """The root filesystem tarball for `recipe`, made by debootstrap once and then cached."""
    cache = cache_dir()
    tarball = cache / f"rootfs-{recipe_digest(recipe)}.tar"
    if tarball.exists():
        return tarball
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is not installed (run scripts/setup_docker.sh)")
    if os.geteuid() != 0:
        raise ImageBuildError("building the rootfs with debootstrap needs root")
    mirror = mirror or os.environ.get("ROLLFORGE_DEBIAN_MIRROR", DEFAULT_MIRROR)
    log = cache / f"rootfs-{recipe_digest(recipe)}.log"
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=cache))
    try:
        _run(["debootstrap", f"--variant={recipe['variant']}",
              f"--include={','.join(recipe['include'])}", recipe["suite"], str(work), mirror], log)
        for step in recipe["post"]:
            subprocess.run(["sh", "-c", step], cwd=work, check=True)
        partial = tarball.with_suffix(".tar.partial")
        _run(["tar", "--numeric-owner", "-C", str(work), "-cf", str(partial), "."], log)
        os.replace(partial, tarball)  # atomic: a crashed build never leaves a half tarball
    except subprocess.CalledProcessError as exc:
        raise ImageBuildError(f"post-install step failed: {exc}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tarball


def ensure_image(client, recipe: dict = RECIPE) -> str:
    """Return the tag of the sandbox image, building it only when the engine lacks it.

    Idempotent and safe to call from several processes at once (a file lock serialises builds).
    """
    import docker.errors  # local: the process backend must not need the docker SDK

    tag = image_tag(recipe)
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    with open(cache_dir() / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            client.images.get(tag)  # another process built it while we waited
            return tag
        except docker.errors.ImageNotFound:
            pass
        tarball = build_rootfs(recipe)
        repo, _, version = tag.partition(":")
        try:
            client.api.import_image_from_file(str(tarball), repository=repo, tag=version,
                                              changes=recipe["changes"])
            client.images.get(tag)
        except docker.errors.APIError as exc:
            raise ImageBuildError(f"docker import of {tarball} failed: {exc}") from exc
    return tag


if __name__ == "__main__":  # `python -m sandbox.docker_image`: build (or find) the image
    import sys
    import time

    import docker

    t0 = time.perf_counter()
    try:
        print(ensure_image(docker.from_env()), f"({time.perf_counter() - t0:.1f}s)")
    except (ImageBuildError, docker.errors.DockerException) as exc:
        print(f"sandbox image: {exc}", file=sys.stderr)
        sys.exit(1)
