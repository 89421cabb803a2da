"""Recipe files: a command's options kept in YAML (``workbench train --config FILE``).

A recipe's keys are the command's option names (``batch_size`` or ``batch-size``); its
values are what the option takes (a list for a comma-list option, true for a switch, a
mapping for an option that takes one, such as ``network``).
The recipe becomes command-line arguments placed before the ones given, so that every
option given on the command line overrides the file's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from workbench.cli.errors import UsageError


def recipe_arguments(parser: argparse.ArgumentParser, path: str | Path,
                     given: list[str]) -> list[str]:
    """The command-line arguments of the recipe at ``path`` for ``parser``'s command.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The command's parser.
    path : str or pathlib.Path
        The recipe (YAML mapping of option names to values).
    given : list of str
        The arguments given on the command line: a recipe option of a group of mutually
        exclusive options one of which is given there is left out.

    Raises
    ------
    UsageError
        The file is missing or not a mapping, a key is not an option of the command, or a
        value does not fit its option.
    """
    try:
        recipe = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise UsageError(f"--config: cannot read the recipe {path}: {error}") from None
    if not isinstance(recipe, dict):
        raise UsageError(f"--config: {path} is not a mapping of option names to values")
    actions = {action.dest: action for action in parser._actions if action.option_strings}
    overridden = _excluded_by(parser, given)
    arguments: list[str] = []
    for key, value in recipe.items():
        dest = str(key).replace("-", "_")
        if dest not in actions or dest in ("config", "help", "debug"):
            raise UsageError(f"--config: {path} has the key {key!r}, which is not an option of "
                             f"this command (see --help)")
        if dest not in overridden:
            arguments += _tokens(actions[dest], value, path)
    return arguments


def _tokens(action: argparse.Action, value, path) -> list[str]:
    """The command-line form of one recipe entry."""
    flag = action.option_strings[0]
    if action.nargs == 0:  # a switch
        if not isinstance(value, bool):
            raise UsageError(f"--config: {path}: {action.dest} is a switch: true or false, "
                             f"got {value!r}")
        return [flag] if value else []
    if value is None:
        return []
    if isinstance(value, list):
        return [flag, ",".join(str(item) for item in value)]
    if isinstance(value, dict):  # JSON is YAML: the option reads it back as written
        return [flag, json.dumps(value)]
    return [flag, str(value)]


def _excluded_by(parser: argparse.ArgumentParser, given: list[str]) -> set[str]:
    """Options of mutually exclusive groups one of whose members is in ``given``."""
    flags = {token.split("=", 1)[0] for token in given if token.startswith("--")}
    excluded = set()
    for group in parser._mutually_exclusive_groups:
        if any(flags & set(action.option_strings) for action in group._group_actions):
            excluded |= {action.dest for action in group._group_actions}
    return excluded
