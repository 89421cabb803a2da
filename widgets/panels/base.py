"""Common behaviour of panels that follow a run: throttled refreshes from any thread, and
the shared look of their figures (:func:`new_figure`; font size is raised for talks).

A redraw may change a widget whose observer asks for another redraw of the same panel
(a slider whose maximum shrinks clamps its value, and the value's observer refreshes).
Refreshes therefore never wait for each other: a request made while a redraw is under way,
on any thread, marks the panel stale, and the thread that is drawing draws once more when
it is done. No lock is held while a widget changes, so no request can deadlock.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable

import ipywidgets as ipw
import plotly.graph_objects as go


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


class LivePanel(ipw.VBox):
    """A panel redrawn from the snapshots of a run (controller or comparison).

    Subclasses implement :meth:`update` and lay themselves out with :meth:`set_body`.
    Refreshes arrive from the run's thread and are throttled to one per
    ``refresh_interval`` seconds; a skipped refresh is made up for later by a timer, so
    the last state is always drawn. Refreshes requested during a redraw (from an observer
    of a widget the redraw changed, or from another thread) are folded into one more
    redraw by the drawing thread; :meth:`refresh` never blocks. A failing redraw shows its
    message in the panel.

    Parameters
    ----------
    refresh_interval : float
        Seconds between redraws (a few per second by default).
    **kwargs
        Passed to :class:`ipywidgets.VBox`.
    """

    def __init__(self, refresh_interval: float = 0.3, **kwargs):
        super().__init__(**kwargs)
        self.source = None
        self._throttle = Throttle(refresh_interval)
        self._state_lock = threading.Lock()  # guards the two flags below, never a redraw
        self._drawing = False
        self._stale = False
        self._timer: threading.Timer | None = None
        self.error_html = ipw.HTML()

    def set_body(self, *children: ipw.Widget) -> None:
        """Lay out the panel: ``children`` and, below them, the redraw error line."""
        self.children = (*children, self.error_html)

    def attach(self, source) -> None:
        """Follow ``source`` (anything with ``add_listener``/``remove_listener``/``snapshot``)."""
        if self.source is not None:
            self.source.remove_listener(self._on_change)
        self.source = source
        source.add_listener(self._on_change)
        self._throttle.reset()
        self.refresh()

    def refresh(self) -> None:
        """Redraw from the source's current snapshot (nothing without a source).

        Returns at once when another redraw is under way: that one draws again after it
        finishes, from the snapshot of that moment.
        """
        if self.source is None:
            return
        with self._state_lock:
            self._stale = True
            if self._drawing:
                return
            self._drawing = True
        try:
            while True:
                with self._state_lock:
                    if not self._stale:
                        self._drawing = False
                        return
                    self._stale = False
                self._draw()
        except BaseException:
            with self._state_lock:
                self._drawing = False
            raise

    @property
    def drawing(self) -> bool:
        """True while a redraw is under way."""
        return self._drawing

    def _draw(self) -> None:
        source = self.source
        if source is None:
            return
        try:
            self.update(source.snapshot())
        except Exception as exc:  # noqa: BLE001 - shown in the panel, never swallowed
            self.error_html.value = (
                "<span style='color:#b00020'>display error: "
                f"{html.escape(type(exc).__name__)}: {html.escape(str(exc))}</span>"
            )
        else:
            if self.error_html.value:
                self.error_html.value = ""

    def update(self, snapshot) -> None:
        """Draw ``snapshot``."""
        raise NotImplementedError

    def _on_change(self, source, forced: bool) -> None:
        if source is not self.source:
            return
        if self._throttle.ready(force=forced):
            self.refresh()
        elif self._timer is None or not self._timer.is_alive():
            self._timer = threading.Timer(self._throttle.interval, self._refresh_later)
            self._timer.daemon = True
            self._timer.start()

    def _refresh_later(self) -> None:
        if self._throttle.ready(force=True):
            self.refresh()


#: Colours of configuration A and B, and of the replica band.
COLORS = {"A": "#1f77b4", "B": "#d62728", "band": "rgba(31, 119, 180, 0.2)"}


def new_figure(
    title: str, xaxis: str, yaxis: str, height: int = 260, font_size: int = 12
) -> go.FigureWidget:
    """An empty live figure with the workbench layout.

    Parameters
    ----------
    title, xaxis, yaxis : str
        Figure title and axis titles.
    height : int
        Pixels.
    font_size : int
        Base font size; 18–24 reads well on a projector.
    """
    figure = go.FigureWidget()
    figure.update_layout(
        title={"text": title, "font": {"size": font_size + 2}},
        font={"size": font_size},
        height=height,
        margin={"l": 60, "r": 60, "t": 40 + font_size, "b": 40 + font_size},
        xaxis_title=xaxis,
        yaxis_title=yaxis,
        template="plotly_white",
        legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0, "yanchor": "bottom"},
        uirevision="keep",
    )
    return figure
