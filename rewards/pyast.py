"""`ast.parse` that is safe to call from several threads at once.

CPython 3.11 keeps the AST constructor's recursion depth in per-interpreter state, not per
thread; a parse whose conversion lets another thread run (object allocation can start the
garbage collector, which runs Python code) and a second parse in that thread leave the counter
wrong, and the first raises "SystemError: AST constructor recursion depth mismatch"
(python/cpython#106905). Rewards parse candidates in threads (the evaluator's pool, the flow's
rollout shards), where that would turn a correct program's reward into an error, so every
parse in this code base goes through one lock. A parse is microseconds to a few milliseconds:
the lock costs nothing that shows.
"""
from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """`ast.parse(source, filename, mode)`, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename, mode)
