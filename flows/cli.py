"""`rollforge`: the command line. Each subcommand lives in its own `flows/cli_*.py` module that
exposes `register(subparsers)`; registration imports only argparse so `--help` stays fast, and the
heavy imports happen inside the command."""
from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = ["flows.cli_run", "flows.cli_envs", "flows.cli_exec", "flows.cli_eval", "flows.cli_query",
                   "flows.cli_tasks", "flows.cli_serve", "flows.cli_server", "flows.cli_export",
                   "flows.cli_model", "flows.cli_hacks", "flows.cli_gateway", "flows.cli_data"]


class UsageError(Exception):
    """Bad input from the user: printed as `rollforge: error: ...` with exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollforge",
        description="RL post-training of language models on executable, verifiable tasks.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # that command is not part of this build
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"rollforge {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # Run through the importable module, so `UsageError` raised by the commands (imported from
    # `flows.cli`) is the class caught here rather than a twin defined in `__main__`.
    from flows.cli import main as _main

    sys.exit(_main())
