"""Reporters write a simulation's progress at a fixed step interval.

* :class:`MetricsReporter`: a CSV row per replica (RMSD, Q, energies,
  temperature, frozen flag) at every interval.
* :class:`TrajectoryReporter`: one trajectory file per replica (DCD, XTC or HDF5)
  plus a coarse-grained topology PDB.

mdtraj is imported only when a trajectory is written, so the engine runs
where mdtraj is not installed.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import torch

from workbench.md.trajectory_files import CUTTABLE, AppendedTrajectory, TrajectoryFileError
from workbench.system.cg_system import CGSystem

METRIC_COLUMNS = (
    "step",
    "time_ps",
    "replica",
    "temperature_set",
    "temperature",
    "potential_energy",
    "kinetic_energy",
    "rmsd",
    "q",
    "frozen",
)

BEAD_ELEMENTS = {"N": "N", "CA": "C", "CB": "C", "C": "C", "O": "O"}


def ensure_writable_folder(folder: str | Path) -> Path:
    """Create ``folder`` if needed and check that files can be written in it.

    Raises
    ------
    PermissionError
        The folder cannot be created or written to.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise PermissionError(f"output folder {folder} is not writable: {exc}") from exc
    return folder


def _mdtraj():
    try:
        import mdtraj
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "writing trajectories needs mdtraj: pip install 'cg-workbench[traj]'"
        ) from exc
    return mdtraj


def cg_topology(system: CGSystem):
    """mdtraj Topology of the beads: one atom per bead, residues and chains as in the PDB."""
    md = _mdtraj()
    top = md.Topology()
    chains = [top.add_chain() for _ in range(int(system.chain_index.max()) + 1)]
    residues = []
    for res_idx, name in enumerate(system.residue_names):
        chain = chains[int(system.chain_index[res_idx])]
        number = int("".join(c for c in system.residue_ids[res_idx] if c.isdigit() or c == "-"))
        residues.append(top.add_residue(name, chain, resSeq=number))
    for bead, name in enumerate(system.bead_names):
        element = md.element.get_by_symbol(BEAD_ELEMENTS.get(name, "C"))
        top.add_atom(name, element, residues[int(system.bead_residue[bead])])
    atoms = list(top.atoms)
    for i, j in system.bonds.tolist():
        top.add_bond(atoms[i], atoms[j])
    return top


def write_structure_pdb(system: CGSystem, positions: torch.Tensor, path: str | Path) -> Path:
    """Write bead coordinates ``(n, 3)`` in Å as a PDB file with the CG topology."""
    md = _mdtraj()
    xyz = positions.detach().cpu().numpy().astype(np.float32)[None] / 10.0
    md.Trajectory(xyz, cg_topology(system)).save_pdb(str(path))
    return Path(path)


class MetricsReporter:
    """Per-replica metrics appended to a CSV file.

    Parameters
    ----------
    path : str or Path
    interval : int
        Steps between rows.
    append : bool
        Keep the rows of an existing file and add to them (a resumed run).
    """

    def __init__(self, path: str | Path, interval: int, append: bool = False):
        if interval < 1:
            raise ValueError(f"report interval must be positive, got {interval}")
        self.path = Path(path)
        self.interval = int(interval)
        append = append and self.path.is_file() and self.path.stat().st_size > 0
        mode = "a" if append else "w"
        self._handle = open(self.path, mode, newline="")  # noqa: SIM115 - closed in close()
        self._writer = csv.writer(self._handle)
        if not append:
            self._writer.writerow(METRIC_COLUMNS)
        self.last: dict[str, np.ndarray] = {}

    def report(self, sim) -> None:
        """Append one row per replica for the simulation's current state."""
        metrics = {k: v.detach().cpu().numpy() for k, v in sim.metrics().items()}
        set_t = getattr(sim.integrator, "temperature", torch.tensor([float("nan")]))
        set_t = np.broadcast_to(set_t.numpy(), (sim.replicas,))
        self.write(sim.step_count, sim.time_ps, {**metrics, "temperature_set": set_t})
        self.last = metrics

    def write(
        self,
        step: int,
        time_ps: float,
        metrics: dict[str, np.ndarray],
        replicas: np.ndarray | None = None,
    ) -> None:
        """Append the rows of one report.

        Parameters
        ----------
        step : int
        time_ps : float
        metrics : dict of str to numpy.ndarray, each shape (R,)
            The keys of :meth:`Simulation.metrics` plus ``temperature_set`` (bath, K).
        replicas : numpy.ndarray, shape (R,), int, optional
            Replica numbers written in the ``replica`` column (default ``0 .. R-1``;
            an ensemble spread over processes passes global numbers).
        """
        count = len(metrics["rmsd"])
        replicas = np.arange(count) if replicas is None else replicas
        for r in range(count):
            self._writer.writerow(
                [
                    step,
                    f"{time_ps:.4f}",
                    int(replicas[r]),
                    f"{metrics['temperature_set'][r]:.2f}",
                    f"{metrics['temperature'][r]:.3f}",
                    f"{metrics['potential_energy'][r]:.5f}",
                    f"{metrics['kinetic_energy'][r]:.5f}",
                    f"{metrics['rmsd'][r]:.4f}",
                    f"{metrics['q'][r]:.4f}",
                    int(metrics["frozen"][r]),
                ]
            )
        self._handle.flush()

    def flush(self) -> None:
        """Hand the rows written so far to the operating system (before a checkpoint
        covers them: a killed process then loses none of them)."""
        self._handle.flush()

    def close(self) -> None:
        """Close the file."""
        self._handle.close()


