"""Systems of several copies of one protein (docs/large-systems.md).

A multi-copy system is one molecule-like :class:`CGSystem` (one replica) holding ``N``
copies of a protein, each a rigid translate of the native structure on a 3-D grid.
Copy ``k`` owns beads ``k·n0 … (k+1)·n0 − 1`` and residues ``k·m0 … (k+1)·m0 − 1``
(``n0`` beads and ``m0`` residues per copy); every per-bead, per-residue and per-term
array is the first copy's repeated ``N`` times, indices shifted by the copy's offset, so
no bond, angle, dihedral or native contact joins two copies. The axis-aligned boxes of
neighbouring copies are ``gap`` Å apart, so with ``gap`` above the cutoff plus the skin
no two copies interact at the start.

A protein spec ``NAME*N`` (``1enh*372``) asks :func:`workbench.system.build_system`
for such a system; ``metadata["copies"]`` records ``N``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from workbench.system.cg_system import CGSystem

#: Default clear distance between the boxes of neighbouring copies, Å: above the 10 Å
#: cutoff of the shipped networks plus the default 2 Å Verlet skin.
COPY_GAP = 15.0


def parse_copies(spec: str) -> tuple[str, int]:
    """Split a protein spec ``NAME*N`` into ``(NAME, N)``; ``(spec, 1)`` without ``*``.

    Raises
    ------
    ValueError
        ``N`` is not a positive integer, or ``NAME`` is empty.
    """
    name, star, count = str(spec).rpartition("*")
    if not star:
        return str(spec), 1
    if not name.strip() or not count.strip().isdigit() or int(count) < 1:
        raise ValueError(f"protein spec {spec!r}: write NAME*N with N a positive number of "
                         "copies, e.g. 1enh*372")
    return name.strip(), int(count)


def replicate_index(index: torch.Tensor, copies: int, stride: int) -> torch.Tensor:
    """Index rows of one copy repeated for ``copies`` copies, copy k's shifted by ``k·stride``.

    Parameters
    ----------
    index : torch.Tensor, shape (P, ...), int64
    copies : int
    stride : int
        Beads (or residues, or chains) per copy.

    Returns
    -------
    torch.Tensor, shape (copies·P, ...), int64
        Copy-major: the first P rows are ``index`` itself.
    """
    shift = torch.arange(copies, dtype=index.dtype, device=index.device) * stride
    return (index[None] + shift.reshape(-1, *([1] * index.ndim))).reshape(-1, *index.shape[1:])


def grid_offsets(extent: torch.Tensor, copies: int, gap: float) -> torch.Tensor:
    """Translations of ``copies`` boxes of size ``extent`` on a near-cubic grid.

    Parameters
    ----------
    extent : torch.Tensor, shape (3,), float32
        Size of one copy's axis-aligned box, Å.
    copies : int
    gap : float
        Clear distance between neighbouring boxes along each axis, Å.

    Returns
    -------
    torch.Tensor, shape (copies, 3), float32
        Å; copy 0 stays in place, the grid fills x fastest.
    """
    nx = 1
    while nx**3 < copies:
        nx += 1
    ny = math.ceil(math.sqrt(copies / nx))
    k = torch.arange(copies)
    cell = torch.stack([k % nx, (k // nx) % ny, k // (nx * ny)], dim=1).to(torch.float32)
    return cell * (extent.to(torch.float32) + gap)


def replicate_system(system: CGSystem, copies: int, gap: float = COPY_GAP) -> CGSystem:
    """``copies`` copies of ``system`` on a grid, as one system.

    Parameters
    ----------
    system : CGSystem
        One copy (not itself a multi-copy system).
    copies : int
        At least 1; 1 returns ``system`` unchanged.
    gap : float
        Clear distance between neighbouring copies' boxes, Å (`COPY_GAP`); choose it
        above the model's cutoff plus the Verlet skin for copies that start apart.

    Returns
    -------
    CGSystem
        Named ``"{name}*{copies}"``, ``metadata["copies"] = copies``; chains (and their
        ``metadata["chain_ids"]``), bonds, angles, dihedrals and native contacts of copy k
        are copy 0's shifted by k copies.

    Raises
    ------
    ValueError
        ``copies`` below 1, a negative ``gap``, or a system that already has copies.
    """
    if copies < 1:
        raise ValueError(f"copies must be at least 1, got {copies}")
    if not gap >= 0:
        raise ValueError(f"gap between copies must be a non-negative distance (Å), got {gap}")
    if system.copies != 1:
        raise ValueError(f"{system.name} is already a system of {system.copies} copies")
    if copies == 1:
        return system
    n, m = system.n_beads, system.n_residues
    chains = int(system.chain_index.max()) + 1
    native = system.native_positions
    low, high = native.amin(0), native.amax(0)
    offsets = grid_offsets(high - low, copies, gap)
    return replace(
        system,
        name=f"{system.name}*{copies}",
        bead_names=system.bead_names * copies,
        bead_types=system.bead_types.repeat(copies),
        masses=system.masses.repeat(copies),
        bead_residue=replicate_index(system.bead_residue, copies, m),
        residue_names=system.residue_names * copies,
        residue_ids=system.residue_ids * copies,
        chain_index=replicate_index(system.chain_index, copies, chains),
        ca_index=replicate_index(system.ca_index, copies, n),
        bonds=replicate_index(system.bonds, copies, n),
        angles=replicate_index(system.angles, copies, n),
        dihedrals=replicate_index(system.dihedrals, copies, n),
        native_positions=(native[None] + offsets[:, None, :]).reshape(-1, 3),
        native_contacts=replicate_index(system.native_contacts, copies, m),
        native_contact_distances=system.native_contact_distances.repeat(copies),
        metadata={**system.metadata, **_chain_ids(system.metadata, lambda ids: ids * copies),
                  "copies": copies, "copy_gap": float(gap)},
    )


def _chain_ids(metadata: dict, change) -> dict:
    """``{"chain_ids": change(ids)}`` where the metadata names its chains, else ``{}``."""
    ids = metadata.get("chain_ids")
    return {} if ids is None else {"chain_ids": change(tuple(ids))}


def first_copy(system: CGSystem) -> CGSystem:
    """Copy 0 of a multi-copy system, as the single protein it was made from (in place:
    its native positions are copy 0's); ``system`` itself when it has one copy."""
    copies = system.copies
    if copies == 1:
        return system

    def head(values):
        return values[: len(values) // copies]

    metadata = {k: v for k, v in system.metadata.items() if k not in ("copies", "copy_gap")}
    metadata.update(_chain_ids(metadata, head))
    return replace(
        system,
        name=system.name.rpartition("*")[0] or system.name,
        **{name: head(getattr(system, name)) for name in (
            "bead_names", "bead_types", "masses", "bead_residue", "residue_names",
            "residue_ids", "chain_index", "ca_index", "bonds", "angles", "dihedrals",
            "native_positions", "native_contacts", "native_contact_distances")},
        metadata=metadata,
    )


def per_copy(system: CGSystem, pairs_of_one_copy) -> torch.Tensor:
    """Bead index rows computed on copy 0 and replicated over all copies.

    Parameters
    ----------
    system : CGSystem
    pairs_of_one_copy : callable
        ``CGSystem -> torch.Tensor`` of shape (P, k), int64 bead indices.

    Returns
    -------
    torch.Tensor, shape (copies·P, k), int64
    """
    one = first_copy(system)
    return replicate_index(pairs_of_one_copy(one), system.copies, one.n_beads)
