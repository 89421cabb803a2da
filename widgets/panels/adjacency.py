"""Adjacency heatmap of one replica over the recorded frames, its changes and edge count."""

from __future__ import annotations

import bisect
import html
import threading

import ipywidgets as ipw
import numpy as np

from widgets.adjacency_frames import (
    LEVELS,
    diff_codes,
    edge_counts,
    frame_adjacency,
    graph_adjacency,
)
from widgets.panels.base import LivePanel
from widgets.plot_style import new_figure
from widgets.snapshot import Snapshot

COORDINATES, GRAPH = "coordinates + cutoff", "neighbour graph (now)"

#: Colours of absent, kept, added and removed entries (codes 0..3 of ``diff_codes``).
DIFF_COLORS = ["#ffffff", "#c7c7c7", "#2ca02c", "#d62728"]
ADJACENCY_SCALE = [[0.0, "#ffffff"], [1.0, "#08306b"]]


def _discrete_scale(colors: list[str]) -> list[list]:
    """A plotly colour scale mapping integer codes 0..len-1 to flat colours."""
    scale = []
    for code, color in enumerate(colors):
        scale += [[code / len(colors), color], [(code + 1) / len(colors), color]]
    return scale


class AdjacencyPanel(LivePanel):
    """Who neighbours whom in one replica, frame by frame, and how that changes.

    Parameters
    ----------
    controller : SimulationController, optional
    font_size : int
    refresh_interval : float
    """

    def __init__(self, controller=None, font_size: int = 12, refresh_interval: float = 0.5):
        super().__init__(refresh_interval=refresh_interval)
        self.replica = ipw.Dropdown(
            options=[("replica 0", 0)], value=0, description="replica", layout={"width": "180px"}
        )
        self.level = ipw.ToggleButtons(options=LEVELS, value="residue", description="level")
        self.level.style.button_width = "70px"
        self.source_choice = ipw.ToggleButtons(
            options=[COORDINATES, GRAPH], value=COORDINATES, description="from"
        )
        self.source_choice.style.button_width = "170px"
        self.frame = ipw.IntSlider(
            value=0,
            min=0,
            max=0,
            description="frame",
            continuous_update=False,
            layout={"width": "420px"},
        )
        self.follow = ipw.Checkbox(value=True, description="follow latest frame", indent=False)
        self.diff = ipw.Checkbox(
            value=False, description="changes since previous frame", indent=False
        )
        self.info = ipw.HTML()
        self.heatmap = new_figure("Adjacency", "", "", height=420, font_size=font_size)
        self.heatmap.add_heatmap(
            z=np.zeros((1, 1)), colorscale=ADJACENCY_SCALE, zmin=0, zmax=1, showscale=False
        )
        self.heatmap.update_layout(yaxis={"autorange": "reversed", "scaleanchor": "x"}, width=460)
        self.counts = new_figure(
            "Edges over time", "step", "directed edges", height=420, font_size=font_size
        )
        self.counts.add_scatter(mode="lines+markers", name="edges")
        self.counts.update_layout(width=460)
        self._count_cache: dict[tuple, int] = {}
        self._moving_slider: int | None = None  # thread fitting the slider to the frames
        self._frame_steps: list[int] = []
        self._shown_step = 0
        for control in (self.replica, self.level, self.source_choice, self.diff, self.follow):
            control.observe(lambda _: self.refresh(), names="value")
        self.frame.observe(self._on_frame, names="value")
        self.set_body(
            ipw.HBox([self.replica, self.level]),
            self.source_choice,
            ipw.HBox([self.frame, self.follow, self.diff]),
            self.info,
            ipw.HBox([self.heatmap, self.counts]),
        )
        if controller is not None:
            self.attach(controller)

    def attach(self, source) -> None:
        """Follow a new run from its newest frame (the previous run's edge counts are
        dropped)."""
        self._count_cache.clear()
        self._frame_steps, self._shown_step = [], 0
        self.follow.value = True
        super().attach(source)

    def _on_frame(self, change) -> None:
        if self._moving_slider == threading.get_ident():
            return  # the panel's own move (another thread's is the user's)
        if change["new"] < len(self._frame_steps):
            self._shown_step = self._frame_steps[change["new"]]
        if change["new"] != self.frame.max:
            self.follow.value = False
        self.refresh()

    def update(self, snapshot: Snapshot) -> None:
        """Redraw the heatmap and the edge counts."""
        system = snapshot.system
        if system is None:
            self.info.value = "No simulation yet: start a run to see its neighbour graph."
            return
        if len(self.replica.options) != snapshot.replicas:
            self.replica.options = [(f"replica {r}", r) for r in range(snapshot.replicas)]
        frames = self.source.frames()
        if not frames:
            return
        self._update_slider([step for step, _ in frames])
        replica, level = self.replica.value, self.level.value
        labels = self._labels(system, level)
        if self.source_choice.value == GRAPH:
            try:
                matrix = self.source.with_simulation(
                    lambda sim: graph_adjacency(sim.graph, sim.system, replica, level)
                )
            except RuntimeError as exc:  # not built yet, or in other processes
                self.info.value = f"No live neighbour graph: {html.escape(str(exc))}."
                return
            self._draw_matrix(matrix.astype(np.int8), labels, diff=False)
            self.info.value = f"Neighbour graph of replica {replica} at step {snapshot.step}"
        else:
            index = self.frame.value
            step, positions = frames[index]
            current = frame_adjacency(positions[replica], system, snapshot.cutoff, level)
            show_diff = self.diff.value and index > 0
            if show_diff:
                previous = frame_adjacency(
                    frames[index - 1][1][replica], system, snapshot.cutoff, level
                )
                self._draw_matrix(diff_codes(previous, current), labels, diff=True)
                added = int((current & ~previous).sum())
                removed = int((previous & ~current).sum())
                change = (
                    f"; <b style='color:#2ca02c'>+{added}</b> "
                    f"<b style='color:#d62728'>−{removed}</b> since step {frames[index - 1][0]}"
                )
            else:
                self._draw_matrix(current.astype(np.int8), labels, diff=False)
                change = ""
            self.info.value = (
                f"Replica {replica}, step {step} (frame {index + 1} of {len(frames)}), "
                f"cutoff {snapshot.cutoff:.1f} Å: {int(current.sum())} directed edges{change}"
            )
        self._draw_counts(frames, system, snapshot.cutoff, replica, level)

    def _update_slider(self, steps: list[int]) -> None:
        """Fit the frame slider to the recorded frames without calling back into the panel.

        Following, the slider sits on the newest frame. Otherwise it stays on the step the
        user chose: when the frames were thinned, on the latest kept frame at or before it.
        """
        last = len(steps) - 1
        if self.follow.value:
            index = last
        else:
            index = max(0, bisect.bisect_right(steps, self._shown_step) - 1)
        self._frame_steps = steps
        self._moving_slider = threading.get_ident()
        try:
            if index > self.frame.max:
                self.frame.max = last
                self.frame.value = index
            else:
                self.frame.value = index
                self.frame.max = last
        finally:
            self._moving_slider = None
        if self.follow.value:
            self._shown_step = steps[last]

    @staticmethod
    def _labels(system, level: str) -> list[str]:
        if level == "residue":
            return [
                f"{name}{rid}"
                for name, rid in zip(system.residue_names, system.residue_ids, strict=True)
            ]
        return [
            f"{system.bead_names[i]}{int(system.bead_residue[i]) + 1}"
            for i in range(system.n_beads)
        ]

    def _draw_matrix(self, matrix: np.ndarray, labels: list[str], diff: bool) -> None:
        trace = self.heatmap.data[0]
        with self.heatmap.batch_update():
            trace.z = matrix
            trace.x = labels
            trace.y = labels
            if diff:
                trace.colorscale = _discrete_scale(DIFF_COLORS)
                trace.zmin, trace.zmax = -0.5, len(DIFF_COLORS) - 0.5
                self.heatmap.layout.title.text = "Adjacency changes: green added, red removed"
            else:
                trace.colorscale = ADJACENCY_SCALE
                trace.zmin, trace.zmax = 0, 1
                self.heatmap.layout.title.text = "Adjacency"

    def _draw_counts(self, frames, system, cutoff: float, replica: int, level: str) -> None:
        missing = [(s, p) for s, p in frames if (s, replica, level) not in self._count_cache]
        if missing:
            stack = np.stack([p[replica] for _, p in missing])
            counts = edge_counts(frame_adjacency(stack, system, cutoff, level))
            for (step, _), count in zip(missing, counts, strict=True):
                self._count_cache[(step, replica, level)] = int(count)
        steps = [s for s, _ in frames]
        kept = set(steps)
        self._count_cache = {k: v for k, v in self._count_cache.items() if k[0] in kept}
        with self.counts.batch_update():
            self.counts.data[0].x = steps
            self.counts.data[0].y = [self._count_cache[(s, replica, level)] for s in steps]
