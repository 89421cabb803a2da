"""Internal coordinates of bonded terms, batched over replicas.

Every function takes positions ``pos`` of shape ``(R, n, 3)`` and an index
tensor of shape ``(P, order)`` (bead indices within one molecule) and returns
one feature per replica and term, shape ``(R, P)``. All are differentiable.
"""

from __future__ import annotations

import torch


def _beads(pos: torch.Tensor, index: torch.Tensor, column: int) -> torch.Tensor:
    """Positions of the beads in one column of ``index``, shape (R, P, 3).

    Advanced indexing differentiates into a sorted, deterministic accumulation
    (``index_select`` would use atomics, whose float sums vary from run to run on
    GPUs); prior index lists are short, so the sort costs little.
    """
    return pos[:, index[:, column]]


def bond_lengths(pos: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Distances ``|x_j − x_i|`` for pairs ``index[:, 0], index[:, 1]``, shape (R, P)."""
    return torch.linalg.vector_norm(_beads(pos, index, 1) - _beads(pos, index, 0), dim=-1)


def angle_cosines(pos: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """cos θ of triplets ``(i, apex j, k)``, shape (R, P)."""
    a = _beads(pos, index, 0) - _beads(pos, index, 1)
    b = _beads(pos, index, 2) - _beads(pos, index, 1)
    norms = torch.linalg.vector_norm(a, dim=-1) * torch.linalg.vector_norm(b, dim=-1)
    return (a * b).sum(-1) / norms


def torsions(pos: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Torsion angles φ in (−π, π] of quadruplets (IUPAC sign, trans = ±π), shape (R, P)."""
    b1 = _beads(pos, index, 1) - _beads(pos, index, 0)
    b2 = _beads(pos, index, 2) - _beads(pos, index, 1)
    b3 = _beads(pos, index, 3) - _beads(pos, index, 2)
    n1 = torch.linalg.cross(b1, b2)
    n2 = torch.linalg.cross(b2, b3)
    b2_unit = b2 / torch.linalg.vector_norm(b2, dim=-1, keepdim=True)
    x = (n1 * n2).sum(-1)
    y = (torch.linalg.cross(n1, n2) * b2_unit).sum(-1)
    return torch.atan2(y, x)
