"""Bonded topology of a coarse-grained system: bonds, angles, dihedrals, and the
pair lists derived from the bond graph.

Bonded terms never cross chains. Five-bead bonds are N–CA, CA–CB, CA–C, C–O within
a residue and C(i)–N(i+1); CA bonds join consecutive CAs. Angles are all pairs of
bonds that share a bead. Five-bead dihedrals are phi, psi, omega, gamma_1 (improper
at CA, non-glycine) and gamma_2 (improper at C), in that order (docs/mlcg-format.md §8.1);
CA dihedrals are four consecutive CAs.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import torch

from workbench.system.copies import per_copy

if TYPE_CHECKING:
    from workbench.system.cg_system import CGSystem
    from workbench.system.mapping import BeadMapping

#: Value of :func:`graph_distances` for beads with no bond path between them.
UNREACHABLE = 1 << 30

#: Default smallest bond-graph separation of a non-bonded pair, per mapping.
#: Five-bead: separation >= 5 bonds (pairs 1-2 to 1-5 left out); of the thresholds
#: this alone reproduces the 924 of 1176 pairs of mlcg's CLN025 ``non_bonded`` list
#: (>= 4 keeps 992, >= 6 keeps 850). CA: >= 3, i.e. ``|i - j| >= 3`` within a chain.
MIN_SEPARATION = {"five-bead": 5, "ca": 3}

_DIHEDRAL_KINDS = {
    ("C", "N", "CA", "C"): "phi",
    ("N", "CA", "C", "N"): "psi",
    ("CA", "C", "N", "CA"): "omega",
    ("N", "CB", "C", "CA"): "gamma_1",
    ("CA", "O", "N", "C"): "gamma_2",
    ("CA", "CA", "CA", "CA"): "ca",
}


def build_bonds(beads: BeadMapping, chain_index: torch.Tensor) -> torch.Tensor:
    """Bonds of a mapped structure.

    Parameters
    ----------
    beads : BeadMapping
    chain_index : torch.Tensor, shape (n_res,), int64
        Chain of each residue.

    Returns
    -------
    torch.Tensor, shape (n_bonds, 2), int64
        Bead pairs ``(i, j)`` with ``i < j``, residue by residue.
    """
    index = _residue_bead_index(beads)
    chains = chain_index.tolist()
    pairs: list[tuple[int, int]] = []
    for r, atoms in enumerate(index):
        if beads.mapping == "five-bead":
            for a, b in (("N", "CA"), ("CA", "CB"), ("CA", "C"), ("C", "O")):
                if a in atoms and b in atoms:
                    pairs.append((atoms[a], atoms[b]))
        if r + 1 < len(index) and chains[r] == chains[r + 1]:
            link = ("C", "N") if beads.mapping == "five-bead" else ("CA", "CA")
            pairs.append((atoms[link[0]], index[r + 1][link[1]]))
    return _as_index(pairs, 2)


def build_angles(n_beads: int, bonds: torch.Tensor) -> torch.Tensor:
    """All angles ``(i, apex, k)`` formed by two bonds sharing the apex bead.

    Parameters
    ----------
    n_beads : int
    bonds : torch.Tensor, shape (n_bonds, 2), int64

    Returns
    -------
    torch.Tensor, shape (n_angles, 3), int64
        Ordered by apex; ``i < k`` within each angle.
    """
    neighbours = _adjacency(n_beads, bonds)
    triples = []
    for apex, nbrs in enumerate(neighbours):
        ends = sorted(nbrs)
        triples += [(a, apex, c) for x, a in enumerate(ends) for c in ends[x + 1 :]]
    return _as_index(triples, 3)


def build_dihedrals(beads: BeadMapping, chain_index: torch.Tensor) -> torch.Tensor:
    """Dihedrals of a mapped structure, all within one chain.

    Parameters
    ----------
    beads : BeadMapping
    chain_index : torch.Tensor, shape (n_res,), int64

    Returns
    -------
    torch.Tensor, shape (n_dihedrals, 4), int64
        Five-bead: all phi, then psi, omega, gamma_1, gamma_2 (see module docstring).
        CA: ``(CA_i, CA_i+1, CA_i+2, CA_i+3)``.
    """
    index = _residue_bead_index(beads)
    chains = chain_index.tolist()
    n_res = len(index)

    def same_chain(r: int, span: int) -> bool:
        return r >= 0 and r + span < n_res and chains[r] == chains[r + span]

    if beads.mapping == "ca":
        quads = [
            tuple(index[r + k]["CA"] for k in range(4)) for r in range(n_res) if same_chain(r, 3)
        ]
        return _as_index(quads, 4)
    quads = []
    for kind in ("phi", "psi", "omega", "gamma_1", "gamma_2"):
        for r, here in enumerate(index):
            prev = index[r - 1] if same_chain(r - 1, 1) else None
            nxt = index[r + 1] if same_chain(r, 1) else None
            if kind == "phi" and prev is not None:
                quads.append((prev["C"], here["N"], here["CA"], here["C"]))
            elif kind == "psi" and nxt is not None:
                quads.append((here["N"], here["CA"], here["C"], nxt["N"]))
            elif kind == "omega" and nxt is not None:
                quads.append((here["CA"], here["C"], nxt["N"], nxt["CA"]))
            elif kind == "gamma_1" and "CB" in here:
                quads.append((here["N"], here["CB"], here["C"], here["CA"]))
            elif kind == "gamma_2" and nxt is not None:
                quads.append((here["CA"], here["O"], nxt["N"], here["C"]))
    return _as_index(quads, 4)


def dihedral_kinds(system: CGSystem) -> tuple[str, ...]:
    """Kind of each dihedral of ``system``, from the names of its beads.

    Returns
    -------
    tuple of str, length n_dihedrals
        ``"phi"``, ``"psi"``, ``"omega"``, ``"gamma_1"``, ``"gamma_2"`` (five-bead) or
        ``"ca"`` (CA mapping).
    """
    names = system.bead_names
    return tuple(
        _DIHEDRAL_KINDS[tuple(names[i] for i in quad)] for quad in system.dihedrals.tolist()
    )


def graph_distances(n: int, bonds: torch.Tensor) -> torch.Tensor:
    """Number of bonds on the shortest path between every two beads.

    Parameters
    ----------
    n : int
        Number of beads.
    bonds : torch.Tensor, shape (n_bonds, 2), int64

    Returns
    -------
    torch.Tensor, shape (n, n), int64
        0 on the diagonal; ``UNREACHABLE`` between beads of different chains.
    """
    neighbours = _adjacency(n, bonds)
    dist = torch.full((n, n), UNREACHABLE, dtype=torch.int64)
    for source in range(n):
        row = [UNREACHABLE] * n
        row[source] = 0
        queue = deque([source])
        while queue:
            bead = queue.popleft()
            for nb in neighbours[bead]:
                if row[nb] == UNREACHABLE:
                    row[nb] = row[bead] + 1
                    queue.append(nb)
        dist[source] = torch.tensor(row, dtype=torch.int64)
    return dist


def nonbonded_pairs(system: CGSystem, min_separation: int | None = None) -> torch.Tensor:
    """Bead pairs for the non-bonded (repulsion) prior.

    Parameters
    ----------
    system : CGSystem
    min_separation : int, optional
        Smallest bond-graph separation kept. Default ``MIN_SEPARATION[system.mapping]``:
        5 for five-bead (924 pairs for CLN025, as mlcg), 3 for CA (``|i - j| >= 3``).
        Pairs in different chains are always kept, but only within one copy of a
        multi-copy system (`workbench.system.copies`): copies meet through the network
        alone, and their ``copies²`` pairs would not fit in memory.

    Returns
    -------
    torch.Tensor, shape (P, 2), int64
        Pairs ``(i, j)``, ``i < j``, in row-major order.
    """
    if system.copies > 1:
        return per_copy(system, lambda one: nonbonded_pairs(one, min_separation))
    if min_separation is None:
        min_separation = MIN_SEPARATION[system.mapping]
    dist = graph_distances(system.n_beads, system.bonds)
    return _upper_pairs(dist >= min_separation)


def bonded_exclusions(system: CGSystem) -> torch.Tensor:
    """Bead pairs related 1-2, 1-3 or 1-4 through bonds (bond-graph separation 1 to 3).

    Returns
    -------
    torch.Tensor, shape (P, 2), int64
        Pairs ``(i, j)``, ``i < j``, in row-major order (found on one copy and replicated
        for a multi-copy system, whose copies share no bond).
    """
    if system.copies > 1:
        return per_copy(system, bonded_exclusions)
    dist = graph_distances(system.n_beads, system.bonds)
    return _upper_pairs((dist >= 1) & (dist <= 3))


def _upper_pairs(mask: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(torch.triu(mask, diagonal=1)).to(torch.int64)


def _residue_bead_index(beads: BeadMapping) -> list[dict[str, int]]:
    """Per residue, bead name -> bead index."""
    n_res = int(beads.bead_residue.max()) + 1 if beads.bead_residue.numel() else 0
    index: list[dict[str, int]] = [{} for _ in range(n_res)]
    for bead, (name, res) in enumerate(
        zip(beads.bead_names, beads.bead_residue.tolist(), strict=True)
    ):
        index[res][name] = bead
    return index


def _adjacency(n: int, bonds: torch.Tensor) -> list[list[int]]:
    neighbours: list[list[int]] = [[] for _ in range(n)]
    for a, b in bonds.tolist():
        neighbours[a].append(b)
        neighbours[b].append(a)
    return neighbours


def _as_index(rows: list, width: int) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int64).reshape(-1, width)
