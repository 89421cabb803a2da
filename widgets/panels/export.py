"""Export panel: trajectory (DCD/XTC + topology PDB), metrics CSV and figures."""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path

import ipywidgets as ipw

from widgets.export_files import (
    TRAJECTORY_FORMATS,
    kaleido_available,
    write_figures,
    write_metrics_csv,
    write_throughput_csv,
    write_trajectory,
)
from widgets.panels.base import LivePanel
from widgets.snapshot import Snapshot

#: Where exports go unless the user picks another folder: outside any checkout.
DEFAULT_FOLDER = Path.home() / "cg-workbench-exports"


class ExportPanel(LivePanel):
    """Write what the attached run recorded into a folder.

    Parameters
    ----------
    controller : SimulationController, optional
    figures_source : callable, optional
        Returns ``{file name: plotly figure}`` to save.
    folder : str, optional
        Output folder; :data:`DEFAULT_FOLDER` (in the home folder, outside any checkout)
        by default. Files already there are never replaced unless "replace existing
        files" is ticked.
    """

    def __init__(
        self,
        controller=None,
        figures_source: Callable[[], dict] | None = None,
        folder: str | None = None,
    ):
        super().__init__(refresh_interval=1.0)
        self.figures_source = figures_source or dict
        self.folder = ipw.Text(
            value=str(folder or DEFAULT_FOLDER), description="folder", layout={"width": "480px"}
        )
        self.overwrite = ipw.Checkbox(value=False, description="replace existing files",
                                      indent=False)
        self.format = ipw.Dropdown(
            options=TRAJECTORY_FORMATS, value="dcd", description="format", layout={"width": "180px"}
        )
        self.trajectory_button = ipw.Button(description="Trajectory", icon="film")
        self.metrics_button = ipw.Button(description="Metrics CSV", icon="table")
        self.figures_button = ipw.Button(description="Figures", icon="image")
        self.result = ipw.HTML()
        self.trajectory_button.on_click(lambda _: self._guarded(self.export_trajectory))
        self.metrics_button.on_click(lambda _: self._guarded(self.export_metrics))
        self.figures_button.on_click(lambda _: self._guarded(self.export_figures))
        png = "HTML and PNG" if kaleido_available() else "HTML (PNG needs kaleido and Chrome)"
        self.set_body(
            ipw.HTML(f"<b>Export</b>: recorded frames are thinned on long runs; figures as {png}"),
            ipw.HBox([self.folder, self.format, self.overwrite]),
            ipw.HBox([self.trajectory_button, self.metrics_button, self.figures_button]),
            self.result,
        )
        if controller is not None:
            self.attach(controller)

    def update(self, snapshot: Snapshot) -> None:
        """Enable the run-dependent buttons once there is something to write."""
        has_data = snapshot.points > 0
        self.trajectory_button.disabled = not has_data
        self.metrics_button.disabled = not has_data

    def _run_data(self):
        if self.source is None:
            raise RuntimeError("no run yet: start a simulation first")
        return self.source.snapshot()

    def export_trajectory(self) -> list[Path]:
        """Write one trajectory per replica plus ``topology.pdb``; returns the files."""
        snapshot = self._run_data()
        folder = self._free(Path(self.folder.value).expanduser() / "trajectory")
        paths = write_trajectory(
            self.source.frames(), snapshot.system, folder, snapshot.timestep_fs, self.format.value
        )
        self._report(paths)
        return paths

    def export_metrics(self) -> list[Path]:
        """Write ``metrics.csv`` (per replica) and ``throughput.csv`` (per chunk)."""
        snapshot = self._run_data()
        folder = Path(self.folder.value).expanduser()
        metrics, throughput = (self._free(folder / n) for n in ("metrics.csv", "throughput.csv"))
        paths = [
            write_metrics_csv(snapshot, metrics),
            write_throughput_csv(snapshot, throughput),
        ]
        self._report(paths)
        return paths

    def export_figures(self) -> list[Path]:
        """Write every figure as HTML (and PNG when kaleido is available)."""
        folder = self._free(Path(self.folder.value).expanduser() / "figures")
        paths, note = write_figures(self.figures_source(), folder)
        self._report(paths, note)
        return paths

    def _free(self, path: Path) -> Path:
        """``path``, unless it exists (a file, or a folder with files) and replacing was not
        asked for: then FileExistsError naming it."""
        taken = path.is_file() or (path.is_dir() and any(path.iterdir()))
        if taken and not self.overwrite.value:
            raise FileExistsError(
                f"{path} exists; pick another folder or tick 'replace existing files'"
            )
        return path

    def _guarded(self, action: Callable[[], list[Path]]) -> None:
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - shown to the user
            self.result.value = (
                f"<span style='color:#b00020'>{html.escape(type(exc).__name__)}: "
                f"{html.escape(str(exc))}</span>"
            )

    def _report(self, paths: list[Path], note: str = "") -> None:
        files = "".join(f"<li><code>{html.escape(str(p))}</code></li>" for p in paths)
        self.result.value = f"Wrote:<ul>{files}</ul>{html.escape(note)}"
