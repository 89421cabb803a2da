"""Root-mean-square deviation after optimal rigid superposition."""

from __future__ import annotations

import torch

from workbench.analysis.superpose import superpose


def rmsd(pos: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """RMSD of each replica from a reference after optimal superposition.

    Parameters
    ----------
    pos : torch.Tensor, shape (R, n, 3) (any leading axes), float
        Coordinates, Å (in practice the CA beads).
    ref : torch.Tensor, shape (n, 3) or (R, n, 3), float
        Reference coordinates, Å.

    Returns
    -------
    torch.Tensor, shape (R,), dtype of ``pos``
        Minimum RMSD over proper rigid motions, Å. Computed in float64.
    """
    ref64 = ref.to(device=pos.device, dtype=torch.float64)
    moved = superpose(pos.to(torch.float64), ref64)
    msd = (moved - ref64).square().sum(dim=-1).mean(dim=-1)
    return msd.sqrt().to(pos.dtype)
