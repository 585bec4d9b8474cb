"""Helpers the two fork-server test files share (their fixtures are in conftest.py)."""
from __future__ import annotations

from sandbox.base import Limits


def run_py(sbx, src, limits=Limits(), **kw):
    return sbx.run({"main.py": src}, ["python", "main.py"], limits, **kw)


def served(sbx) -> int:
    return sbx.fork_server.served
