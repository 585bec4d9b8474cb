"""Every `rollforge` command's --help renders whole: argparse formats an argument's help with
%-substitution but a description as it is, so a `%%` written for one prints doubled in the
other (it did, in `eval transfer`)."""
import argparse

from flows.cli import build_parser


def _parsers(parser: argparse.ArgumentParser, path: str = "rollforge"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_commands_help_renders_without_doubled_or_unfilled_percent_signs():
    seen = 0
    for path, parser in _parsers(build_parser()):
        text = parser.format_help()
        assert "%%" not in text and "%(" not in text, (path, text)
        seen += 1
    assert seen > 20  # the subcommands were walked, not just the top level
