"""Coarse-grained bead mappings of a parsed structure.

``"five-bead"``: N, CA, CB, C, O per residue, in that order; glycine has no CB and
its CA takes type 6. ``"ca"``: one bead per residue at the CA, typed by the
residue's CB code. Types and masses follow docs/units-and-mapping.md ("Coarse-grained
mapping").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from workbench.system.errors import MissingAtomError
from workbench.system.pdb import PDBStructure
from workbench.system.residues import cb_type

MAPPINGS = ("five-bead", "ca")

#: Bead types of the backbone beads in the five-bead mapping.
BACKBONE_TYPES = {"N": 21, "CA": 22, "C": 23, "O": 24}
#: Type of the CA bead of glycine (its CB code, 'G').
GLYCINE_CA_TYPE = 6
#: Bead masses, amu.
MASSES = {"N": 14.0, "CA": 12.0, "CB": 12.0, "C": 12.0, "O": 16.0}

_FIVE_BEAD_ORDER = ("N", "CA", "CB", "C", "O")


@dataclass(frozen=True)
class BeadMapping:
    """Beads of one structure under one mapping.

    Attributes
    ----------
    mapping : str
        ``"five-bead"`` or ``"ca"``.
    bead_names : tuple of str, length n
    bead_types : torch.Tensor, shape (n,), int64
    masses : torch.Tensor, shape (n,), float32
        amu.
    bead_residue : torch.Tensor, shape (n,), int64
        0-based residue of each bead (non-decreasing).
    ca_index : torch.Tensor, shape (n_res,), int64
        Bead index of each residue's CA.
    positions : torch.Tensor, shape (n, 3), float32
        Bead coordinates taken from the atoms they stand for, Å.
    """

    mapping: str
    bead_names: tuple[str, ...]
    bead_types: torch.Tensor
    masses: torch.Tensor
    bead_residue: torch.Tensor
    ca_index: torch.Tensor
    positions: torch.Tensor


def map_structure(structure: PDBStructure, mapping: str = "five-bead") -> BeadMapping:
    """Place the beads of ``mapping`` on a parsed structure.

    Parameters
    ----------
    structure : PDBStructure
    mapping : {"five-bead", "ca"}

    Returns
    -------
    BeadMapping

    Raises
    ------
    ValueError
        For an unknown mapping name.
    MissingAtomError
        If a non-glycine residue has no CB in the five-bead mapping.
    """
    if mapping not in MAPPINGS:
        raise ValueError(f"unknown mapping {mapping!r}; choose one of {', '.join(MAPPINGS)}")
    names: list[str] = []
    types: list[int] = []
    residue: list[int] = []
    coords: list[np.ndarray] = []
    ca_index: list[int] = []
    for i, res in enumerate(structure.residues):
        glycine = res.name == "GLY"
        if mapping == "ca":
            atoms = ("CA",)
        elif glycine:
            atoms = tuple(a for a in _FIVE_BEAD_ORDER if a != "CB")
        else:
            atoms = _FIVE_BEAD_ORDER
            if "CB" not in res.atom_names:
                raise MissingAtomError(
                    f"residue {res.label} has no CB atom, which the five-bead mapping needs"
                )
        for atom in atoms:
            if atom == "CA":
                ca_index.append(len(names))
            names.append(atom)
            coords.append(res.position(atom))
            residue.append(i)
            types.append(_bead_type(mapping, atom, res.name))
    return BeadMapping(
        mapping=mapping,
        bead_names=tuple(names),
        bead_types=torch.tensor(types, dtype=torch.int64),
        masses=torch.tensor([MASSES[a] for a in names], dtype=torch.float32),
        bead_residue=torch.tensor(residue, dtype=torch.int64),
        ca_index=torch.tensor(ca_index, dtype=torch.int64),
        positions=torch.from_numpy(np.stack(coords)).to(torch.float32),
    )


def _bead_type(mapping: str, atom: str, residue_name: str) -> int:
    if mapping == "ca" or atom == "CB":
        return cb_type(residue_name)
    if atom == "CA" and residue_name == "GLY":
        return GLYCINE_CA_TYPE
    return BACKBONE_TYPES[atom]
