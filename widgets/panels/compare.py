"""Compare panel: configuration A against B, each with its network architecture (and, for a
network with run-time backends, its backend), on the same system, seeds and device."""

from __future__ import annotations

import copy
import html
from collections.abc import Callable

import ipywidgets as ipw

from widgets.comparison import PRESETS, CompareRunner, CompareSnapshot
from widgets.modes import default_settings
from widgets.panels.base import COLORS, LivePanel, new_figure
from workbench.model.architectures import ARCHITECTURES
from workbench.model.options import KernelOptions
from workbench.runner import NETWORK_BACKENDS, RunSettings, backends_of


def _deviation_text(label: str, deviation) -> str:
    if deviation is None:
        return ""
    return (
        f"largest force deviation A↔B ({label}): {deviation.max_abs:.3g} kcal/mol/Å "
        f"({deviation.relative:.2e} of the largest force)"
    )


def _side_title(side) -> str:
    """``"A: egnn · baseline"``, ``"B: nequip/openequivariance · baseline"``, ``"B: dp/deepmd ·
    baseline"``: a side's name, network (with its backend) and applied switches."""
    return f"{side.name}: {side.ran}"


class ComparePanel(LivePanel):
    """Race two kernel configurations, two network architectures (each side has its own), or
    two backends of one network (:meth:`race_backends`: a tensor-product network's
    convolution backends, the engine against deepmd-kit on a Deep Potential), and show
    speedup, memory, force deviation (one network) and Q. A side's backend selector shows,
    with its network's backends (`workbench.runner.NETWORK_BACKENDS`), while its network has
    them.

    Parameters
    ----------
    settings : RunSettings, optional
        Used when no ``settings_source`` is given.
    settings_source : callable, optional
        Returns the settings of both runs (e.g. the Launch panel's fields).
    steps : int, optional
        Steps per configuration (default ``settings.steps``).
    font_size : int
        Raise (18–24) for a talk.
    """

    def __init__(
        self,
        settings: RunSettings | None = None,
        settings_source: Callable[[], RunSettings] | None = None,
        steps: int | None = None,
        font_size: int = 12,
    ):
        super().__init__(refresh_interval=0.3)
        self._settings = copy.deepcopy(settings or default_settings())
        self.settings_source = settings_source or (lambda: copy.deepcopy(self._settings))
        self.font_size = font_size
        names = list(PRESETS)
        self.preset_a = ipw.Dropdown(options=names, value=names[0], description="A")
        self.preset_b = ipw.Dropdown(options=names, value=names[1], description="B")
        self.arch_a, self.arch_b = (
            ipw.Dropdown(options=list(ARCHITECTURES), value=self._settings.architecture or "schnet",
                         description=f"{side} network", layout={"width": "200px"})
            for side in "AB")
        self.backend_a, self.backend_b = (
            ipw.Dropdown(description=f"{side} backend", layout={"width": "260px"})
            for side in "AB")
        for arch in (self.arch_a, self.arch_b):
            arch.observe(lambda _change: self._show_backends(), names="value")
        self._show_backends()
        self.steps = ipw.BoundedIntText(
            value=steps or self._settings.steps,
            min=1,
            max=10**8,
            description="steps each",
            layout={"width": "200px"},
        )
        self.run_button = ipw.Button(
            description="Race A vs B", button_style="success", icon="flag-checkered"
        )
        self.stop_button = ipw.Button(
            description="Stop", button_style="danger", icon="stop", disabled=True
        )
        self.summary = ipw.HTML()
        self.race = new_figure(
            "Race: work done over wall time",
            "wall time (s)",
            "timestep·mol done",
            height=320,
            font_size=font_size,
        )
        self.rates = new_figure(
            "Throughput per chunk",
            "wall time (s)",
            "timestep·mol/s",
            height=320,
            font_size=font_size,
        )
        self.q_histogram = new_figure(
            "Q distribution", "Q", "count", height=320, font_size=font_size
        )
        for name in ("A", "B"):
            line = {"color": COLORS[name], "width": 3}
            self.race.add_scatter(name=name, mode="lines+markers", line=line)
            self.rates.add_scatter(name=name, mode="lines+markers", line=line)
            self.q_histogram.add_histogram(
                name=name,
                opacity=0.55,
                marker={"color": COLORS[name]},
                xbins={"start": 0, "end": 1.0, "size": 0.02},
            )
        self.q_histogram.update_layout(barmode="overlay")
        self.run_button.on_click(lambda _: self.run())
        self.stop_button.on_click(lambda _: self.source and self.source.stop())
        self.set_body(
            ipw.HTML("<b>Compare</b>: same system, seeds and device; chunks alternate A, B."),
            ipw.HBox([self.preset_a, self.preset_b, self.steps]),
            ipw.HBox([self.arch_a, self.arch_b]),
            ipw.HBox([self.backend_a, self.backend_b]),
            ipw.HBox([self.run_button, self.stop_button]),
            self.summary,
            ipw.HBox([self.race, self.rates]),
            self.q_histogram,
        )

    @property
    def runner(self) -> CompareRunner | None:
        """The comparison started last."""
        return self.source

    def figures(self) -> dict:
        """The figures by file name (for export)."""
        return {"race": self.race, "race_rates": self.rates, "race_q": self.q_histogram}

    def _show_backends(self) -> None:
        for arch, backend in ((self.arch_a, self.backend_a), (self.arch_b, self.backend_b)):
            own = NETWORK_BACKENDS.get(arch.value)
            backend.layout.display = None if own is not None else "none"
            if own is not None and backend.options != own.choices:
                backend.options = own.choices
                backend.value = getattr(self._settings, own.setting)

    @property
    def backends(self) -> tuple[str | None, str | None]:
        """The backend of each side (None for a side whose network has none)."""
        return tuple(backend.value if arch.value in NETWORK_BACKENDS else None
                     for arch, backend in ((self.arch_a, self.backend_a),
                                           (self.arch_b, self.backend_b)))

    def race_backends(self, backend_a: str = "e3nn", backend_b: str = "openequivariance") -> None:
        """Set up a race of two backends of one network (``race_backends("engine",
        "deepmd")`` for a Deep Potential): both sides that network, B with A's kernel
        configuration, the backends as given; :meth:`run` starts it.

        Raises
        ------
        ValueError
            A backend of no network, or backends of two networks.
        """
        architecture = backends_of(backend_a).architecture
        if backends_of(backend_b).architecture != architecture:
            raise ValueError(f"{backend_a!r} and {backend_b!r} are backends of two networks")
        self.arch_a.value = self.arch_b.value = architecture
        self.preset_b.value = self.preset_a.value
        self.backend_a.value, self.backend_b.value = backend_a, backend_b

    def run(self) -> CompareRunner:
        """Start a race with the chosen presets, networks and backends (the previous one must
        have ended)."""
        if self.source is not None and self.source.state.active:
            return self.source
        runner = CompareRunner(
            self.settings_source(),
            KernelOptions.parse(PRESETS[self.preset_a.value]),
            KernelOptions.parse(PRESETS[self.preset_b.value]),
            steps=self.steps.value,
            architectures=(self.arch_a.value, self.arch_b.value),
            backends=self.backends,
        )
        self.attach(runner)
        runner.start()
        return runner

    def update(self, snapshot: CompareSnapshot) -> None:
        """Redraw the race from ``snapshot``."""
        self.run_button.disabled = snapshot.state.active
        self.stop_button.disabled = not snapshot.state.active
        with self.race.batch_update(), self.rates.batch_update(), self.q_histogram.batch_update():
            for index, side in enumerate((snapshot.a, snapshot.b)):
                if side is None:
                    continue
                self.race.data[index].x = side.wall_s
                self.race.data[index].y = side.timestep_mol
                title = _side_title(side)
                self.race.data[index].name = title
                self.rates.data[index].x = side.wall_s
                self.rates.data[index].y = side.rate
                self.rates.data[index].name = title
                self.q_histogram.data[index].x = side.q
                self.q_histogram.data[index].name = title
        self.summary.value = self._summary(snapshot)

    def _summary(self, snapshot: CompareSnapshot) -> str:
        speedup = snapshot.speedup
        lines = [f"<b>{snapshot.state.value}</b> · {html.escape(snapshot.message)}"]
        if speedup is not None:
            lines.append(
                f"<span style='font-size:2em'><b>speedup B/A: {speedup:.2f}×</b></span>"
            )
        elif snapshot.fallback_note:
            lines.append(
                "<span style='font-size:1.4em;color:#b35c00'><b>"
                f"{html.escape(snapshot.fallback_note)}</b></span>"
            )
        for side in (snapshot.a, snapshot.b):
            if side is None:
                continue
            memory = "n/a (CPU)" if side.peak_memory_gb is None else f"{side.peak_memory_gb:.2f} GB"
            lines.append(
                f"{html.escape(_side_title(side))}: {side.mean_rate:,.1f} "
                f"timestep·mol/s, peak memory {memory}"
            )
        for label, deviation in (
            ("start", snapshot.deviation_start),
            ("end", snapshot.deviation_end),
        ):
            text = _deviation_text(label, deviation)
            if text:
                lines.append(text)
        if snapshot.error:
            lines.append(f"<span style='color:#b00020'>Error: {html.escape(snapshot.error)}</span>")
        lines += [f"<span style='color:#b35c00'>{html.escape(m)}</span>" for m in snapshot.messages]
        lines += [
            f"<span style='color:#b00020'>display: {html.escape(e)}</span>"
            for e in snapshot.display_errors
        ]
        # sizes relative to the panel's text, so that projector mode scales them too
        scale = (self.font_size + 2) / 12
        return f"<div style='font-size:{scale:.2f}em'>" + "<br>".join(lines) + "</div>"
