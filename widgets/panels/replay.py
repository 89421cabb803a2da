"""Open a recorded run folder and move through its time; the other panels follow."""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path

import ipywidgets as ipw

from widgets.replay import RunReplay
from workbench.run_folder import RunFolderError


class ReplayPanel(ipw.VBox):
    """A run folder's path, Open and Reload, and a time slider with a Play button.

    Opening a folder creates a :class:`~widgets.replay.RunReplay` and hands it to every
    callback registered with :meth:`on_open` (the workbench attaches its panels to it).
    A folder that cannot be read leaves the replay shown before in place and says why.

    Parameters
    ----------
    folder : str
        Initial text of the path field.
    max_frames : int
        Bound on frames held in memory.
    """

    def __init__(self, folder: str = "", max_frames: int = 400):
        super().__init__()
        self.max_frames = int(max_frames)
        self.replay: RunReplay | None = None
        self._callbacks: list[Callable[[RunReplay], None]] = []
        self.path = ipw.Text(
            value=folder,
            placeholder="run folder (written by workbench run)",
            description="run folder",
            layout={"width": "520px"},
        )
        self.open_button = ipw.Button(description="Open", icon="folder-open")
        self.reload_button = ipw.Button(
            description="Reload", icon="refresh", tooltip="read what a running run wrote since"
        )
        self.time = ipw.IntSlider(
            value=0, min=0, max=0, description="time", continuous_update=True,
            layout={"width": "620px"}, disabled=True,
        )
        self.play = ipw.Play(value=0, min=0, max=0, interval=200, disabled=True)
        ipw.jslink((self.play, "value"), (self.time, "value"))
        self.info = ipw.HTML("Open a run folder to replay it in every panel.")
        self.open_button.on_click(lambda _: self.open_folder(self.path.value))
        self.reload_button.on_click(lambda _: self.reload())
        self.time.observe(self._on_time, names="value")
        self.children = (
            ipw.HTML("<b>Replay</b>: a finished or running run folder"),
            ipw.HBox([self.path, self.open_button, self.reload_button]),
            ipw.HBox([self.play, self.time]),
            self.info,
        )

    def on_open(self, callback: Callable[[RunReplay], None]) -> None:
        """Call ``callback(replay)`` whenever a folder is opened."""
        self._callbacks.append(callback)

    def open_folder(self, folder: str | Path) -> RunReplay | None:
        """Open ``folder``; None (and the reason shown) when it is no readable run."""
        folder = Path(str(folder).strip()).expanduser()
        try:
            replay = RunReplay(folder, self.max_frames)
        except (RunFolderError, OSError, ImportError) as exc:
            self.info.value = (
                f"<span style='color:#b00020'>Cannot open {html.escape(str(folder))}: "
                f"{html.escape(str(exc))}</span>"
            )
            return None
        self.replay = replay
        self._fit_slider()
        for callback in self._callbacks:
            callback(replay)
        self._describe()
        return replay

    def reload(self) -> None:
        """Read the open folder again (a run still going wrote more frames)."""
        if self.replay is None:
            return
        try:
            self.replay.reload()
        except (RunFolderError, OSError) as exc:
            self.info.value = f"<span style='color:#b00020'>{html.escape(str(exc))}</span>"
            return
        self._fit_slider()
        self._describe()

    def _fit_slider(self) -> None:
        last = self.replay.frame_count - 1
        for control in (self.time, self.play):
            control.max = last
            control.disabled = last == 0
        self.time.value = self.replay.index

    def _on_time(self, change) -> None:
        if self.replay is not None and change["new"] != self.replay.index:
            self.replay.seek(change["new"])
            self._describe()

    def _describe(self) -> None:
        replay = self.replay
        run = replay.run
        step = int(run.frame_steps[replay.index])
        time_ps = step * float(run.manifest["settings"]["timestep_fs"]) / 1000.0
        state = "finished" if run.finished else "still running (Reload reads more)"
        thinned = f", every {run.frame_stride}th frame held" if run.frame_stride > 1 else ""
        self.info.value = (
            f"{html.escape(run.system.name)}, {run.replicas} replicas, {state}: "
            f"frame {replay.index + 1} of {replay.frame_count}{thinned}, step {step:,} "
            f"({time_ps:,.1f} ps)"
        )
