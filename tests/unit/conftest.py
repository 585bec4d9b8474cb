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
