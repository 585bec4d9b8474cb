"""training/build_lock.py: a build lock left by a process killed mid-build is removed, one whose
build is alive (or just begun) is kept."""
import os
import subprocess
import time

from training import build_lock


def _lock(root, age_s: float):
    folder = root / build_lock.OP_DIR
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / "lock"
    lock.touch()
    then = time.time() - age_s
    os.utime(lock, (then, then))
    return folder, lock


def test_a_lock_whose_owner_is_gone_is_removed(tmp_path):
    _, lock = _lock(tmp_path, build_lock.STALE_S + 60)
    assert build_lock.clear_stale(str(tmp_path)) is True
    assert not lock.exists()
    assert build_lock.clear_stale(str(tmp_path)) is False  # nothing left to clear


def test_a_lock_just_taken_is_kept(tmp_path):
    _, lock = _lock(tmp_path, 1.0)
    assert build_lock.clear_stale(str(tmp_path)) is False
    assert lock.exists()


def test_a_lock_whose_build_still_runs_in_its_folder_is_kept(tmp_path):
    folder, lock = _lock(tmp_path, build_lock.STALE_S + 60)
    builder = subprocess.Popen(["sleep", "60"], cwd=folder)  # stands in for the owner's ninja
    try:
        assert build_lock.clear_stale(str(tmp_path)) is False
        assert lock.exists()
    finally:
        builder.kill()
        builder.wait()
    assert build_lock.clear_stale(str(tmp_path)) is True


def test_without_an_extensions_folder_nothing_is_touched(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    assert build_lock.clear_stale() is False
