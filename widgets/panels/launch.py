"""Launch panel: what to simulate with which network, on how many GPUs, and the Start /
Pause / Resume / Stop buttons."""

from __future__ import annotations

import copy
import html
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import ipywidgets as ipw

from widgets.background import BackgroundWork
from widgets.controller import SimulationController
from widgets.modes import default_settings
from widgets.panels.base import LivePanel
from widgets.sharded import ShardedController
from widgets.snapshot import RunState, Snapshot
from workbench.distributed import ShardedResult, ShardedSettings, launch_sharded
from workbench.model.architectures import ARCHITECTURES
from workbench.model.options import KernelOptions
from workbench.runner import NETWORK_BACKENDS, PreparedRun, RunSettings, prepare_run
from workbench.settings_error import SettingsError
from workbench.system import available_proteins, build_system

DEVICES = ("auto", "cpu", "cuda")
STATE_COLORS = {
    RunState.IDLE: "#555555",
    RunState.RUNNING: "#2ca02c",
    RunState.PAUSED: "#b35c00",
    RunState.STOPPED: "#1f77b4",
    RunState.ERROR: "#b00020",
}


#: `RunSettings` fields whose field of the panel has another name.
_FIELD_WIDGETS = {"timestep_fs": "timestep", "denatured_fraction": "denatured"}


def _red(text: str) -> str:
    return f"<span style='color:#b00020'>{html.escape(text)}</span>"


