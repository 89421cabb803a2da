"""Native contacts of an experimental structure (docs/units-and-mapping.md, "Folding metrics").

A native contact is a residue pair ``(i, j)``, ``i < j``, either in different chains or
with ``j - i >= 3`` in one chain, whose closest heavy atoms (side chains included)
are less than 4.5 Å apart.
"""

from __future__ import annotations

import numpy as np
import torch

from workbench.system.pdb import PDBStructure

#: Heavy-atom distance below which two residues are in contact, Å.
CONTACT_CUTOFF = 4.5
#: Smallest sequence separation of a contact within one chain.
MIN_SEQUENCE_SEPARATION = 3


def residue_min_distances(structure: PDBStructure) -> np.ndarray:
    """Closest heavy-atom distance between every two residues.

    Returns
    -------
    numpy.ndarray, shape (n_res, n_res), float64
        Symmetric, Å; the diagonal is 0.
    """
    coords, residue = structure.heavy_atoms()
    starts = np.flatnonzero(np.r_[True, residue[1:] != residue[:-1]])
    n_res = structure.n_residues
    out = np.zeros((n_res, n_res))
    for i in range(n_res - 1):
        mine = coords[residue == i]
        later = starts[i + 1]
        diff = mine[:, None, :] - coords[None, later:, :]
        nearest = np.sqrt((diff**2).sum(-1)).min(axis=0)
        out[i, i + 1 :] = np.minimum.reduceat(nearest, starts[i + 1 :] - later)
    return np.maximum(out, out.T)


def native_contacts(
    structure: PDBStructure,
    cutoff: float = CONTACT_CUTOFF,
    min_separation: int = MIN_SEQUENCE_SEPARATION,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Native contacts and their CA–CA distances.

    Parameters
    ----------
    structure : PDBStructure
    cutoff : float
        Heavy-atom distance, Å; a pair is a contact if its closest atoms are nearer.
    min_separation : int
        Smallest ``j - i`` for residues of one chain (pairs across chains always count).

    Returns
    -------
    contacts : torch.Tensor, shape (n_contacts, 2), int64
        Residue pairs ``(i, j)``, ``i < j``, in row-major order.
    ca_distances : torch.Tensor, shape (n_contacts,), float32
        CA–CA distance of each contact, Å.
    """
    chain = structure.chain_index
    n_res = structure.n_residues
    i, j = np.triu_indices(n_res, k=1)
    eligible = (chain[i] != chain[j]) | (j - i >= min_separation)
    close = residue_min_distances(structure)[i, j] < cutoff
    keep = eligible & close
    i, j = i[keep], j[keep]
    ca = np.stack([r.position("CA") for r in structure.residues])
    distances = np.linalg.norm(ca[i] - ca[j], axis=1)
    contacts = torch.from_numpy(np.stack([i, j], axis=1).astype(np.int64)).reshape(-1, 2)
    return contacts, torch.from_numpy(distances).to(torch.float32)
