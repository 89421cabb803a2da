"""Stopping a command cleanly: SIGTERM, which batch schedulers send at a time limit, taken
as Ctrl-C is.

While :func:`terminate_as_interrupt` is active SIGTERM raises :class:`Terminated`, a
``KeyboardInterrupt``, so the ``except`` that stops a command on Ctrl-C stops it on SIGTERM
too (``workbench run`` keeps its checkpoint, ``workbench fit-scales`` its last finished
iteration). Exit codes follow the shell's convention, 128 + the signal number.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

#: Exit code of a command stopped by SIGINT (Ctrl-C).
EXIT_INTERRUPTED = 128 + signal.SIGINT
#: Exit code of a command stopped by SIGTERM.
EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived."""


def _raise_terminated(signum, frame):
    raise Terminated


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` in the body (main thread only; elsewhere the
    handler cannot be set and nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_code(stop: KeyboardInterrupt) -> int:
    """The exit code of a command stopped by ``stop``."""
    return EXIT_TERMINATED if isinstance(stop, Terminated) else EXIT_INTERRUPTED
