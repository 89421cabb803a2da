"""The coarse-grained system: beads, their types and masses, bonded topology,
native structure and native contacts.

A :class:`CGSystem` describes one molecule, or several copies of one protein placed apart
(`workbench.system.copies`). Simulations run many replicas of it at once; replica data
then carry a leading replica axis ``R``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch


@dataclass(frozen=True)
class CGSystem:
    """One coarse-grained protein.

    Attributes
    ----------
    name : str
        Short name (``"cln025"``, ``"1enh"``, or the PDB file stem).
    mapping : str
        ``"five-bead"`` (N, CA, CB, C, O per residue; glycine has no CB) or
        ``"ca"`` (one bead per residue).
    bead_names : tuple of str, length n
        Atom name each bead stands for (``"N"``, ``"CA"``, ``"CB"``, ...).
    bead_types : torch.Tensor, shape (n,), int64
        Embedding type of each bead (docs/units-and-mapping.md: CB = 1..20 by residue,
        glycine CA = 6, N = 21, CA = 22, C = 23, O = 24; CA mapping: the CB code
        of the residue).
    masses : torch.Tensor, shape (n,), float32
        Bead masses in amu.
    bead_residue : torch.Tensor, shape (n,), int64
        0-based residue index of each bead.
    residue_names : tuple of str, length n_res
        Three-letter residue names after mapping of nonstandard residues.
    residue_ids : tuple of str, length n_res
        Residue identifiers as in the PDB file (number plus insertion code).
    chain_index : torch.Tensor, shape (n_res,), int64
        0-based chain of each residue; bonded terms never cross chains.
    ca_index : torch.Tensor, shape (n_res,), int64
        Bead index of each residue's CA.
    bonds : torch.Tensor, shape (n_bonds, 2), int64
    angles : torch.Tensor, shape (n_angles, 3), int64
        Apex bead in column 1.
    dihedrals : torch.Tensor, shape (n_dihedrals, 4), int64
    native_positions : torch.Tensor, shape (n, 3), float32
        Bead coordinates of the experimental structure, Å.
    native_contacts : torch.Tensor, shape (n_contacts, 2), int64
        Residue pairs ``(i, j)``, ``j - i >= 3``, whose closest heavy atoms are
        within 4.5 Å in the experimental structure.
    native_contact_distances : torch.Tensor, shape (n_contacts,), float32
        CA–CA distance of each native contact in the experimental structure, Å.
    """

    name: str
    mapping: str
    bead_names: tuple[str, ...]
    bead_types: torch.Tensor
    masses: torch.Tensor
    bead_residue: torch.Tensor
    residue_names: tuple[str, ...]
    residue_ids: tuple[str, ...]
    chain_index: torch.Tensor
    ca_index: torch.Tensor
    bonds: torch.Tensor
    angles: torch.Tensor
    dihedrals: torch.Tensor
    native_positions: torch.Tensor
    native_contacts: torch.Tensor
    native_contact_distances: torch.Tensor
    metadata: dict = field(default_factory=dict)

    @property
    def copies(self) -> int:
        """Copies of one protein the system holds (``metadata["copies"]``; 1 for a single
        protein). Copy k owns the k-th of ``copies`` equal blocks of every array."""
        return int(self.metadata.get("copies", 1))

    @property
    def n_beads(self) -> int:
        """Number of beads ``n``."""
        return int(self.bead_types.shape[0])

    @property
    def n_residues(self) -> int:
        """Number of residues."""
        return len(self.residue_names)

    @property
    def sequence(self) -> str:
        """One-letter sequence."""
        from workbench.system.residues import ONE_LETTER

        return "".join(ONE_LETTER[r] for r in self.residue_names)

    def to(self, device: torch.device | str) -> CGSystem:
        """Return a copy whose tensors live on ``device``."""
        moved = {
            f.name: getattr(self, f.name).to(device)
            for f in fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        return replace(self, **moved)
