"""Write what a run recorded: trajectories, metrics tables and figures."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from widgets.snapshot import Snapshot
from workbench.md.reporters import TrajectoryReporter, ensure_writable_folder
from workbench.system.cg_system import CGSystem

TRAJECTORY_FORMATS = ("dcd", "xtc")
PER_REPLICA = ("rmsd", "q", "potential_energy", "temperature")


def write_trajectory(
    frames: list[tuple[int, np.ndarray]],
    system: CGSystem,
    folder: str | Path,
    timestep_fs: float,
    fmt: str = "dcd",
) -> list[Path]:
    """One trajectory file per replica plus ``topology.pdb``, through the engine's reporter.

    Parameters
    ----------
    frames : list of (int, numpy.ndarray)
        ``(step, positions [R, n, 3])`` as the controller recorded them.
    system : CGSystem
    folder : str or Path
    timestep_fs : float
    fmt : {"dcd", "xtc"}

    Returns
    -------
    list of Path
        The topology first, then the replica trajectories.
    """
    if not frames:
        raise ValueError("no frames recorded yet: start a run first")
    replicas = frames[0][1].shape[0]
    reporter = TrajectoryReporter(folder, system, replicas, interval=1, fmt=fmt)
    try:
        for step, positions in frames:
            state = SimpleNamespace(
                positions=torch.from_numpy(positions), time_ps=step * timestep_fs / 1000.0
            )
            reporter.report(state)
    finally:
        reporter.close()
    return [reporter.topology_path, *reporter.paths]


def write_metrics_csv(snapshot: Snapshot, path: str | Path) -> Path:
    """Recorded metrics, one row per point and replica."""
    path = Path(path)
    ensure_writable_folder(path.parent)
    metrics = snapshot.metrics
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "time_ps", "wall_s", "replica", *PER_REPLICA])
        for i in range(snapshot.points):
            for replica in range(metrics["rmsd"].shape[1]):
                values = [f"{metrics[key][i, replica]:.6g}" for key in PER_REPLICA]
                writer.writerow(
                    [
                        int(metrics["step"][i]),
                        f"{metrics['time_ps'][i]:.4f}",
                        f"{metrics['wall_s'][i]:.3f}",
                        replica,
                        *values,
                    ]
                )
    return path


def write_throughput_csv(snapshot: Snapshot, path: str | Path) -> Path:
    """Per-chunk throughput and memory, one row per chunk."""
    path = Path(path)
    ensure_writable_folder(path.parent)
    columns = snapshot.throughput
    keys = list(columns)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(keys)
        rows = len(columns[keys[0]]) if keys else 0
        for i in range(rows):
            writer.writerow([f"{columns[key][i]:.6g}" for key in keys])
    return path


def kaleido_available() -> bool:
    """True when plotly can write PNG files (the kaleido package is installed)."""
    return importlib.util.find_spec("kaleido") is not None


def write_figures(figures: dict, folder: str | Path, png: bool = True) -> tuple[list[Path], str]:
    """Save plotly figures as HTML, and as PNG when kaleido can.

    Parameters
    ----------
    figures : dict of str to plotly figure
    folder : str or Path
    png : bool
        Also try PNG.

    Returns
    -------
    (list of Path, str)
        Files written, and a sentence about PNG export.
    """
    folder = ensure_writable_folder(folder)
    written = []
    for name, figure in figures.items():
        path = folder / f"{name}.html"
        figure.write_html(str(path), include_plotlyjs="directory")
        written.append(path)
    if not png:
        return written, "PNG not requested."
    if not kaleido_available():
        return written, "PNG export needs kaleido (pip install kaleido); wrote HTML only."
    try:
        for name, figure in figures.items():
            path = folder / f"{name}.png"
            figure.write_image(str(path))
            written.append(path)
    except Exception as exc:  # noqa: BLE001 - kaleido needs a browser it may not find
        return written, f"PNG export failed ({type(exc).__name__}: {exc}); wrote HTML only."
    return written, "Wrote HTML and PNG."
