"""Every hostile program is contained and reported by the process backend, the host is unharmed,
and the next execution works normally."""
from __future__ import annotations

import os

import pytest

from sandbox.hostile import HOSTILE, Listener, make_context, problems
from sandbox.process import ProcessSandbox


@pytest.fixture(scope="module")
def sandbox():
    sbx = ProcessSandbox()
    if sbx.missing:  # the suite is about the full set; degraded hosts are covered elsewhere
        pytest.skip(f"host cannot apply every protection: {sbx.missing}")
    return sbx


@pytest.fixture
def host(tmp_path, monkeypatch):
    listener = Listener()
    ctx = make_context(str(tmp_path), listener.port)
    monkeypatch.setenv("ROLLFORGE_TEST_SECRET", ctx.secret)
    yield ctx, listener
    listener.close()


@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.name for h in HOSTILE])
def test_hostile_program_is_contained_and_next_execution_works(sandbox, host, hostile):
    ctx, listener = host
    result = sandbox.run({"main.py": ctx.fill(hostile)}, ["python", "main.py"], hostile.limits)
    assert problems(hostile, result, ctx, listener.accepted) == [], result
    after = sandbox.run({"main.py": "print(6 * 7)"}, ["python", "main.py"])
    assert (after.status, after.stdout) == ("ok", "42\n"), after


def test_code_runs_as_an_unused_private_uid_not_root_or_the_caller(sandbox):
    result = sandbox.run({"main.py": "import os\nprint(os.getuid(), os.geteuid())"},
                         ["python", "main.py"])
    uid = int(result.stdout.split()[0])
    assert uid not in (0, os.getuid()) and uid >= 2_000_000
