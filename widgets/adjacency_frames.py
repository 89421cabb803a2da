"""Adjacency matrices of recorded frames, their differences and edge counts over time."""

from __future__ import annotations

import numpy as np
import torch

from workbench.analysis import (
    adjacency_diff,
    adjacency_from_edges,
    bead_adjacency,
    edge_count,
    residue_adjacency,
)
from workbench.analysis.native_contacts import contact_formation
from workbench.neighbors import Graph
from workbench.system.cg_system import CGSystem

LEVELS = ("bead", "residue")

#: Codes of :func:`diff_codes`, in colour-scale order.
ABSENT, KEPT, ADDED, REMOVED = 0, 1, 2, 3


def to_level(adjacency: torch.Tensor, system: CGSystem, level: str) -> torch.Tensor:
    """A bead adjacency ``(..., n, n)`` as it is, or contracted to residues."""
    if level == "bead":
        return adjacency
    if level == "residue":
        return residue_adjacency(adjacency, system.bead_residue, system.n_residues)
    raise ValueError(f"level must be one of {LEVELS}, got {level!r}")


def frame_adjacency(
    positions: np.ndarray, system: CGSystem, cutoff: float, level: str = "bead"
) -> np.ndarray:
    """Adjacency of one replica's coordinates with the model cutoff.

    Parameters
    ----------
    positions : numpy.ndarray, shape (n, 3) or (F, n, 3)
        Bead coordinates, Å.
    system : CGSystem
    cutoff : float
        Å; pairs closer than this are adjacent.
    level : {"bead", "residue"}

    Returns
    -------
    numpy.ndarray, shape (..., m, m), bool
        ``m`` beads or residues.
    """
    adjacency = bead_adjacency(torch.as_tensor(positions, dtype=torch.float32), cutoff)
    return to_level(adjacency, system, level).numpy()


def graph_adjacency(
    graph: Graph, system: CGSystem, replica: int, level: str = "bead"
) -> np.ndarray:
    """Adjacency of one replica in a simulation's neighbour graph, shape (m, m), bool."""
    adjacency = adjacency_from_edges(graph.src, graph.dst, system.n_beads, replica)
    return to_level(adjacency.cpu(), system, level).numpy()


def native_contacts_formed(positions: np.ndarray, system: CGSystem) -> np.ndarray:
    """Which native contacts are formed in one replica's bead positions.

    A contact counts as formed where its term of Q (:func:`~workbench.analysis.native_contacts.
    contact_formation`, CA distance against 1.5 × the native one) exceeds one half.

    Parameters
    ----------
    positions : numpy.ndarray, shape (n, 3)
        Bead coordinates, Å.
    system : CGSystem

    Returns
    -------
    numpy.ndarray, shape (n_contacts,), bool
    """
    ca = torch.as_tensor(positions, dtype=torch.float32)[system.ca_index.cpu()]
    terms = contact_formation(
        ca, system.native_contacts.cpu(), system.native_contact_distances.cpu()
    )
    return (terms > 0.5).numpy()


def edge_counts(adjacency: np.ndarray) -> np.ndarray:
    """Directed edges of each matrix of a stack ``(..., m, m)`` (a pair counts twice)."""
    return edge_count(torch.as_tensor(adjacency)).numpy()


def diff_codes(previous: np.ndarray, current: np.ndarray) -> np.ndarray:
    """One matrix for the diff view: ABSENT, KEPT, ADDED or REMOVED per entry.

    Parameters
    ----------
    previous, current : numpy.ndarray, shape (m, m), bool

    Returns
    -------
    numpy.ndarray, shape (m, m), int8
    """
    added, removed = adjacency_diff(torch.as_tensor(previous), torch.as_tensor(current))
    codes = np.where(current & previous, KEPT, ABSENT).astype(np.int8)
    codes[added.numpy()] = ADDED
    codes[removed.numpy()] = REMOVED
    return codes
