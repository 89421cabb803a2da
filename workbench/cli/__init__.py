"""The ``workbench`` command line: one module per command, :func:`main` the entry point.

Nothing outside this package imports it; what other code needs lives below it.
"""

from workbench.cli.main import main

__all__ = ["main"]
