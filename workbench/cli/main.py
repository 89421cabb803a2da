"""``workbench COMMAND``: the parser of every command, and what the command line reports.

Usage errors, settings errors and the library's errors about the user's files and names
(`workbench.cli.errors`) end the command with one line on stderr and exit code 2; other
errors of the operating system (a full disk) with one line and exit code 1 (``--debug``:
with their traceback); any other exception is a bug and propagates.
"""

from __future__ import annotations

import argparse
import sys

from workbench.cli import analyze, bench, fit_scales, info, run, train, validate
from workbench.cli.errors import REPORTED_ERRORS, error_message
from workbench.cli.recipes import recipe_arguments

#: The command modules, in the order ``--help`` lists them.
COMMANDS = (run, info, bench, train, validate, fit_scales, analyze)


def build_parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The ``workbench`` parser and each command's parser, by command name."""
    parser = argparse.ArgumentParser(
        prog="workbench", description="Coarse-grained neural-network MD engine"
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser, subparsers.choices


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed, a ``--config`` recipe's options placed before the ones given."""
    parser, commands = build_parsers()
    command = next((token for token in argv if not token.startswith("-")), None)
    if command in commands:
        at = argv.index(command) + 1
        config = argparse.ArgumentParser(add_help=False)
        config.add_argument("--config")
        recipe = config.parse_known_args(argv[at:])[0].config
        if recipe is not None:
            argv = [*argv[:at], *recipe_arguments(commands[command], recipe, argv[at:]),
                    *argv[at:]]
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run ``workbench`` with ``argv`` (default: the process's arguments); the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        args = parse_arguments(argv)
        return args.execute(args)
    except REPORTED_ERRORS as error:
        if debug:
            raise
        print(f"error: {error_message(error)}", file=sys.stderr)
        return 2
    except OSError as error:  # the system's, not the input's: a full disk, a lost mount
        if debug:
            raise
        print(f"error: {error}", file=sys.stderr)
        return 1
