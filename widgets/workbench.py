"""The workbench: every panel in one view, all following the run started last."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import ipywidgets as ipw

from widgets.controller import SimulationController
from widgets.modes import default_settings, run_mode
from widgets.panels.adjacency import AdjacencyPanel
from widgets.panels.compare import ComparePanel
from widgets.panels.export import ExportPanel
from widgets.panels.kernels import KernelsPanel
from widgets.panels.launch import LaunchPanel
from widgets.panels.live_plots import LivePlots
from widgets.panels.replay import ReplayPanel
from widgets.panels.structure3d import Structure3D
from widgets.panels.tempering import TemperingPanel
from widgets.projector import ProjectorSwitch
from widgets.replay import RunReplay
from workbench.runner import PreparedRun, RunSettings, prepare_run
from workbench.system import build_system


class Workbench(ipw.VBox):
    """Launch, watch and compare simulations.

    Layout: Launch and Kernels on top; the live plots (and, for a run with a
    temperature ladder, the parallel-tempering panel) beside the 3-D structure;
    Adjacency, Replay, Compare and Export in tabs below. The panels follow the run
    started last or the run folder opened last in Replay. The Kernels panel offers the
    techniques of the network architecture chosen in Launch.

    Parameters
    ----------
    settings : RunSettings, optional
        Initial launch settings; :func:`widgets.modes.default_settings` by default
        (the mode's run: demo, laptop or full length).
    until_stopped : bool
        Start with "run until stopped" ticked.
    font_size : int
        Figure font size at a desk.
    projector : bool
        Start in projector mode (the switch at the top scales every text, control and
        plot for a talk).
    prepare : callable, optional
        ``prepare(settings) -> PreparedRun`` for new runs (tests pass a fake engine).
    replay : str or Path, optional
        A run folder to open in the Replay tab at once.
    """

    def __init__(
        self,
        settings: RunSettings | None = None,
        until_stopped: bool = False,
        font_size: int = 12,
        projector: bool = False,
        prepare: Callable[[RunSettings], PreparedRun] = prepare_run,
        replay: str | Path | None = None,
    ):
        settings = settings or default_settings()
        self.kernels = KernelsPanel(options=settings.options,
                                    architecture=settings.architecture or "schnet",
                                    backends=vars(settings))
        self.launch = LaunchPanel(
            settings,
            until_stopped=until_stopped,
            options_source=lambda: self.kernels.options,
            backend_source=lambda: self.kernels.backend_settings,
            prepare=prepare,
        )
        self.plots = LivePlots(font_size=font_size)
        self.tempering = TemperingPanel(font_size=font_size)
        self.structure = Structure3D(system=build_system(settings.protein, settings.mapping))
        self.adjacency = AdjacencyPanel(font_size=font_size)
        self.compare = ComparePanel(settings_source=self.launch.settings, font_size=font_size)
        self.export = ExportPanel(figures_source=self.figures)
        self.replay = ReplayPanel()
        self.launch.on_new_run(self._follow)
        self.replay.on_open(self._follow_replay)
        self.launch.protein.observe(self._preview_protein, names="value")
        self.launch.architecture.observe(
            lambda change: self.kernels.set_architecture(change["new"]), names="value")
        tabs = ipw.Tab(children=[self.adjacency, self.replay, self.compare, self.export])
        for index, title in enumerate(("Adjacency", "Replay", "Compare", "Export")):
            tabs.set_title(index, title)
        mode = f"{run_mode().name} mode (WORKBENCH_MODE=demo|laptop|full)"
        self.projector = ProjectorSwitch([self], figures=self.figures)
        super().__init__(
            children=[
                ipw.HBox(
                    [
                        ipw.HTML(f"<h3 style='margin:4px 0'>CG workbench</h3><i>{mode}</i>"),
                        self.projector,
                    ],
                    layout={"justify_content": "space-between"},
                ),
                ipw.HBox([self.launch, self.kernels]),
                ipw.HBox(
                    [
                        ipw.VBox([self.plots, self.tempering]),
                        ipw.Box([self.structure], layout={"flex": "1 1 320px"}),
                    ]
                ),
                tabs,
            ]
        )
        self.projector.set(projector)
        if replay is not None:
            self.open_run(replay)

    @property
    def controller(self) -> SimulationController | None:
        """The run started last (None before the first Start)."""
        return self.launch.controller

    def start(self) -> SimulationController | None:
        """Press Start: a new run from the Launch fields (see :meth:`LaunchPanel.start`)."""
        return self.launch.start()

    def figures(self) -> dict:
        """Every figure by file name (live plots, tempering, adjacency and race)."""
        return {
            **self.plots.figures(),
            **self.tempering.figures(),
            "adjacency": self.adjacency.heatmap,
            "edge_counts": self.adjacency.counts,
            **self.compare.figures(),
        }

    def _follow(self, controller: SimulationController) -> None:
        panels = (self.kernels, self.plots, self.tempering, self.structure, self.adjacency)
        for panel in (*panels, self.export):
            panel.attach(controller)

    def open_run(self, folder: str | Path) -> RunReplay | None:
        """Open a run folder in the Replay tab (see :meth:`ReplayPanel.open_folder`)."""
        self.replay.path.value = str(folder)
        return self.replay.open_folder(folder)

    def _follow_replay(self, replay: RunReplay) -> None:
        for panel in (self.plots, self.tempering, self.structure, self.adjacency, self.export):
            panel.attach(replay)

    def _preview_protein(self, change) -> None:
        if self.controller is not None and self.controller.state.active:
            return
        try:
            system = build_system(change["new"], self.launch.initial.mapping)
        except Exception:  # noqa: BLE001 - the upload handler already reported it
            return
        self.structure.show_system(system)
