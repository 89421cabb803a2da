"""The error of a settings object whose fields are impossible or do not go together.

Settings dataclasses check themselves when they are made and raise
:class:`SettingsError` naming the field at fault. The message may name other fields
as ``{field}`` placeholders, so that each front end shows its own names for them:
the command line its flags, the workbench its labels.
"""

from __future__ import annotations

import re
from collections.abc import Callable

#: ``{field}`` in a message: another field, shown by its front end's name.
_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


class SettingsError(ValueError):
    """An impossible settings field, or fields that do not go together.

    Parameters
    ----------
    field : str
        The field at fault (a dataclass field name).
    message : str
        What is wrong, to follow the field's name: ``"must be at least 1, got 0"`` (one
        that starts with ``:`` follows it without a space); other fields appear as
        ``{name}`` placeholders.
    """

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(self.describe(str))

    def describe(self, name: Callable[[str], str]) -> str:
        """The message with every field shown as ``name(field)``.

        Parameters
        ----------
        name : callable
            A field's name as the reader knows it (a flag, a label).
        """
        message = _PLACEHOLDER.sub(lambda match: name(match.group(1)), self.message)
        space = "" if message.startswith(":") else " "
        return f"{name(self.field)}{space}{message}"
