"""Kernel switches of the running simulation: one toggle per fused technique the network
implements, MLP precision, and the backend of a network that has run-time backends (a
tensor-product network's convolution backend, who evaluates a Deep Potential)."""

from __future__ import annotations

import html
from collections.abc import Mapping
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
from workbench.runner import NETWORK_BACKENDS, backends_of

TECHNIQUES = tuple(f.name for f in fields(KernelOptions) if f.name != "mlp_precision")


class KernelsPanel(LivePanel):
    """Switch fused techniques and quantization on and off, live.

    Every change is sent to the attached run, which applies it at its next chunk and
    marks it on the throughput plot. Where the fused path cannot run (no GPU, or the
    engine refuses), the panel shows the run's message about the fallback. Only the
    techniques the network's architecture implements are offered
    (:meth:`set_architecture`); a note says why the others are absent. For a network with
    run-time backends (`workbench.runner.NETWORK_BACKENDS`) a backend selector stands beside
    them: "TP backend" (e3nn, openequivariance, cuequivariance) for ``nequip``, "DP backend"
    (engine, deepmd) for ``dp``. A change is sent to the run the same way and marked on the
    throughput plot (``"backend e3nn→openequivariance"``); a backend that cannot run there
    is refused, and the panel shows why. Where the switch changes the run's options (a Deep
    Potential going to deepmd-kit's model runs none of the engine's techniques of the
    network), the toggles follow.

    Parameters
    ----------
    controller : SimulationController, optional
    options : KernelOptions, optional
        Initial switches (all off by default).
    architecture : str
        The network of the runs the switches are for (``"schnet"``, ``"painn"``,
        ``"egnn"``, ``"nequip"``, ``"dp"``).
    backends : mapping of str to str, optional
        Initial backend of each network with backends, by its `RunSettings` field
        (``{"tp_backend": "openequivariance"}``); the default for one left out.
    """

    def __init__(self, controller=None, options: KernelOptions | None = None,
                 architecture: str = "schnet", backends: Mapping[str, str] | None = None):
        super().__init__(refresh_interval=0.5)
        options = options or KernelOptions()
        self.architecture = architecture
        self._chosen = {name: (backends or {}).get(b.setting, b.default)
                        for name, b in NETWORK_BACKENDS.items()}
        self._events_seen = 0
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
        self.backend = ipw.Dropdown(layout={"width": "260px"}, style={"description_width": "90px"})
        self.backend_status = ipw.HTML()
        self.backend.observe(self._on_backend_request, names="value")
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
            ipw.HBox([self.backend, self.backend_status]),
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

    @property
    def backend_settings(self) -> dict[str, str]:
        """The backends as set in the panel, by `RunSettings` field: the chosen one of the
        panel's network, the default of every other network."""
        return {b.setting: self._chosen[name] if name == self.architecture else b.default
                for name, b in NETWORK_BACKENDS.items()}

    def set_backend(self, backend: str) -> None:
        """Choose the network's backend (as the selector does): sent to the attached run.

        Raises
        ------
        ValueError
            A backend of no network, or of another network than the panel's.
        """
        architecture = backends_of(backend).architecture
        if architecture != self.architecture:
            raise ValueError(f"{backend!r} is a backend of the {architecture} network; the "
                             f"panel's is {self.architecture}")
        self.backend.value = backend

    def attach(self, source) -> None:
        """Follow ``source`` (a run), from its first switch event."""
        self._events_seen = 0
        super().attach(source)

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
        self._show_backend_choices()
        note = absent_techniques_note(self.architecture)
        self.absent_note.value = (
            "" if not note else f"<span style='color:#666'>ℹ {html.escape(note)}</span>")

    def _show_backend_choices(self) -> None:
        backends = NETWORK_BACKENDS.get(self.architecture)
        self.backend.layout.display = None if backends is not None else "none"
        self.backend_status.layout.display = self.backend.layout.display
        if backends is None or self.backend.options == backends.choices:
            return
        self.backend.unobserve(self._on_backend_request, names="value")
        self.backend.options = backends.choices
        self.backend.value = self._chosen[self.architecture]
        self.backend.description = backends.label
        self.backend.tooltip = f"{backends.role} of the {self.architecture} network"
        self.backend.observe(self._on_backend_request, names="value")

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

    def _on_backend_request(self, _change) -> None:
        self._chosen[self.architecture] = self.backend.value
        if self.source is None:
            self.backend_status.value = (
                f"requested: <code>{html.escape(self.backend.value)}</code> (used by the next run)")
            return
        if not hasattr(self.source, "set_backend"):
            self.backend_status.value = (
                "<span style='color:#b35c00'>⚠ this run cannot switch its backend live; "
                "the next run uses it</span>")
            return
        self.source.set_backend(self.backend.value)
        self.refresh()

    def update(self, snapshot: Snapshot) -> None:
        """Show what the simulation uses now and any fallback message; the toggles follow
        a backend switch that changed the run's options."""
        self._show_backend(snapshot)
        self._follow_backend_switches(snapshot)
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

    def _follow_backend_switches(self, snapshot: Snapshot) -> None:
        events = getattr(snapshot, "events", ())
        switched = [e for e in events[self._events_seen:]
                    if e.requested_backend and e.applied != e.requested]
        self._events_seen = len(events)
        if switched:
            self._set_controls(switched[-1].applied)

    def _show_backend(self, snapshot: Snapshot) -> None:
        in_use = getattr(snapshot, "backend", None)
        if in_use is None:
            if self.architecture not in NETWORK_BACKENDS:
                return
            self.backend_status.value = (
                f"requested: <code>{html.escape(self.backend.value)}</code>")
            return
        backends = backends_of(in_use)
        if self.architecture != backends.architecture:  # the run's network: offer its own
            self.architecture = backends.architecture
            self._show_techniques()
        line = (f"requested: <code>{html.escape(self.backend.value)}</code> · in use: "
                f"<code>{html.escape(in_use)}</code>")
        changes = [e for e in getattr(snapshot, "events", ()) if e.requested_backend]
        last = changes[-1] if changes else None
        if last is not None and last.backend != last.requested_backend and last.message:
            reason = last.message
        else:  # refused when the run was prepared: its notice says why
            reason = next((n for n in reversed(getattr(snapshot, "notices", ()))
                           if n.startswith(backends.subject)), None)
            reason = reason if last is None and in_use != self.backend.value else None
        if reason:
            line += f"<br><span style='color:#b35c00'>⚠ {html.escape(reason)}</span>"
        self.backend_status.value = line