class TrajectoryReporter:
    """One trajectory file per replica.

    DCD and XTC files are only ever appended to (`workbench.md.trajectory_files`), so a
    resumed run cuts them back to its checkpoint and goes on; HDF5 files are written
    through mdtraj and cannot be continued.

    Parameters
    ----------
    folder : str or Path
        Receives ``topology.pdb`` and ``replica_XXX.<fmt>``.
    system : CGSystem
    replicas : int
    interval : int
        Steps between frames.
    fmt : str
        ``"dcd"``, ``"xtc"`` or ``"h5"``.
    append : bool
        Keep the frames of existing files (a resumed run, whose files were cut back to
        its checkpoint by `workbench.resume`) and add to them; not for ``"h5"``.
    """

    FORMATS = ("dcd", "xtc", "h5")

    def __init__(
        self,
        folder,
        system: CGSystem,
        replicas: int,
        interval: int,
        fmt: str = "dcd",
        append: bool = False,
    ):
        if fmt not in self.FORMATS:
            raise ValueError(f"trajectory format must be one of {self.FORMATS}, got {fmt!r}")
        if interval < 1:
            raise ValueError(f"report interval must be positive, got {interval}")
        if append and fmt not in CUTTABLE:
            raise TrajectoryFileError(
                f".{fmt} trajectories cannot be continued; use {' or '.join(CUTTABLE)}"
            )
        md = _mdtraj()
        self.folder = ensure_writable_folder(folder)
        self.interval = int(interval)
        self.fmt = fmt
        self.topology_path = write_structure_pdb(
            system, system.native_positions, self.folder / "topology.pdb"
        )
        self.paths = [self.folder / f"replica_{r:03d}.{fmt}" for r in range(replicas)]
        if fmt in CUTTABLE:
            if not append:
                for path in self.paths:
                    path.unlink(missing_ok=True)
            self._files = [AppendedTrajectory(p, system.n_beads) for p in self.paths]
        else:
            self._files = [md.formats.HDF5TrajectoryFile(str(p), "w") for p in self.paths]
            top = cg_topology(system)
            for handle in self._files:
                handle.topology = top
        self.frames = 0

    def report(self, sim) -> None:
        """Append the current positions of every replica."""
        xyz = sim.positions.detach().cpu().numpy().astype(np.float32)
        for handle, frame in zip(self._files, xyz, strict=True):
            if self.fmt in CUTTABLE:
                handle.append(frame, sim.time_ps)
            else:
                handle.write(frame[None] / 10.0, time=np.array([sim.time_ps], np.float32))
        self.frames += 1

    def flush(self) -> None:
        """Hand the frames written so far to the operating system (before a checkpoint
        covers them: a killed process then loses none of them)."""
        for handle in self._files:
            handle.flush()

    def close(self) -> None:
        """Close every file."""
        for handle in self._files:
            handle.close()
