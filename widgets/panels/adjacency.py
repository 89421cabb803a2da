"""Adjacency heatmap of one replica over the recorded frames, its changes and edge count,
with the native contacts marked formed or broken."""

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
    native_contacts_formed,
)
from widgets.panels.base import LivePanel, new_figure
from widgets.snapshot import Snapshot

COORDINATES, GRAPH = "coordinates + cutoff", "neighbour graph (now)"

#: Colours of absent, kept, added and removed entries (codes 0..3 of ``diff_codes``).
DIFF_COLORS = ["#ffffff", "#c7c7c7", "#2ca02c", "#d62728"]
ADJACENCY_SCALE = [[0.0, "#ffffff"], [1.0, "#08306b"]]
#: Marker colours of formed and broken native contacts.
FORMED_COLOR, BROKEN_COLOR = "#ff9f1c", "#d62728"


def _swatch(color: str, text: str, border: str = "#888") -> str:
    return (
        f"<span style='display:inline-block;width:0.9em;height:0.9em;background:{color};"
        f"border:1px solid {border};vertical-align:middle'></span> {text}"
    )


def legend_html(diff: bool) -> str:
    """The colour legend of the heatmap (adjacency, or its changes) and contact markers."""
    if diff:
        cells = [
            _swatch(DIFF_COLORS[1], "kept"),
            _swatch(DIFF_COLORS[2], "added"),
            _swatch(DIFF_COLORS[3], "removed"),
            _swatch(DIFF_COLORS[0], "apart"),
        ]
    else:
        cells = [_swatch(ADJACENCY_SCALE[1][1], "within cutoff"), _swatch("#ffffff", "apart")]
    cells += [
        f"<span style='color:{FORMED_COLOR}'>●</span> native contact formed",
        f"<span style='color:{BROKEN_COLOR}'>○</span> native contact broken",
    ]
    return " &nbsp; ".join(cells)


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
        self.cutoff = ipw.BoundedFloatText(
            value=10.0, min=1.0, max=50.0, step=0.5, description="cutoff (Å)",
            tooltip="pairs closer than this are neighbours (the model's radius when a run "
            "is attached)",
            layout={"width": "180px"},
        )
        self.info = ipw.HTML()
        self.legend = ipw.HTML(legend_html(diff=False))
        self.heatmap = new_figure("Adjacency", "", "", height=420, font_size=font_size)
        self.heatmap.add_heatmap(
            z=np.zeros((1, 1)), colorscale=ADJACENCY_SCALE, zmin=0, zmax=1, showscale=False
        )
        self.heatmap.add_scatter(
            name="native contacts", mode="markers", hoverinfo="text", showlegend=False,
            marker={"size": 7, "line": {"width": 1.5}},
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
        self._cutoff_of_run: float | None = None  # the run's radius, once shown
        controls = (self.replica, self.level, self.source_choice, self.diff, self.follow,
                    self.cutoff)
        for control in controls:
            control.observe(lambda _: self.refresh(), names="value")
        self.frame.observe(self._on_frame, names="value")
        self.set_body(
            ipw.HBox([self.replica, self.level, self.cutoff]),
            self.source_choice,
            ipw.HBox([self.frame, self.follow, self.diff]),
            self.info,
            ipw.HBox([self.heatmap, self.counts]),
            self.legend,
        )
        if controller is not None:
            self.attach(controller)

    def attach(self, source) -> None:
        """Follow a new run from its newest frame (the previous run's edge counts are
        dropped)."""
        self._count_cache.clear()
        self._frame_steps, self._shown_step = [], 0
        self._cutoff_of_run = None
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
        """Redraw the heatmap, the native-contact markers and the edge counts."""
        system = snapshot.system
        if system is None:
            self.info.value = "No simulation yet: start a run to see its neighbour graph."
            return
        if len(self.replica.options) != snapshot.replicas:
            self.replica.options = [(f"replica {r}", r) for r in range(snapshot.replicas)]
        if self._cutoff_of_run is None and snapshot.cutoff > 0:
            self._cutoff_of_run = snapshot.cutoff
            self.cutoff.value = snapshot.cutoff  # the model's radius, until the user picks
        frames = self.source.frames()
        if not frames:
            return
        self._update_slider([step for step, _ in frames])
        replica, level, cutoff = self.replica.value, self.level.value, self.cutoff.value
        labels = self._labels(system, level)
        graph = self.source_choice.value == GRAPH
        for control in (self.frame, self.follow, self.diff, self.cutoff):
            control.disabled = graph  # the live graph is the model's, now
        if graph:
            try:
                matrix = self.source.with_simulation(
                    lambda sim: graph_adjacency(sim.graph, sim.system, replica, level)
                )
            except RuntimeError as exc:  # not built yet, or in other processes
                self.info.value = f"No live neighbour graph: {html.escape(str(exc))}."
                return
            self._draw_matrix(matrix.astype(np.int8), labels, diff=False)
            self._draw_contacts(system, snapshot.latest_positions[replica], labels, level)
            self.info.value = f"Neighbour graph of replica {replica} at step {snapshot.step}"
        else:
            index = self.frame.value
            step, positions = frames[index]
            current = frame_adjacency(positions[replica], system, cutoff, level)
            show_diff = self.diff.value and index > 0
            if show_diff:
                previous = frame_adjacency(frames[index - 1][1][replica], system, cutoff, level)
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
            formed, total = self._draw_contacts(system, positions[replica], labels, level)
            self.info.value = (
                f"Replica {replica}, step {step} (frame {index + 1} of {len(frames)}), "
                f"cutoff {cutoff:.1f} Å: {int(current.sum())} directed edges{change}; "
                f"{formed} of {total} native contacts formed"
            )
        self._draw_counts(frames, system, cutoff, replica, level)

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
            self.legend.value = legend_html(diff)
            if diff:
                trace.colorscale = _discrete_scale(DIFF_COLORS)
                trace.zmin, trace.zmax = -0.5, len(DIFF_COLORS) - 0.5
                self.heatmap.layout.title.text = "Adjacency changes: green added, red removed"
            else:
                trace.colorscale = ADJACENCY_SCALE
                trace.zmin, trace.zmax = 0, 1
                self.heatmap.layout.title.text = "Adjacency"

    def _draw_contacts(
        self, system, positions: np.ndarray, labels: list[str], level: str
    ) -> tuple[int, int]:
        """Mark each native contact (both triangles) formed or broken in one replica's
        positions ``(n, 3)``; returns (formed, total)."""
        formed = native_contacts_formed(positions, system)
        pairs = system.native_contacts.cpu().numpy()
        if level == "bead":
            pairs = system.ca_index.cpu().numpy()[pairs]
        rows = np.concatenate([pairs[:, 0], pairs[:, 1]])
        cols = np.concatenate([pairs[:, 1], pairs[:, 0]])
        state = np.concatenate([formed, formed])
        names = labels
        trace = self.heatmap.data[1]
        with self.heatmap.batch_update():
            trace.x = [names[c] for c in cols]
            trace.y = [names[r] for r in rows]
            trace.marker.color = [FORMED_COLOR if s else "rgba(0,0,0,0)" for s in state]
            trace.marker.line.color = [FORMED_COLOR if s else BROKEN_COLOR for s in state]
            trace.text = [
                f"native contact {names[r]}–{names[c]}: {'formed' if s else 'broken'}"
                for r, c, s in zip(rows, cols, state, strict=True)
            ]
        return int(formed.sum()), int(len(formed))

    def _draw_counts(self, frames, system, cutoff: float, replica: int, level: str) -> None:
        key = (replica, level, cutoff)
        missing = [(s, p) for s, p in frames if (s, *key) not in self._count_cache]
        if missing:
            stack = np.stack([p[replica] for _, p in missing])
            counts = edge_counts(frame_adjacency(stack, system, cutoff, level))
            for (step, _), count in zip(missing, counts, strict=True):
                self._count_cache[(step, *key)] = int(count)
        steps = [s for s, _ in frames]
        kept = set(steps)
        self._count_cache = {k: v for k, v in self._count_cache.items() if k[0] in kept}
        with self.counts.batch_update():
            self.counts.data[0].x = steps
            self.counts.data[0].y = [self._count_cache[(s, *key)] for s in steps]
