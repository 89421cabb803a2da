"""SIGTERM ends a run the way Ctrl-C (SIGINT) does: a clean stop with a summary.

Batch schedulers send SIGTERM at a time limit. While :func:`terminate_as_interrupt` is
active it raises :class:`Terminated`, a ``KeyboardInterrupt``, so the same ``except``
stops the run. The exit codes follow the shell's convention, 128 + the signal number:
130 after SIGINT, 143 after SIGTERM.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

#: Exit code of a run stopped by SIGINT (Ctrl-C).
EXIT_INTERRUPTED = 128 + signal.SIGINT
#: Exit code of a run stopped by SIGTERM.
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
    """The exit code of a run stopped by ``stop``."""
    return EXIT_TERMINATED if isinstance(stop, Terminated) else EXIT_INTERRUPTED
