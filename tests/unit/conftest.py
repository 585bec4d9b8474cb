"""Fixtures shared by unit test files: the fork-server sandboxes (module-scoped, real)."""
from __future__ import annotations

import pytest

from sandbox.process import ProcessSandbox, fork_server_unavailable


@pytest.fixture(scope="module")
def fast():
    sbx = ProcessSandbox()
    if sbx.fork_server is None:
        pytest.skip(f"no fork server here: {fork_server_unavailable(sbx.host)}")
    yield sbx
    sbx.close()


@pytest.fixture(scope="module")
def plain():
    return ProcessSandbox(fork_server=False)


@pytest.fixture(params=[True, False], ids=["fork_server", "plain"], scope="module")
def either_path(request):
    """A process sandbox with the fork-server fast path and one without (a test runs on both)."""
    sbx = ProcessSandbox(fork_server=request.param)
    if request.param and sbx.fork_server is None:
        pytest.skip("no fork server here")
    yield sbx
    sbx.close()
