"""A recorded run as a source for the panels: the run seen at a chosen moment.

:class:`RunReplay` reads a run folder (:func:`workbench.run_folder.read_run`), written by
``workbench run`` on any machine, finished or still going, and offers the panels the same
interface as a live run (``add_listener``, ``snapshot``, ``frames``): what the run had
recorded up to the frame chosen with :meth:`RunReplay.seek`. Moving through time redraws
every attached panel; :meth:`RunReplay.reload` reads what a running run wrote since.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import numpy as np

from widgets.background import Listened
from widgets.snapshot import (
    METRIC_KEYS,
    THROUGHPUT_KEYS,
    RunState,
    Snapshot,
    TemperingSnapshot,
)
from workbench.md.tempering import geometric_ladder
from workbench.model.options import KernelOptions
from workbench.run_folder import RecordedRun, read_run
from workbench.units import ns_per_day


def _options(recorded: dict) -> KernelOptions:
    """The kernel switches a run recorded (switches this version lacks are left out)."""
    names = {f.name for f in fields(KernelOptions)}
    return KernelOptions(**{k: v for k, v in recorded.items() if k in names})


class RunReplay(Listened):
    """A run folder, seen at one of its frames.

    Parameters
    ----------
    folder : str or Path
    max_frames : int
        Bound on frames held in memory (every k-th frame of long runs).

    Raises
    ------
    workbench.run_folder.RunFolderError
        The folder is no readable run (the message says what is missing).
    """

    #: A replay has no pause; the Launch panel's buttons do not apply to it.
    pausable = False

    def __init__(self, folder: str | Path, max_frames: int = 400):
        super().__init__()
        self.folder = Path(folder)
        self.max_frames = int(max_frames)
        self.run: RecordedRun = read_run(self.folder, self.max_frames)
        self.index = len(self.run.frame_steps) - 1

    # -- the source interface of the panels ---------------------------------------------
    @property
    def state(self) -> RunState:
        """STOPPED for a finished run, RUNNING while its folder has no summary yet."""
        return RunState.STOPPED if self.run.finished else RunState.RUNNING

    @property
    def frame_count(self) -> int:
        """Frames held (the time slider's positions)."""
        return len(self.run.frame_steps)

    def seek(self, index: int) -> None:
        """Show the run as it was at held frame ``index`` (clipped to the held frames)."""
        with self._lock:
            self.index = int(np.clip(index, 0, self.frame_count - 1))
        self._notify()

    def reload(self) -> None:
        """Read the folder again (a running run wrote more); a replay at its last frame
        stays at the last frame."""
        run = read_run(self.folder, self.max_frames)
        with self._lock:
            at_end = self.index == self.frame_count - 1
            self.run = run
            self.index = self.frame_count - 1 if at_end else min(self.index, self.frame_count - 1)
        self._notify()

    def frames(self) -> list[tuple[int, np.ndarray]]:
        """Held frames ``(step, positions [R, n, 3] float32)`` up to the shown one."""
        with self._lock:
            run, index = self.run, self.index
        return [(int(run.frame_steps[k]), run.frames[k]) for k in range(index + 1)]

    def with_simulation(self, fn: Callable):
        """A recorded run has no live simulation: RuntimeError, as before a run is built."""
        raise RuntimeError(
            "a recorded run keeps coordinates, not its neighbour graph; "
            "choose 'coordinates + cutoff'"
        )

    def snapshot(self) -> Snapshot:
        """What the run had recorded up to the shown frame."""
        with self._lock:
            run, index = self.run, self.index
        step = int(run.frame_steps[index])
        settings = run.manifest["settings"]
        summary = run.summary or {}
        rate = float(summary.get("timestep_mol_per_s") or 0.0)
        timestep_fs = float(settings["timestep_fs"])
        shown = run.metrics["step"] <= step
        return Snapshot(
            state=self.state,
            message=f"replay of {self.folder.name} at step {step:,}",
            notices=(f"recorded run {self.folder}",),
            step=step,
            target_steps=int(settings["steps"]),
            replicas=run.replicas,
            timestep_fs=timestep_fs,
            device=str(summary.get("gpu") or summary.get("device") or "recorded"),
            system=run.system,
            cutoff=run.cutoff,
            options=_options(settings["options"]),
            metrics=self._metrics(run, shown),
            throughput={key: np.empty(0) for key in THROUGHPUT_KEYS},
            frame_steps=run.frame_steps[: index + 1].copy(),
            latest_positions=run.frames[index],
            mean_timestep_mol_per_s=rate,
            mean_ns_per_day=ns_per_day(rate, timestep_fs),
            tempering=self._tempering(run, shown, step),
        )

    # -- helpers --------------------------------------------------------------------------
    def _notify(self) -> None:
        for listener in self._current_listeners():
            listener(self, True)

    @staticmethod
    def _metrics(run: RecordedRun, shown: np.ndarray) -> dict[str, np.ndarray]:
        table = run.metrics
        points = int(shown.sum())
        per_replica = {
            key: table[key][shown]
            for key in ("rmsd", "q", "potential_energy", "temperature")
            if key in table
        }
        columns = {
            "step": table["step"][shown],
            "time_ps": table["time_ps"][shown, 0],
            "wall_s": np.full(points, np.nan),
            **per_replica,
        }
        return {key: columns.get(key, np.full((points, run.replicas), np.nan))
                for key in METRIC_KEYS}

    @staticmethod
    def _tempering(run: RecordedRun, shown: np.ndarray, step: int) -> TemperingSnapshot | None:
        settings = run.manifest["settings"]
        if settings.get("ladder") is None or run.exchanges is None:
            return None
        low, high, levels = settings["ladder"]
        temperatures = geometric_ladder(float(low), float(high), int(levels)).numpy()
        exchanges = {k: v[run.exchanges["step"] <= step] for k, v in run.exchanges.items()}
        pairs = [f"{k}_{k + 1}" for k in range(int(levels) - 1)]
        attempted = np.array([exchanges[f"attempted_{p}"].sum() for p in pairs], dtype=float)
        accepted = np.array([exchanges[f"accepted_{p}"].sum() for p in pairs], dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            acceptance = np.where(attempted > 0, accepted / attempted, np.nan)
        history = {
            "step": run.metrics["step"][shown],
            "time_ps": run.metrics["time_ps"][shown, 0],
            "temperature": run.metrics["temperature_set"][shown],
        }
        return TemperingSnapshot(
            temperatures=temperatures,
            groups=np.arange(run.replicas).reshape(-1, int(levels)),
            exchange_every=int(settings["exchange_every"]),
            rounds=len(exchanges["step"]),
            acceptance=acceptance,
            history=history,
        )
