"""The live-switch demo: one running simulation whose kernels a speaker switches on and off
while the throughput plot runs, with its own Start and Stop and a walk through the
techniques one by one, as in an ablation."""

from __future__ import annotations

import copy
import html
import threading
from dataclasses import replace

import ipywidgets as ipw

from widgets.controller import SimulationController
from widgets.kernel_switches import change_label, walk_note, walkthrough
from widgets.panels.kernels import KernelsPanel
from widgets.panels.live_plots import LivePlots
from workbench.runner import RunSettings


class LiveSwitchPanel(ipw.VBox):
    """Start a run until stopped, switch its kernels live, or let the walk switch them.

    Each Start begins a new run (from the baseline, or from the toggles as set); Stop
    ends it and the walk, if one is going. The walk turns the techniques of
    :func:`~widgets.kernel_switches.walkthrough` on one after another in the ablation's order
    (`workbench.model.ablation`), holding each for ``hold_seconds``; the status line says
    what each stage turns on, and the throughput plot marks each switch with what it
    changed.

    Parameters
    ----------
    settings : RunSettings
        What to simulate (steps are ignored: the run goes until stopped).
    font_size : int
    hold_seconds : float
        Time on each stage of the walk.
    prepare : callable, optional
        ``prepare(settings) -> PreparedRun`` (tests pass a fake engine).
    """

    def __init__(
        self,
        settings: RunSettings,
        font_size: int = 12,
        hold_seconds: float = 15.0,
        prepare=None,
    ):
        self.settings = copy.deepcopy(settings)
        self.hold_seconds = float(hold_seconds)
        self._prepare = prepare
        self.controller: SimulationController | None = None
        self._walk: threading.Thread | None = None
        self._stop_walk = threading.Event()
        self.kernels = KernelsPanel(options=settings.options,
                                    architecture=settings.architecture or "schnet",
                                    backends=vars(settings))
        self.plots = LivePlots(font_size=font_size)
        self.start_button = ipw.Button(description="Start", button_style="success", icon="play")
        self.stop_button = ipw.Button(
            description="Stop", button_style="danger", icon="stop", disabled=True
        )
        self.walk_button = ipw.Button(
            description="Walk through the techniques",
            icon="forward",
            tooltip="switch the techniques on one after another, as in an ablation",
        )
        self.status = ipw.HTML("Press <b>Start</b>, then switch kernels or take the walk.")
        self.start_button.on_click(lambda _: self.start())
        self.stop_button.on_click(lambda _: self.stop())
        self.walk_button.on_click(lambda _: self.walk_through())
        super().__init__(
            [
                ipw.HTML("<b>Live switches</b>: one simulation, kernels switched while it runs"),
                ipw.HBox([self.start_button, self.stop_button, self.walk_button]),
                self.status,
                self.kernels,
                self.plots,
            ]
        )

    @property
    def running(self) -> bool:
        """True while a run of this panel is going."""
        return self.controller is not None and self.controller.state.active

    @property
    def walking(self) -> bool:
        """True while the walk through the techniques goes on."""
        return self._walk is not None and self._walk.is_alive()

    def figures(self) -> dict:
        """The live plots' figures by file name."""
        return self.plots.figures()

    def start(self) -> SimulationController:
        """Start a new run (or return the one going)."""
        if self.running:
            return self.controller
        settings = replace(copy.deepcopy(self.settings), options=self.kernels.options,
                           **self.kernels.backend_settings)
        kwargs = {} if self._prepare is None else {"prepare": self._prepare}
        controller = SimulationController(settings, until_stopped=True, **kwargs)
        self.controller = controller
        for panel in (self.kernels, self.plots):
            panel.attach(controller)
        controller.start()
        self._buttons()
        self.status.value = f"running {html.escape(settings.protein)} until stopped"
        return controller

    def stop(self) -> None:
        """End the walk and the run."""
        self._stop_walk.set()
        if self.controller is not None:
            self.controller.stop()
            self.controller.wait(30)
        if self._walk is not None:
            self._walk.join(30)
        self._buttons()
        self.status.value = "stopped; Start begins a new run"

    def walk_through(self, hold_seconds: float | None = None) -> threading.Thread:
        """Start the walk (and a run, if none is going) on a background thread."""
        if self.walking:
            return self._walk
        hold = self.hold_seconds if hold_seconds is None else float(hold_seconds)
        self.start()
        self._stop_walk.clear()
        self._walk = threading.Thread(
            target=self._walk_stages, args=(hold,), name="workbench-walk", daemon=True
        )
        self._walk.start()
        self._buttons()
        return self._walk

    def wait_walk(self, timeout: float | None = None) -> None:
        """Block until the walk has ended."""
        if self._walk is not None:
            self._walk.join(timeout)

    def _walk_stages(self, hold: float) -> None:
        stages = walkthrough()
        previous = None
        for index, options in enumerate(stages):
            if self._stop_walk.is_set() or not self.running:
                break
            self.kernels.set_options(options)
            note = walk_note(index)
            self.status.value = (
                f"walk {index + 1}/{len(stages)}: <b>{html.escape(change_label(previous, options))}"
                f"</b>" + (f": {html.escape(note)}" if note else "")
            )
            previous = options
            if self._stop_walk.wait(hold):
                break
        else:
            self.status.value += " · walk done: every technique is on"
        self._buttons(walking=False)

    def _buttons(self, walking: bool | None = None) -> None:
        running = self.running
        walking = self.walking if walking is None else walking
        self.start_button.disabled = running
        self.stop_button.disabled = not running
        self.walk_button.disabled = walking
