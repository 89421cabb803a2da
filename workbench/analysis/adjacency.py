"""Bead and residue adjacency matrices, from coordinates or from a neighbour graph."""

from __future__ import annotations

import torch


def bead_adjacency(pos: torch.Tensor, cutoff: float) -> torch.Tensor:
    """Pairs of beads closer than a cutoff.

    Parameters
    ----------
    pos : torch.Tensor, shape (n, 3) or (R, n, 3), float
        Bead coordinates, Å.
    cutoff : float
        Distance cutoff, Å; pairs with ``d < cutoff`` (strictly) are adjacent.

    Returns
    -------
    torch.Tensor, shape (n, n) or (R, n, n), bool
        Symmetric adjacency with a False diagonal.
    """
    dist = torch.cdist(pos, pos, compute_mode="donot_use_mm_for_euclid_dist")
    adj = dist < cutoff
    adj.diagonal(dim1=-2, dim2=-1).fill_(False)
    return adj


def adjacency_from_edges(
    src: torch.Tensor, dst: torch.Tensor, n_beads: int, replica: int
) -> torch.Tensor:
    """Adjacency matrix of one replica from a flattened neighbour graph.

    Parameters
    ----------
    src, dst : torch.Tensor, shape (E,), int64
        Edge endpoints over flattened beads ``g = replica * n_beads + i``; the
        message flows from ``src`` into ``dst``. Edges with an endpoint outside
        the requested replica (other replicas, the padding node of a
        fixed-capacity graph) are ignored.
    n_beads : int
        Beads per replica ``n``.
    replica : int
        Replica to extract.

    Returns
    -------
    torch.Tensor, shape (n, n), bool
        ``adj[i, j]`` is True when an edge runs from bead ``j`` into bead ``i``;
        symmetric for a graph that holds both directions of every pair.
    """
    first = replica * n_beads
    keep = (src >= first) & (src < first + n_beads) & (dst >= first) & (dst < first + n_beads)
    adj = torch.zeros(n_beads, n_beads, dtype=torch.bool, device=src.device)
    adj[dst[keep] - first, src[keep] - first] = True
    return adj


def residue_adjacency(
    bead_adj: torch.Tensor, bead_residue: torch.Tensor, n_res: int
) -> torch.Tensor:
    """Contract a bead adjacency to residues.

    Parameters
    ----------
    bead_adj : torch.Tensor, shape (..., n, n), bool
        Bead adjacency.
    bead_residue : torch.Tensor, shape (n,), int64
        0-based residue index of each bead.
    n_res : int
        Number of residues.

    Returns
    -------
    torch.Tensor, shape (..., n_res, n_res), bool
        True where any bead of one residue is adjacent to any bead of the other;
        the diagonal is False.
    """
    residue = bead_residue.to(bead_adj.device)
    membership = torch.nn.functional.one_hot(residue, n_res).to(torch.float32)
    links = membership.T @ bead_adj.to(torch.float32) @ membership
    adj = links > 0
    adj.diagonal(dim1=-2, dim2=-1).fill_(False)
    return adj


def adjacency_diff(
    previous: torch.Tensor, current: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Entries that appeared and disappeared between two adjacency matrices.

    Parameters
    ----------
    previous, current : torch.Tensor, shape (..., n, n), bool
        Adjacency before and after.

    Returns
    -------
    added : torch.Tensor, shape (..., n, n), bool
        True in ``current`` and False in ``previous``.
    removed : torch.Tensor, shape (..., n, n), bool
        True in ``previous`` and False in ``current``.
    """
    return current & ~previous, previous & ~current


def edge_count(adj: torch.Tensor) -> torch.Tensor:
    """Number of directed edges (True entries) of adjacency matrices.

    Parameters
    ----------
    adj : torch.Tensor, shape (..., n, n), bool
        Adjacency matrices.

    Returns
    -------
    torch.Tensor, shape (...), int64
        True entries per matrix; a symmetric matrix counts each pair twice.
    """
    return adj.sum(dim=(-2, -1))
