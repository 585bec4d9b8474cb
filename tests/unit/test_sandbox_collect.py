"""The line between the candidate's failure and the host's: once the program has run, what it
left (its collected files) is its own result, whatever it made of them; only a sandbox that could
not run it is `infra_error` (real bubblewrap runs, with and without the fork-server fast path)."""
from __future__ import annotations

import pytest

from sandbox.base import Limits
from sandbox.process import ProcessSandbox

_L = Limits(timeout_s=20.0, memory_mb=256, pids=16)
# os.path.realpath recurses once per link: a chain longer than the recursion limit raised
# RecursionError on the host, which the fork server retried and reported as infra_error.
CHAIN = """
import os
os.mkdir("real")
for i in range(2000):
    os.symlink(f"l{i + 1}" if i < 1999 else "real", f"l{i}")
os.symlink("l0", "out.txt")
"""
LEFT = {"link_chain": CHAIN,
        "link_to_dev_zero": "import os; os.symlink('/dev/zero', 'out.txt')",
        "fifo": "import os; os.mkfifo('out.txt')",
        "folder": "import os; os.mkdir('out.txt')",
        "too_big": "open('out.txt', 'wb').write(b'x' * 200_000)"}


@pytest.mark.parametrize("made", list(LEFT))
def test_a_collected_file_the_candidate_spoiled_is_its_failure_not_infra_error(either_path, made):
    res = either_path.run({"main.py": LEFT[made]}, ["python", "main.py"], _L,
                          collect=["out.txt"])
    assert not res.infra_error, res
    assert res.status == ("output_truncated" if made == "too_big" else "failed"), res
    assert res.files == {} and "out.txt" in (res.error or ""), res


def test_a_well_made_collected_file_is_read_back_and_the_run_is_ok(either_path):
    res = either_path.run({"main.py": "open('out.txt', 'w').write('fine')"},
                          ["python", "main.py"], _L, collect=["out.txt", "absent.txt"])
    assert res.status == "ok" and res.files == {"out.txt": "fine"} and res.error is None, res


@pytest.mark.parametrize("fork_server", [True, False], ids=["fork_server", "plain"])
def test_a_sandbox_that_cannot_start_is_still_infra_error(monkeypatch, tmp_path, fork_server):
    monkeypatch.setenv("ROLLFORGE_SANDBOX_TMP", str(tmp_path / "gone"))  # no workspace base
    sbx = ProcessSandbox(fork_server=fork_server)
    try:
        res = sbx.run({"main.py": "print(1)"}, ["python", "main.py"], _L)
    finally:
        sbx.close()
    assert res.infra_error and res.error, res
