"""Parallel tempering panel: acceptance per level pair and the walkers' temperatures."""

from __future__ import annotations

import ipywidgets as ipw
import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from widgets.panels.base import COLORS, LivePanel
from widgets.snapshot import Snapshot
from workbench.md.tempering import pair_labels

LEFT = {"xaxis": "x", "yaxis": "y"}
RIGHT = {"xaxis": "x2", "yaxis": "y2"}


class TemperingPanel(LivePanel):
    """Exchange statistics of a run with a temperature ladder (hidden for other runs).

    Left: the accepted fraction of attempted swaps for each pair of neighbouring
    levels. Right: the bath temperature over time of the replicas (walkers) of one
    exchange group, chosen in the dropdown; they swap levels among each other.

    Parameters
    ----------
    controller : SimulationController, optional
    font_size : int
    width : int
        Figure width in pixels.
    refresh_interval : float
        Seconds between redraws.
    """

    def __init__(
        self,
        controller=None,
        font_size: int = 12,
        width: int = 720,
        refresh_interval: float = 0.5,
    ):
        super().__init__(refresh_interval=refresh_interval)
        self.figure = go.FigureWidget(
            make_subplots(
                rows=1,
                cols=2,
                subplot_titles=("Exchange acceptance", "Walker temperatures"),
                column_widths=[0.4, 0.6],
            )
        )
        self.figure.add_bar(name="acceptance", marker={"color": COLORS["A"]}, **LEFT)
        self.figure.update_layout(
            width=width,
            height=300,
            font={"size": font_size},
            template="plotly_white",
            uirevision="keep",
            showlegend=True,
            margin={"l": 60, "r": 30, "t": 40 + font_size, "b": 60 + font_size},
            legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.1, "yanchor": "bottom"},
        )
        self.figure.update_yaxes(title_text="accepted fraction", range=[0, 1], row=1, col=1)
        self.figure.update_xaxes(title_text="level pair", row=1, col=1)
        self.figure.update_yaxes(title_text="temperature (K)", row=1, col=2)
        self.figure.update_xaxes(title_text="time (ps)", row=1, col=2)
        self.group = ipw.Dropdown(
            options=[("group 0", 0)], value=0, description="walkers", layout={"width": "200px"}
        )
        self.group.observe(lambda _: self.refresh(), names="value")
        self.info = ipw.HTML()
        self.set_body(ipw.HTML("<b>Parallel tempering</b>"), self.info, self.group, self.figure)
        self.layout.display = "none"
        if controller is not None:
            self.attach(controller)

    @property
    def shown(self) -> bool:
        """True while the attached run has a temperature ladder."""
        return self.layout.display != "none"

    def figures(self) -> dict[str, go.FigureWidget]:
        """The figure by file name (for export), empty for a run without a ladder."""
        return {"tempering": self.figure} if self.shown else {}

    def update(self, snapshot: Snapshot) -> None:
        """Show and redraw the panel for a run with a ladder; hide it otherwise."""
        tempering = snapshot.tempering
        if tempering is None:
            self.layout.display = "none"
            return
        self.layout.display = None
        levels, walkers = tempering.groups.shape[1], tempering.groups.shape[0]
        self._update_group_choices(walkers)
        ladder = tempering.temperatures
        rates = tempering.acceptance
        self.info.value = (
            f"{ladder[0]:.0f}–{ladder[-1]:.0f} K in {levels} levels × {walkers} walkers · "
            f"exchanges every {tempering.exchange_every} steps · {tempering.rounds} rounds"
        )
        replicas = tempering.groups[self.group.value]
        history = tempering.history
        with self.figure.batch_update():
            bar = self.figure.data[0]
            bar.x = pair_labels(ladder)
            bar.y = np.nan_to_num(rates, nan=0.0)
            bar.text = ["n/a" if np.isnan(r) else f"{r:.0%}" for r in rates]
            self._ensure_lines(levels)
            for line, replica in zip(self.figure.data[1:], replicas, strict=True):
                line.name = f"replica {replica}"
                if len(history.get("step", ())):
                    line.x = history["time_ps"]
                    line.y = history["temperature"][:, replica]
            self.figure.update_yaxes(
                tickvals=ladder, ticktext=[f"{t:.0f}" for t in ladder], row=1, col=2
            )

    def _update_group_choices(self, walkers: int) -> None:
        if len(self.group.options) == walkers:
            return
        value = self.group.value if self.group.value < walkers else 0
        self.group.options = [(f"group {g}", g) for g in range(walkers)]
        self.group.value = value

    def _ensure_lines(self, levels: int) -> None:
        """One step-line trace per replica of a group (``levels`` of them) after the bars."""
        if len(self.figure.data) == levels + 1:
            return
        self.figure.data = self.figure.data[:1]
        for _ in range(levels):
            self.figure.add_scatter(mode="lines", line={"shape": "hv", "width": 2}, **RIGHT)
