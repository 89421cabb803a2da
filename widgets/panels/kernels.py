"""Kernel switches of the running simulation: one toggle per fused technique the network
implements, MLP precision."""

from __future__ import annotations

import html
from dataclasses import fields

import ipywidgets as ipw

from widgets.kernel_switches import absent_techniques_note, options_label
from widgets.panels.base import LivePanel
from widgets.snapshot import Snapshot
from workbench.model.force_paths import (
    STEP_TECHNIQUES,
    drop_unimplemented,
    implemented_techniques,
)
from workbench.model.options import PRECISIONS, KernelOptions

TECHNIQUES = tuple(f.name for f in fields(KernelOptions) if f.name != "mlp_precision")


class KernelsPanel(LivePanel):
    """Switch fused techniques and quantization on and off, live.

    Every change is sent to the attached run, which applies it at its next chunk and
    marks it on the throughput plot. Where the fused path cannot run (no GPU, or the
    engine refuses), the panel shows the run's message about the fallback. Only the
    techniques the network's architecture implements are offered
    (:meth:`set_architecture`); a note says why the others are absent.

    Parameters
    ----------
    controller : SimulationController, optional
    options : KernelOptions, optional
        Initial switches (all off by default).
    architecture : str
        The network of the runs the switches are for (``"schnet"``, ``"painn"``,
        ``"egnn"``, ``"nequip"``, ``"dp"``).
    """

    def __init__(self, controller=None, options: KernelOptions | None = None,
                 architecture: str = "schnet"):
        super().__init__(refresh_interval=0.5)
        options = options or KernelOptions()
        self.architecture = architecture
        self.toggles = {
            name: ipw.ToggleButton(
                value=getattr(options, name),
                description=name.replace("_", " "),
                layout={"width": "190px"},
            )
            for name in TECHNIQUES
        }
        self.precision = ipw.Dropdown(
            options=PRECISIONS,
            value=options.mlp_precision,
            description="MLP precision",
            layout={"width": "200px"},
            style={"description_width": "90px"},
        )
        self.all_on = ipw.Button(description="all on", layout={"width": "90px"})
        self.all_off = ipw.Button(description="all off (baseline)", layout={"width": "140px"})
        self.status = ipw.HTML()
        self.absent_note = ipw.HTML()
        for control in (*self.toggles.values(), self.precision):
            control.observe(self._on_change_request, names="value")
        self.all_on.on_click(lambda _: self.set_options(KernelOptions.all_on(self.precision.value)))
        self.all_off.on_click(lambda _: self.set_options(KernelOptions.baseline()))
        self.set_body(
            ipw.HTML("<b>Kernels</b> (applied at the next step of a running simulation)"),
            ipw.HBox(list(self.toggles.values()), layout={"flex_flow": "row wrap"}),
            ipw.HBox([self.precision, self.all_on, self.all_off]),
            self.absent_note,
            self.status,
        )
        self._show_techniques()
        self.set_options(options)
        if controller is not None:
            self.attach(controller)

    @property
    def options(self) -> KernelOptions:
        """The switches as set in the panel."""
        return KernelOptions(
            **{name: toggle.value for name, toggle in self.toggles.items()},
            mlp_precision=self.precision.value,
        )

    def set_architecture(self, architecture: str) -> None:
        """Offer the techniques of ``architecture``'s network only (the others are switched
        off and hidden, and a note says why); nothing is sent to a run: the switches are
        for the next run of that network."""
        self.architecture = architecture
        self._show_techniques()
        self._set_controls(self.options)
        if self.source is None:
            self._apply_options()

    def _show_techniques(self) -> None:
        shown = implemented_techniques(self.architecture)
        for name, toggle in self.toggles.items():
            toggle.layout.display = None if name in shown else "none"
        self.precision.disabled = all(name in STEP_TECHNIQUES for name in shown)
        note = absent_techniques_note(self.architecture)
        self.absent_note.value = (
            "" if not note else f"<span style='color:#666'>ℹ {html.escape(note)}</span>")

    def set_options(self, options: KernelOptions) -> None:
        """Set every control at once to what the network implements of ``options`` and send
        the result (one switch event)."""
        self._set_controls(options)
        self._apply_options()

    def _set_controls(self, options: KernelOptions) -> None:
        options = KernelOptions(**options.to_dict())
        drop_unimplemented(options, self.architecture)
        controls = (*self.toggles.values(), self.precision)
        for control in controls:
            control.unobserve(self._on_change_request, names="value")
        for name, toggle in self.toggles.items():
            toggle.value = getattr(options, name)
        self.precision.value = options.mlp_precision
        for control in controls:
            control.observe(self._on_change_request, names="value")

    def _on_change_request(self, _change) -> None:
        self._apply_options()

    def _apply_options(self) -> None:
        if self.source is None:
            label = options_label(self.options)
            self.status.value = f"requested: <code>{label}</code> (used by the next run)"
            return
        self.source.set_options(self.options)
        self.refresh()

    def update(self, snapshot: Snapshot) -> None:
        """Show what the simulation uses now and any fallback message."""
        requested = options_label(self.options)
        applied = options_label(snapshot.options)
        lines = [
            f"requested: <code>{requested}</code> · in use: <code>{applied}</code> "
            f"on {html.escape(snapshot.device or 'the chosen device')}"
        ]
        if snapshot.kernel_messages:
            message = html.escape(snapshot.kernel_messages[-1])
            lines.append(f"<span style='color:#b35c00'>⚠ {message}</span>")
        self.status.value = "<br>".join(lines)
