"""Folding metrics and structural analysis on plain tensors and arrays.

RMSD after batched Kabsch superposition, the fraction of native contacts Q,
GDT-TS, the largest metastable Q, the free-energy surface over (RMSD, Q), and
bead and residue adjacency matrices. Torch functions are batched over a leading
replica axis and run on the device of their inputs.
"""

from workbench.analysis.adjacency import (
    adjacency_diff,
    adjacency_from_edges,
    bead_adjacency,
    edge_count,
    residue_adjacency,
)
from workbench.analysis.free_energy import (
    free_energy_surface,
    largest_metastable_q,
    savitzky_golay,
)
from workbench.analysis.gdt import gdt_fractions, gdt_ts
from workbench.analysis.native_contacts import fraction_native_contacts
from workbench.analysis.superpose import (
    kabsch_rotation,
    rmsd,
    rotation_from_covariance,
    superpose,
)

__all__ = [
    "adjacency_diff",
    "adjacency_from_edges",
    "bead_adjacency",
    "edge_count",
    "fraction_native_contacts",
    "free_energy_surface",
    "gdt_fractions",
    "gdt_ts",
    "kabsch_rotation",
    "largest_metastable_q",
    "residue_adjacency",
    "rmsd",
    "rotation_from_covariance",
    "savitzky_golay",
    "superpose",
]
