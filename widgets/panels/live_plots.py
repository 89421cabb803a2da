"""Live plots: throughput with kernel-switch markers, GPU memory, RMSD and Q per replica.

Throughput is drawn with a steady line through the noisy per-chunk values, restarted at
every kernel switch (:func:`segment_mean`); RMSD and Q as a mean line inside a band over
the replicas (:func:`replica_band`).
"""

from __future__ import annotations

import ipywidgets as ipw
import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from widgets.kernel_switches import backend_change_label, change_label
from widgets.panels.base import COLORS, LivePanel, new_figure
from widgets.snapshot import Snapshot

BANDS = ("min–max", "±std")


def replica_band(values: np.ndarray, band: str = "min–max") -> tuple[np.ndarray, ...]:
    """Mean over replicas and the lower and upper edge of a band around it.

    Parameters
    ----------
    values : numpy.ndarray, shape (points, replicas)
    band : {"min–max", "±std"}

    Returns
    -------
    mean, lower, upper : numpy.ndarray, each shape (points,)
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"expected (points, replicas), got shape {values.shape}")
    if values.shape[0] == 0:
        empty = np.empty(0)
        return empty, empty, empty
    mean = values.mean(axis=1)
    if band == "min–max":
        return mean, values.min(axis=1), values.max(axis=1)
    if band == "±std":
        std = values.std(axis=1)
        return mean, mean - std, mean + std
    raise ValueError(f"band must be one of {BANDS}, got {band!r}")


def segment_mean(
    steps: np.ndarray, values: np.ndarray, breaks: list[int], window: int = 9
) -> np.ndarray:
    """Centred running mean of ``values`` that never averages across a break.

    Parameters
    ----------
    steps : numpy.ndarray, shape (m,)
        Step of each value, increasing.
    values : numpy.ndarray, shape (m,)
        E.g. timestep·mol/s of each chunk; NaN values are left out of the means.
    breaks : list of int
        Steps at which a new segment starts (kernel switches): a value at or after a break
        is averaged only with values of its own segment.
    window : int
        Values per mean (odd; shrinks at the ends of a segment).

    Returns
    -------
    numpy.ndarray, shape (m,), float64
        NaN where a value's neighbourhood holds no finite value.
    """
    steps = np.asarray(steps)
    values = np.asarray(values, dtype=np.float64)
    segment = np.searchsorted(np.sort(np.asarray(breaks)), steps, side="right")
    half = max(window, 1) // 2
    smooth = np.full(values.shape, np.nan)
    for label in np.unique(segment):
        index = np.flatnonzero(segment == label)
        part = values[index]
        for k, i in enumerate(index):
            near = part[max(0, k - half) : k + half + 1]
            near = near[np.isfinite(near)]
            if near.size:
                smooth[i] = near.mean()
    return smooth


MEAN_ONLY = -1


def _band_traces(name: str, color: str, row_col: dict, show_legend: bool) -> list[go.Scatter]:
    """Lower edge, upper edge (filled to the lower), mean and one selected replica."""
    return [
        go.Scatter(
            name=f"{name} band",
            mode="lines",
            line={"width": 0},
            showlegend=False,
            hoverinfo="skip",
            **row_col,
        ),
        go.Scatter(
            name="replica band",
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=COLORS["band"],
            showlegend=show_legend,
            **row_col,
        ),
        go.Scatter(
            name="mean",
            mode="lines+markers",
            line={"color": color, "width": 2},
            marker={"size": 4},
            showlegend=show_legend,
            **row_col,
        ),
        go.Scatter(
            name="selected replica",
            mode="lines",
            line={"color": "#ff7f0e", "width": 1.5},
            showlegend=show_legend,
            **row_col,
        ),
    ]


def _switch_label(previous, event) -> str:
    """What a switch asked to change, and "not run" where the run fell back instead (a
    change of the network's backend: ``"backend e3nn→openequivariance"``,
    ``"backend engine→deepmd"``)."""
    if event.requested_backend is not None:
        return backend_change_label(previous.backend, event.requested_backend, event.backend)
    label = change_label(previous.requested, event.requested)
    return label if event.applied == event.requested else f"{label} (not run)"


class LivePlots(LivePanel):
    """Throughput, memory and folding metrics of the attached run, updated while it runs.

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
        refresh_interval: float = 0.3,
    ):
        super().__init__(refresh_interval=refresh_interval)
        self.throughput_figure = new_figure(
            "Throughput", "step", "timestep·mol/s", font_size=font_size
        )
        self.throughput_figure.add_scatter(
            name="per chunk", mode="markers", marker={"color": COLORS["A"], "size": 5},
            opacity=0.35,
        )
        self.throughput_figure.add_scatter(
            name="timestep·mol/s (smoothed)", mode="lines", line={"color": COLORS["A"], "width": 3}
        )
        self.throughput_figure.add_scatter(
            name="ns/day (smoothed)", mode="lines", yaxis="y2",
            line={"color": "#2ca02c", "dash": "dot"},
        )
        self.throughput_figure.update_layout(
            yaxis2={"title": "ns/day", "overlaying": "y", "side": "right", "showgrid": False}
        )
        self.memory_figure = new_figure("GPU memory", "step", "GB", height=220, font_size=font_size)
        self.memory_figure.add_scatter(name="allocated", mode="lines+markers")
        self.memory_figure.add_scatter(name="peak", mode="lines", line={"dash": "dash"})
        self.folding_figure = self._folding_figure(font_size)
        self.band = ipw.Dropdown(
            options=BANDS, value=BANDS[0], description="band", layout={"width": "180px"}
        )
        self.replica = ipw.Dropdown(
            options=[("mean only", MEAN_ONLY)],
            value=MEAN_ONLY,
            description="replica",
            layout={"width": "200px"},
        )
        self.band.observe(lambda _: self.refresh(), names="value")
        self.replica.observe(lambda _: self.refresh(), names="value")
        for figure in self.figures().values():
            figure.update_layout(width=width)
        self.set_body(
            self.throughput_figure,
            self.memory_figure,
            ipw.HBox([self.band, self.replica]),
            self.folding_figure,
        )
        if controller is not None:
            self.attach(controller)

    @staticmethod
    def _folding_figure(font_size: int) -> go.FigureWidget:
        layout = make_subplots(rows=1, cols=2, subplot_titles=("RMSD (Å)", "Q"))
        figure = go.FigureWidget(layout)
        for trace in _band_traces("rmsd", COLORS["A"], {"xaxis": "x", "yaxis": "y"}, True):
            figure.add_trace(trace)
        for trace in _band_traces("q", COLORS["A"], {"xaxis": "x2", "yaxis": "y2"}, False):
            figure.add_trace(trace)
        figure.update_layout(
            height=280,
            font={"size": font_size},
            template="plotly_white",
            uirevision="keep",
            margin={"l": 60, "r": 30, "t": 40 + font_size, "b": 40 + font_size},
            legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.1, "yanchor": "bottom"},
        )
        figure.update_xaxes(title_text="time (ps)")
        figure.update_yaxes(range=[0, 1.05], row=1, col=2)
        return figure

    def figures(self) -> dict[str, go.FigureWidget]:
        """The figures by file name (for export)."""
        return {
            "throughput": self.throughput_figure,
            "memory": self.memory_figure,
            "rmsd_q": self.folding_figure,
        }

    def update(self, snapshot: Snapshot) -> None:
        """Redraw all figures from ``snapshot``."""
        self._update_replica_choices(snapshot.replicas)
        self._draw_throughput(snapshot)
        self._draw_memory(snapshot)
        self._draw_folding(snapshot)

    def _update_replica_choices(self, replicas: int) -> None:
        if len(self.replica.options) == replicas + 1:
            return
        choices = [("mean only", MEAN_ONLY)] + [(f"replica {r}", r) for r in range(replicas)]
        value = self.replica.value if self.replica.value < replicas else MEAN_ONLY
        self.replica.options = choices
        self.replica.value = value

    def _draw_throughput(self, snapshot: Snapshot) -> None:
        columns = snapshot.throughput
        figure = self.throughput_figure
        events = list(snapshot.events)
        markers = [
            (event, _switch_label(previous, event))
            for previous, event in zip(events, events[1:], strict=False)
            if event.step > 0
        ]
        breaks = [event.step for event, _ in markers]
        steps = columns["step"]
        with figure.batch_update():
            figure.data[0].x = steps
            figure.data[0].y = columns["timestep_mol_per_s"]
            figure.data[1].x = steps
            figure.data[1].y = segment_mean(steps, columns["timestep_mol_per_s"], breaks)
            figure.data[2].x = steps
            figure.data[2].y = segment_mean(steps, columns["ns_per_day"], breaks)
            figure.layout.shapes = [
                {
                    "type": "line",
                    "xref": "x",
                    "yref": "paper",
                    "x0": event.step,
                    "x1": event.step,
                    "y0": 0,
                    "y1": 1,
                    "line": {"color": "#9467bd", "dash": "dash", "width": 2},
                }
                for event, _ in markers
            ]
            # labels stagger down the plot so that close switches do not overlap
            figure.layout.annotations = [
                {
                    "x": event.step,
                    "y": 0.98 - 0.13 * (k % 4),
                    "xref": "x",
                    "yref": "paper",
                    "text": label,
                    "showarrow": False,
                    "xanchor": "left",
                    "yanchor": "top",
                    "bgcolor": "rgba(255, 255, 255, 0.8)",
                    "font": {"color": "#9467bd"},
                }
                for k, (event, label) in enumerate(markers)
            ]
            figure.layout.title.text = (
                f"Throughput: {snapshot.mean_timestep_mol_per_s:,.0f} timestep·mol/s, "
                f"{snapshot.mean_ns_per_day:.3g} ns/day ({snapshot.device or 'device'})"
            )

    def _draw_memory(self, snapshot: Snapshot) -> None:
        columns = snapshot.throughput
        figure = self.memory_figure
        on_gpu = snapshot.memory_gb is not None
        with figure.batch_update():
            figure.data[0].x = columns["step"]
            figure.data[0].y = columns["memory_gb"]
            figure.data[1].x = columns["step"]
            figure.data[1].y = columns["peak_memory_gb"]
            if on_gpu:
                figure.layout.title.text = (
                    f"GPU memory: {snapshot.memory_gb:.2f} GB now, "
                    f"peak {snapshot.peak_memory_gb:.2f} GB"
                )
            else:
                figure.layout.title.text = "GPU memory: none in use (CPU run)"

    def _draw_folding(self, snapshot: Snapshot) -> None:
        metrics = snapshot.metrics
        figure = self.folding_figure
        if snapshot.points == 0:
            return
        time_ps = metrics["time_ps"]
        replica = self.replica.value
        with figure.batch_update():
            for offset, key in ((0, "rmsd"), (4, "q")):
                values = metrics[key]
                mean, lower, upper = replica_band(values, self.band.value)
                for index, y in enumerate((lower, upper, mean)):
                    figure.data[offset + index].x = time_ps
                    figure.data[offset + index].y = y
                selected = figure.data[offset + 3]
                selected.x = time_ps if replica != MEAN_ONLY else np.empty(0)
                selected.y = values[:, replica] if replica != MEAN_ONLY else np.empty(0)
