"""Coarse-grained systems: PDB reading, bead mappings, bonded topology, native contacts."""

from workbench.system.builder import available_proteins, build_system
from workbench.system.cg_system import CGSystem
from workbench.system.errors import (
    ChainBreakError,
    MalformedRecordError,
    MissingAtomError,
    NonFiniteCoordinateError,
    NoProteinError,
    PDBError,
    UnknownProteinError,
    UnknownResidueError,
)

__all__ = [
    "CGSystem",
    "ChainBreakError",
    "MalformedRecordError",
    "MissingAtomError",
    "NoProteinError",
    "NonFiniteCoordinateError",
    "PDBError",
    "UnknownProteinError",
    "UnknownResidueError",
    "available_proteins",
    "build_system",
]
