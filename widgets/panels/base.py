"""Common behaviour of panels that follow a run: throttled refreshes from any thread."""

from __future__ import annotations

import html
import threading

import ipywidgets as ipw

from widgets.throttle import Throttle


class LivePanel(ipw.VBox):
    """A panel redrawn from the snapshots of a run (controller or comparison).

    Subclasses implement :meth:`update` and lay themselves out with :meth:`set_body`.
    Refreshes arrive from the run's thread and are throttled to one per
    ``refresh_interval`` seconds; a skipped refresh is made up for later by a timer, so
    the last state is always drawn. A failing redraw shows its message in the panel.

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
        self._draw_lock = threading.Lock()
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
        """Redraw from the source's current snapshot (nothing without a source)."""
        if self.source is None:
            return
        with self._draw_lock:
            try:
                self.update(self.source.snapshot())
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
