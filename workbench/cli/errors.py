"""The errors the command line reports in one line, and the flags it names fields by.

A :class:`UsageError` is a problem with the command line itself. A
:class:`~workbench.settings_error.SettingsError` names a settings field, shown as its
flag (:func:`flag`). The library's errors about what the user gave it (a file that is
missing or not a model, an unknown protein, a checkpoint of another run) are
:data:`INPUT_ERRORS`. Anything else is a bug and shows its traceback.
"""

from __future__ import annotations

from workbench.files import LockedError
from workbench.md.simulation import CheckpointError
from workbench.md.trajectory_files import TrajectoryFileError
from workbench.model.io import ModelFormatError
from workbench.model_fit import ModelMismatchError
from workbench.resume import RecoveryError
from workbench.run_folder import RunFolderError
from workbench.settings_error import SettingsError
from workbench.system.errors import PDBError, UnknownProteinError


class UsageError(Exception):
    """A problem with the user's input, reported without a traceback."""


#: The library's errors about the files and names a user gave.
INPUT_ERRORS = (FileNotFoundError, PermissionError, ModelFormatError, CheckpointError, PDBError,
                UnknownProteinError, LockedError, RunFolderError, RecoveryError,
                TrajectoryFileError, ModelMismatchError)

#: Reported in one line (exit code 2) unless ``--debug`` is given.
REPORTED_ERRORS = (UsageError, SettingsError, *INPUT_ERRORS)

#: Settings fields whose flag is not ``--`` and the field's name with dashes.
FIELD_FLAGS = {"timestep_fs": "--dt", "learning_rate": "--lr", "options": "--kernels",
               "neighbors": "--skin/--exclude-bonded", "architecture": "--arch"}


def flag(field: str) -> str:
    """The command-line flag of a settings field: ``save_interval`` → ``--save-interval``."""
    return FIELD_FLAGS.get(field, "--" + field.replace("_", "-"))


def error_message(error: Exception) -> str:
    """One line for a reported error, settings fields shown as flags."""
    if isinstance(error, SettingsError):
        return error.describe(flag)
    return str(error)