class LaunchPanel(LivePanel):
    """Settings of a run and the buttons that drive it.

    Start builds a new run from the fields (any earlier run must have ended) and tells
    every callback registered with :meth:`on_new_run`, so other panels can follow it: a
    :class:`~widgets.controller.SimulationController` in this process for one GPU, a
    :class:`~widgets.sharded.ShardedController` (one process per GPU, or CPU processes
    with device ``cpu``) for more.

    Parameters
    ----------
    settings : RunSettings, optional
        Initial field values (:func:`widgets.modes.default_settings` by default).
    until_stopped : bool
        Initial state of the "run until stopped" box.
    options_source : callable, optional
        Returns the kernel switches a new run starts with (all off by default).
    backend_source : callable, optional
        Returns the backends a new run's network starts with, by `RunSettings` field
        (`workbench.runner.NETWORK_BACKENDS`: ``{"tp_backend": …, "dp_backend": …}``;
        the settings' by default).
    prepare : callable, optional
        ``prepare(settings) -> PreparedRun`` for new runs (tests pass a fake engine).
    launch : callable, optional
        Starts runs over several processes (:func:`workbench.distributed.launch_sharded`
        by default; tests pass a fake).
    """

    def __init__(
        self,
        settings: RunSettings | None = None,
        until_stopped: bool = False,
        options_source: Callable[[], KernelOptions] | None = None,
        prepare: Callable[[RunSettings], PreparedRun] = prepare_run,
        launch: Callable[..., ShardedResult] = launch_sharded,
        backend_source: Callable[[], dict[str, str]] | None = None,
    ):
        super().__init__(refresh_interval=0.3)
        self.prepare = prepare
        self.launch = launch
        self.initial = copy.deepcopy(settings or default_settings())
        self.options_source = options_source or KernelOptions
        self.backend_source = backend_source or (lambda: {
            b.setting: getattr(self.initial, b.setting) for b in NETWORK_BACKENDS.values()})
        self._callbacks: list[Callable[[BackgroundWork], None]] = []
        self._upload_dir = Path(tempfile.mkdtemp(prefix="workbench-upload-"))
        self.upload_message = ""
        s = self.initial
        proteins = [(name, name) for name in available_proteins()]
        if s.protein not in available_proteins():
            proteins.append((Path(s.protein).stem, s.protein))
        narrow = {"width": "210px"}
        style = {"description_width": "110px"}
        self.protein = ipw.Dropdown(
            options=proteins, value=s.protein, description="protein", layout=narrow, style=style
        )
        self.upload = ipw.FileUpload(accept=".pdb", multiple=False, description="upload PDB")
        self.replicas = ipw.BoundedIntText(
            value=s.replicas, min=1, max=100000, description="replicas", layout=narrow, style=style
        )
        self.temperature = ipw.BoundedFloatText(
            value=s.temperature,
            min=1.0,
            max=5000.0,
            description="temperature (K)",
            layout=narrow,
            style=style,
        )
        # off by default; when ticked: 1–1.5 × the temperature in 4 levels (2 if 4 do not fit)
        ladder = s.ladder or (s.temperature, 1.5 * s.temperature, 4 if s.replicas % 4 == 0 else 2)
        self.ladder = ipw.Checkbox(
            value=s.ladder is not None, description="temperature ladder", indent=False
        )
        self.t_min = ipw.BoundedFloatText(
            value=ladder[0],
            min=1.0,
            max=5000.0,
            description="T min (K)",
            layout=narrow,
            style=style,
        )
        self.t_max = ipw.BoundedFloatText(
            value=ladder[1],
            min=1.0,
            max=5000.0,
            description="T max (K)",
            layout=narrow,
            style=style,
        )
        self.levels = ipw.BoundedIntText(
            value=ladder[2], min=2, max=1000, description="levels", layout=narrow, style=style
        )
        self.exchange_every = ipw.BoundedIntText(
            value=s.exchange_every,
            min=1,
            max=10**7,
            description="exchange every",
            layout=narrow,
            style=style,
        )
        self.steps = ipw.BoundedIntText(
            value=s.steps, min=1, max=10**9, description="steps", layout=narrow, style=style
        )
        self.until_stopped = ipw.Checkbox(
            value=until_stopped, description="run until stopped", indent=False
        )
        self.timestep = ipw.BoundedFloatText(
            value=s.timestep_fs,
            min=0.01,
            max=20.0,
            description="time step (fs)",
            layout=narrow,
            style=style,
        )
        self.save_interval = ipw.BoundedIntText(
            value=s.save_interval,
            min=1,
            max=10**7,
            description="save interval",
            layout=narrow,
            style=style,
        )
        self.seed = ipw.IntText(value=s.seed, description="seed", layout=narrow, style=style)
        self.denatured = ipw.FloatSlider(
            value=s.denatured_fraction,
            min=0.0,
            max=1.0,
            step=0.05,
            readout_format=".0%",
            description="start unfolded",
            tooltip="share of the replicas that start from denatured chains (the rest native)",
            layout={"width": "330px"},
            style=style,
        )
        self.device = ipw.Dropdown(
            options=DEVICES,
            value=s.device if s.device in DEVICES else "auto",
            description="device",
            layout=narrow,
            style=style,
        )
        self.gpus = ipw.BoundedIntText(
            value=1,
            min=1,
            max=256,
            description="GPUs",
            tooltip="processes, one per GPU (CPU processes with device cpu)",
            layout=narrow,
            style=style,
        )
        self.architecture = ipw.Dropdown(
            options=list(ARCHITECTURES),
            value=s.architecture,
            description="architecture",
            tooltip="network of the untrained demo model; a model file must hold one of it",
            layout=narrow,
            style=style,
        )
        self.model = ipw.Text(
            value=s.model or "",
            placeholder="trained model path (optional)",
            description="model",
            layout={"width": "430px"},
            style=style,
        )
        self.start_button = ipw.Button(description="Start", button_style="success", icon="play")
        self.pause_button = ipw.Button(description="Pause", icon="pause")
        self.resume_button = ipw.Button(description="Resume", icon="play")
        self.stop_button = ipw.Button(description="Stop", button_style="danger", icon="stop")
        self.status = ipw.HTML()
        self.start_button.on_click(lambda _: self.start())
        self.pause_button.on_click(lambda _: self._act("pause"))
        self.resume_button.on_click(lambda _: self._act("resume"))
        self.stop_button.on_click(lambda _: self._act("stop"))
        self.upload.observe(self._on_upload, names="value")
        self.until_stopped.observe(self._sync_steps_field, names="value")
        self._sync_steps_field()
        self.ladder.observe(self._sync_ladder_fields, names="value")
        self._sync_ladder_fields()
        self.set_body(
            ipw.HTML("<b>Launch</b>"),
            ipw.HBox([self.protein, self.upload]),
            ipw.HBox([self.replicas, self.temperature]),
            self.denatured,
            ipw.HBox([self.ladder, self.levels]),
            ipw.HBox([self.t_min, self.t_max]),
            self.exchange_every,
            ipw.HBox([self.steps, self.until_stopped]),
            ipw.HBox([self.timestep, self.save_interval]),
            ipw.HBox([self.seed, self.device]),
            ipw.HBox([self.gpus, self.architecture]),
            self.model,
            ipw.HBox([self.start_button, self.pause_button, self.resume_button, self.stop_button]),
            self.status,
        )
        self._draw_buttons(None)
        self.status.value = "Choose settings and press <b>Start</b>."

    @property
    def controller(self) -> SimulationController | ShardedController | None:
        """The run started last (None before the first Start)."""
        return self.source

    def on_new_run(self, callback: Callable[[BackgroundWork], None]) -> None:
        """Call ``callback(controller)`` whenever Start creates a run."""
        self._callbacks.append(callback)

    def settings(self) -> RunSettings:
        """Run settings from the fields."""
        return replace(
            copy.deepcopy(self.initial),
            protein=self.protein.value,
            replicas=self.replicas.value,
            steps=self.steps.value,
            temperature=self.temperature.value,
            ladder=(self.t_min.value, self.t_max.value, self.levels.value)
            if self.ladder.value
            else None,
            exchange_every=self.exchange_every.value,
            timestep_fs=self.timestep.value,
            save_interval=self.save_interval.value,
            seed=self.seed.value,
            denatured_fraction=self.denatured.value,
            device=self.device.value,
            model=self.model.value.strip() or None,
            architecture=self.architecture.value,
            options=self.options_source(),
            **self.backend_source(),
        )

    def label(self, field: str) -> str:
        """How the panel names a `RunSettings` field: its field's label, else the name."""
        widget = getattr(self, _FIELD_WIDGETS.get(field, field), None)
        description = getattr(widget, "description", "") if isinstance(widget, ipw.Widget) else ""
        return description or field

    def start(self) -> SimulationController | ShardedController | None:
        """Start a new run from the fields; returns it (None when the settings are invalid)."""
        if self.source is not None and self.source.state.active:
            return self.source
        ranks = self.gpus.value
        try:
            settings = self.settings()  # settings check themselves when made
            if ranks > 1:  # GPUs visible, replicas enough for every process, ladder fits
                ShardedSettings(settings, ranks=ranks).resolve()
        except ValueError as exc:
            message = exc.describe(self.label) if isinstance(exc, SettingsError) else str(exc)
            self.status.value = _red(message)
            return None
        if ranks > 1:
            controller = ShardedController(
                settings, ranks, until_stopped=self.until_stopped.value, launch=self.launch
            )
        else:
            controller = SimulationController(
                settings, until_stopped=self.until_stopped.value, prepare=self.prepare
            )
        self.attach(controller)
        for callback in self._callbacks:
            callback(controller)
        controller.start()
        return controller

    def _act(self, action: str) -> None:
        if self.source is None:
            return
        try:
            getattr(self.source, action)()
        except RuntimeError as exc:
            self.status.value = _red(str(exc))

    def _sync_steps_field(self, _change=None) -> None:
        self.steps.disabled = self.until_stopped.value

    def _sync_ladder_fields(self, _change=None) -> None:
        on = self.ladder.value
        for control in (self.t_min, self.t_max, self.levels, self.exchange_every):
            control.disabled = not on
        self.temperature.disabled = on

    def _on_upload(self, change) -> None:
        files = change["new"]
        if not files:
            return
        item = files[0]
        name = Path(item["name"]).name or "uploaded.pdb"
        path = self._upload_dir / name
        path.write_bytes(bytes(item["content"]))
        try:
            system = build_system(path)
        except Exception as exc:  # noqa: BLE001 - any parse failure is the user's to see
            self.upload_message = _red(f"{name}: {type(exc).__name__}: {exc}")
        else:
            label = f"{system.name} (uploaded)"
            options = [o for o in self.protein.options if o[1] != str(path)]
            self.protein.options = [*options, (label, str(path))]
            self.protein.value = str(path)
            self.upload_message = (
                f"Loaded {html.escape(name)}: {system.n_residues} residues, {system.n_beads} beads."
            )
        self.status.value = self.upload_message

    def _draw_buttons(self, state: RunState | None) -> None:
        active = state is not None and state.active
        self.start_button.disabled = active
        self.start_button.description = {
            RunState.RUNNING: "Running…",
            RunState.PAUSED: "Paused",
        }.get(state, "Start" if state in (None, RunState.IDLE) else "Start new run")
        pausable = self.source is None or self.source.pausable
        self.pause_button.disabled = state is not RunState.RUNNING or not pausable
        self.resume_button.disabled = state is not RunState.PAUSED or not pausable
        self.stop_button.disabled = not active

    def update(self, snapshot: Snapshot) -> None:
        """Buttons follow the run's state; the status line shows progress and problems."""
        self._draw_buttons(snapshot.state)
        color = STATE_COLORS[snapshot.state]
        target = "∞" if snapshot.target_steps is None else f"{snapshot.target_steps:,}"
        lines = [
            f"<b style='color:{color}'>{snapshot.state.value}</b> · "
            f"{html.escape(snapshot.message)} · step {snapshot.step:,} / {target} · "
            f"{snapshot.mean_timestep_mol_per_s:,.1f} timestep·mol/s "
            f"({snapshot.mean_ns_per_day:.3g} ns/day) · {html.escape(snapshot.device)}"
        ]
        if snapshot.error:
            lines.append(_red(f"Error: {snapshot.error}"))
            lines.append(
                "<details><summary>traceback</summary><pre style='font-size:11px'>"
                f"{html.escape(snapshot.traceback or '')}</pre></details>"
            )
        if snapshot.frozen:
            frozen = ", ".join(f"replica {r} at step {s}" for r, s in snapshot.frozen)
            lines.append(f"<span style='color:#b35c00'>frozen (blew up): {frozen}</span>")
        lines += [f"<span style='color:#666'>ℹ {html.escape(n)}</span>" for n in snapshot.notices]
        lines += [_red(f"display: {e}") for e in snapshot.display_errors]
        if self.upload_message:
            lines.append(self.upload_message)
        self.status.value = "<br>".join(lines)
