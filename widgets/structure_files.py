"""Coordinates and PDB text of coarse-grained structures, as the 3-D view needs them."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from workbench.analysis import superpose
from workbench.md.reporters import write_structure_pdb
from workbench.system.cg_system import CGSystem


def structure_pdb_text(system: CGSystem, positions: np.ndarray | None = None) -> str:
    """PDB text of the beads (one ATOM per bead, residues as in the source file).

    Parameters
    ----------
    system : CGSystem
    positions : numpy.ndarray, shape (n, 3), optional
        Å; the native structure by default.
    """
    coords = system.native_positions if positions is None else torch.as_tensor(positions)
    with tempfile.TemporaryDirectory(prefix="workbench-pdb-") as folder:
        path = write_structure_pdb(system, coords.detach().cpu(), Path(folder) / "beads.pdb")
        return path.read_text()


def aligned_to_native(positions: np.ndarray, system: CGSystem) -> np.ndarray:
    """One replica's bead coordinates ``(n, 3)`` superposed on the native structure, float32."""
    native = system.native_positions.detach().cpu().to(torch.float32)
    moved = superpose(torch.as_tensor(positions, dtype=torch.float32)[None], native)[0]
    return moved.numpy().astype(np.float32)
