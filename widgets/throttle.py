"""Rate limiting for display updates."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Throttle:
    """Let an action through at most once per ``interval`` seconds.

    Parameters
    ----------
    interval : float
        Smallest time between two accepted calls, seconds.
    clock : callable, optional
        Monotonic clock returning seconds; ``time.monotonic`` by default (tests pass a fake).

    Examples
    --------
    >>> throttle = Throttle(0.25)
    >>> throttle.ready()
    True
    >>> throttle.ready()
    False
    """

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic):
        if interval < 0:
            raise ValueError(f"interval must be non-negative, got {interval}")
        self.interval = float(interval)
        self.clock = clock
        self._last: float | None = None
        self._lock = threading.Lock()

    def ready(self, force: bool = False) -> bool:
        """True (and the call is counted) when enough time has passed or ``force`` is set."""
        with self._lock:
            now = self.clock()
            if force or self._last is None or now - self._last >= self.interval:
                self._last = now
                return True
            return False

    def reset(self) -> None:
        """Forget the last accepted call, so the next one goes through."""
        with self._lock:
            self._last = None
