"""The parts every command's parser shares: help with defaults, ``--debug``, number lists."""

from __future__ import annotations

import argparse
import copy


class DefaultsFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that shows each option's default, except where there is none (None, False)."""

    def _format_action(self, action: argparse.Action) -> str:
        if _has_default(action) and "%(default)" not in (action.help or ""):
            action = copy.copy(action)
            action.help = f"{action.help or ''} (default: %(default)s)".strip()
        return super()._format_action(action)


def _has_default(action: argparse.Action) -> bool:
    return bool(action.option_strings) and action.default not in (None, False, argparse.SUPPRESS)


def command_parser(subparsers, name: str, help: str, **kwargs) -> argparse.ArgumentParser:
    """A command's parser: its defaults shown in ``--help``, and ``--debug``."""
    parser = subparsers.add_parser(
        name, help=help, description=help, formatter_class=DefaultsFormatter, **kwargs
    )
    parser.add_argument(
        "--debug", action="store_true",
        help="show the traceback of a usage or settings error too",
    )
    return parser


def floats(text: str) -> list[float]:
    """``"300,330"`` → ``[300.0, 330.0]`` (empty items skipped)."""
    return [float(t) for t in text.split(",") if t.strip()]
