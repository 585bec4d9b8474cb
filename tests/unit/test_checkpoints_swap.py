"""Replacing a published folder (a checkpoint version written again, an export over an older
one): a reader of the folder's path finds the complete old folder or the complete new one,
never nothing."""
from __future__ import annotations

import json
import os
import threading
import time

from training import checkpoints


def _folder(path, tag: str):
    (path / "model").mkdir(parents=True)
    (path / "model" / "weights.txt").write_text(tag)
    (path / "meta.json").write_text(json.dumps({"tag": tag}))  # last, as `publish` writes it
    return path


def test_replacing_a_folder_never_leaves_its_path_missing(tmp_path, monkeypatch):
    final = _folder(tmp_path / "checkpoints" / "v0001", "old")
    seen_missing: list[str] = []  # after which step of a swap the path was gone

    def observed(real, name):
        def step(src, dst, *args, **kwargs):
            real(src, dst, *args, **kwargs)
            if not (final / "meta.json").is_file():
                seen_missing.append(f"{name}({os.path.basename(src)}, {os.path.basename(dst)})")
            time.sleep(0.02)  # wide enough for the reader below to look in between
        return step

    # every rename a swap makes is watched, and leaves time between it and the next
    monkeypatch.setattr(os, "rename", observed(os.rename, "rename"))
    monkeypatch.setattr(os, "replace", observed(os.replace, "replace"))

    stop = threading.Event()
    reads: dict[str, int] = {"old": 0, "missing": 0}

    def reader():
        while not stop.is_set():
            try:
                tag = json.loads((final / "meta.json").read_text())["tag"]
            except FileNotFoundError:
                reads["missing"] += 1
                continue
            reads[tag] = reads.get(tag, 0) + 1

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        for i in range(20):
            staging = _folder(checkpoints.staging_dir(str(tmp_path), 1), f"new{i}")
            assert checkpoints.swap_in(staging, final) == final
            assert json.loads((final / "meta.json").read_text())["tag"] == f"new{i}"
            assert (final / "model" / "weights.txt").read_text() == f"new{i}"
    finally:
        stop.set()
        t.join(timeout=10)
    assert seen_missing == [], f"the folder was missing after {seen_missing[:2]}"
    assert reads["missing"] == 0, reads
    assert sum(reads.values()) > 20  # the reader did look throughout
    # the replaced copies are gone, and nothing else is left beside the folder
    assert sorted(p.name for p in final.parent.iterdir()) == ["v0001"]
    assert checkpoints.versions(str(tmp_path)) == [1]


def test_swapping_into_a_new_path_is_one_rename(tmp_path):
    staging = _folder(checkpoints.staging_dir(str(tmp_path), 0), "first")
    final = checkpoints.checkpoint_dir(str(tmp_path), 0)
    assert checkpoints.swap_in(staging, final) == final and not staging.exists()
    assert checkpoints.read_meta(final) == {"tag": "first"} and checkpoints.exists(str(tmp_path), 0)
