"""What the two background runners share: a state, a status message, the listeners
(the panels) and one worker thread whose failures end the work in the ``error`` state.

:class:`~widgets.controller.SimulationController` (one run, with pause, resume and kernel
switches) and :class:`~widgets.comparison.CompareRunner` (a race of two configurations)
subclass :class:`BackgroundWork` and implement :meth:`BackgroundWork._work`.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable

from widgets.snapshot import RunState

#: Display errors kept (the latest ones).
DISPLAY_ERRORS_KEPT = 5


class Listened:
    """Something the panels follow: listeners called as ``listener(source, forced)``
    (``forced`` True: a throttled display must not skip the call), under one lock."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._listeners: list[Callable] = []

    def add_listener(self, listener: Callable) -> None:
        """Call ``listener(source, forced)`` whenever what the panels show changes."""
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable) -> None:
        """Stop calling ``listener`` (no error when it is not registered)."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _current_listeners(self) -> list[Callable]:
        with self._lock:
            return list(self._listeners)


class BackgroundWork(Listened):
    """State, listeners and worker thread of a background runner.

    Listeners are called as ``listener(runner, forced)`` after each unit of work and on
    every state change (``forced`` True: a throttled display must not skip it). They run on
    the worker thread or on the thread that changed the state; an exception in one is
    recorded in ``_display_errors`` and never stops the work.
    """

    #: Name of the worker thread (shows in debuggers and thread dumps).
    thread_name = "workbench-worker"

    def __init__(self) -> None:
        super().__init__()
        self._thread: threading.Thread | None = None
        self._state = RunState.IDLE
        self._message = "ready"
        self._error: str | None = None
        self._traceback: str | None = None
        self._display_errors: list[str] = []

    @property
    def state(self) -> RunState:
        """Current state."""
        return self._state

    def _status_fields(self) -> dict:
        """``state``, ``message``, ``error``, ``traceback`` and ``display_errors`` for a
        snapshot (call with the lock held)."""
        return {
            "state": self._state,
            "message": self._message,
            "error": self._error,
            "traceback": self._traceback,
            "display_errors": tuple(self._display_errors),
        }

    def wait(self, timeout: float | None = None) -> RunState:
        """Block until the worker thread has ended (or ``timeout`` seconds); return the state."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return self._state

    def _start_worker(self) -> None:
        """Start the worker thread (call with the lock held, after setting the state)."""
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def _notify(self, forced: bool = False) -> None:
        for listener in self._current_listeners():
            try:
                listener(self, forced)
            except Exception as exc:  # noqa: BLE001 - a broken display must not stop the work
                with self._lock:
                    self._display_errors = [
                        *self._display_errors[1 - DISPLAY_ERRORS_KEPT:],
                        f"{type(exc).__name__}: {exc}",
                    ]

    def _run(self) -> None:
        try:
            self._work()
        except Exception as exc:  # noqa: BLE001 - every failure is shown in the panel
            with self._lock:
                self._state = RunState.ERROR
                self._error = f"{type(exc).__name__}: {exc}"
                self._traceback = traceback.format_exc()
                self._message = "failed"
        finally:
            self._notify(forced=True)

    def _work(self) -> None:
        """The work of the thread; raise to end in the ``error`` state."""
        raise NotImplementedError
