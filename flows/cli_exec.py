"""`rollforge exec`: run one Python file in a fresh sandbox and print the result record as JSON."""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "exec", help="run FILE.py in a fresh sandbox; print the result record as one JSON object",
        description="Run FILE.py in a fresh sandbox and print its result record (status, exit "
        "code, stdout/stderr, duration, peak memory) as one JSON object. Exit status: 0 when the "
        "status is ok, 1 otherwise.")
    p.add_argument("file", metavar="FILE.py", help="the Python file to run (copied in as main.py)")
    p.add_argument("--backend", choices=["process", "docker"], default="process")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S", help="wall-clock limit")
    p.add_argument("--memory-mb", type=int, default=512, metavar="M", help="memory limit")
    p.add_argument("--pids", type=int, default=64, metavar="N", help="process/thread limit")
    p.add_argument("--output-bytes", type=int, default=65536, metavar="B",
                   help="cap on captured stdout and on stderr")
    p.add_argument("--no-fork-server", action="store_true",
                   help="process backend: start a fresh interpreter instead of forking the warm "
                        "zygote (the fork server is on by default where the host allows it)")
    p.set_defaults(func=_exec)


def _exec(args: argparse.Namespace) -> int:
    import json
    import logging
    import os

    from pydantic import ValidationError

    from flows.cli import UsageError
    from sandbox.config import SandboxConfig
    from sandbox.registry import make_sandbox

    if not os.path.isfile(args.file):
        raise UsageError(f"FILE.py={args.file!r} is not a readable file")
    with open(args.file, "rb") as fh:
        source = fh.read()
    try:
        cfg = SandboxConfig(backend=args.backend, timeout_s=args.timeout,
                            memory_mb=args.memory_mb, pids=args.pids,
                            output_bytes=args.output_bytes, pool_size=0,
                            fork_server=not args.no_fork_server)
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = "-".join(map(str, err["loc"])).replace("_", "-")
        raise UsageError(f"--{flag}: {err['msg']}") from None
    logging.basicConfig(level=logging.WARNING, format="rollforge exec: %(message)s")
    try:
        sandbox = make_sandbox(cfg)
    except Exception as exc:  # no engine, no image: the sandbox itself failed
        record = {"status": "infra_error", "exit_code": None, "stdout": "", "stderr": "",
                  "duration_s": 0.0, "backend": args.backend, "peak_memory_mb": None,
                  "error": f"{type(exc).__name__}: {exc}", "files": {}}
        print(json.dumps(record))
        return 1
    try:
        result = sandbox.run({"main.py": source}, ["python", "main.py"], cfg.limits())
    finally:
        sandbox.close()
    record = result.to_json()
    record["files"] = dict(record["files"])
    if hasattr(sandbox, "protections"):
        record["protections"] = list(sandbox.protections)
        record["missing_protections"] = dict(sandbox.missing)
        record["fork_server"] = getattr(sandbox, "fork_server", None) is not None
    print(json.dumps(record))
    return 0 if result.status == "ok" else 1
