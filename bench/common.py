"""What the sandbox benchmarks share: the no-sandbox baseline and percentiles."""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from sandbox.base import ExecResult, Limits


class Bare:
    """A fresh interpreter in a temporary directory: what a harness without a sandbox pays."""

    def __init__(self, name: str = "bare interpreter"):
        self.name = name

    def run(self, files, argv, limits=Limits(timeout_s=30)):
        with tempfile.TemporaryDirectory() as d:
            for k, v in files.items():
                Path(d, k).write_bytes(v if isinstance(v, bytes) else v.encode())
            p = subprocess.run([sys.executable, "-I", "-B", *argv[1:]], cwd=d,
                               capture_output=True, timeout=limits.timeout_s)
        return ExecResult("ok" if p.returncode == 0 else "failed", p.returncode,
                          p.stdout.decode(), p.stderr.decode(), 0.0, "bare")


def pct(xs, q) -> float:
    """The q-quantile of seconds `xs`, in milliseconds."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] * 1000
