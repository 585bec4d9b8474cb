"""A candidate that builds a folder tree deeper than Python's recursion limit and than PATH_MAX
must not break the sandbox: its run returns a record, and the next run gets a clean workspace
(real bubblewrap runs, with and without the fork-server fast path)."""
from __future__ import annotations

import os

import pytest

from sandbox.base import Limits
from sandbox.process import ProcessSandbox
from sandbox.workspace import remove_tree

DEEP = """
import os
for _ in range(3000):  # 6000 bytes of path: past PATH_MAX and past the recursion limit
    os.mkdir("d")
    os.chdir("d")
print("deep")
"""
_L = Limits(timeout_s=20.0, memory_mb=256, pids=16)


def test_a_tree_deeper_than_path_max_leaves_the_next_run_a_clean_workspace(either_path):
    first = either_path.run({"main.py": DEEP}, ["python", "main.py"], _L)
    assert first.status == "ok" and first.stdout == "deep\n", first
    for _ in range(2):  # the same zygote (or a fresh one) serves clean runs afterwards
        nxt = either_path.run({"main.py": "import os\nprint(sorted(os.listdir('.')))\n"},
                          ["python", "main.py"], _L)
        assert nxt.status == "ok" and nxt.stdout == "['main.py']\n", nxt


def test_remove_tree_removes_any_depth_and_never_follows_links(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    root = tmp_path / "root"
    cur = str(root)
    os.mkdir(cur)
    fd = os.open(cur, os.O_RDONLY)
    try:
        for _ in range(3000):  # built by fd, since the full path outgrows PATH_MAX
            os.mkdir("d", dir_fd=fd)
            nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        os.symlink(str(outside), "link", dir_fd=fd)
    finally:
        os.close(fd)
    assert remove_tree(str(root))
    assert not root.exists() and (outside / "keep.txt").read_text() == "x"


def test_cleaning_a_zygotes_tmp_leaves_the_mount_scaffold_it_started_with(tmp_path):
    # bubblewrap puts mount points for paths under /tmp (a checkout or venv there) into the
    # private /tmp; clean() must remove what an execution wrote and leave those alone
    from sandbox.zygote_host import empty_dir

    (tmp_path / "checkout").mkdir()
    (tmp_path / "checkout" / "keep.py").write_text("x")
    (tmp_path / "written").mkdir()
    (tmp_path / "written" / "f").write_text("y")
    (tmp_path / "file").write_text("z")
    assert empty_dir(str(tmp_path), keep=frozenset({"checkout"}))
    assert sorted(os.listdir(tmp_path)) == ["checkout"]
    assert (tmp_path / "checkout" / "keep.py").read_text() == "x"


def test_a_fork_server_sandbox_keeps_its_zygote_and_empties_tmp_between_runs():
    sbx = ProcessSandbox()
    if sbx.fork_server is None:
        pytest.skip("no fork server here")
    try:
        assert sbx.run({"main.py": "open('/tmp/left', 'w').write('x')\n"}, ["python", "main.py"],
                       _L).status == "ok"
        pids = sbx.fork_server.zygote_pids()
        nxt = sbx.run({"main.py": "import os\nprint(os.path.exists('/tmp/left'))\n"},
                      ["python", "main.py"], _L)
        assert nxt.stdout == "False\n" and sbx.fork_server.zygote_pids() == pids != []
    finally:
        sbx.close()
