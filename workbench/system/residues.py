"""Tables of the 20 standard amino acids and the names mapped onto them.

Residue names are three-letter PDB names. Variants (protonation states, force-field
spellings, selenomethionine, norleucine) map onto a standard residue; any other name
is refused with :class:`~workbench.system.errors.UnknownResidueError`.
"""

from __future__ import annotations

from workbench.system.errors import UnknownResidueError

#: One-letter codes in the order that defines the CB bead types (A = 1 ... Y = 20).
TYPE_ORDER = "ACDEFGHIKLMNPQRSTVWY"

#: Three-letter to one-letter code of the 20 standard residues.
ONE_LETTER: dict[str, str] = {
    "ALA": "A",
    "ARG": "R",
    "ASN": "N",
    "ASP": "D",
    "CYS": "C",
    "GLN": "Q",
    "GLU": "E",
    "GLY": "G",
    "HIS": "H",
    "ILE": "I",
    "LEU": "L",
    "LYS": "K",
    "MET": "M",
    "PHE": "F",
    "PRO": "P",
    "SER": "S",
    "THR": "T",
    "TRP": "W",
    "TYR": "Y",
    "VAL": "V",
}

BACKBONE = ("N", "CA", "C", "O")

_SIDE_CHAINS: dict[str, tuple[str, ...]] = {
    "ALA": ("CB",),
    "ARG": ("CB", "CG", "CD", "NE", "CZ", "NH1", "NH2"),
    "ASN": ("CB", "CG", "OD1", "ND2"),
    "ASP": ("CB", "CG", "OD1", "OD2"),
    "CYS": ("CB", "SG"),
    "GLN": ("CB", "CG", "CD", "OE1", "NE2"),
    "GLU": ("CB", "CG", "CD", "OE1", "OE2"),
    "GLY": (),
    "HIS": ("CB", "CG", "ND1", "CD2", "CE1", "NE2"),
    "ILE": ("CB", "CG1", "CG2", "CD1"),
    "LEU": ("CB", "CG", "CD1", "CD2"),
    "LYS": ("CB", "CG", "CD", "CE", "NZ"),
    "MET": ("CB", "CG", "SD", "CE"),
    "PHE": ("CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ"),
    "PRO": ("CB", "CG", "CD"),
    "SER": ("CB", "OG"),
    "THR": ("CB", "OG1", "CG2"),
    "TRP": ("CB", "CG", "CD1", "CD2", "NE1", "CE2", "CE3", "CZ2", "CZ3", "CH2"),
    "TYR": ("CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ", "OH"),
    "VAL": ("CB", "CG1", "CG2"),
}

#: Heavy-atom names of each standard residue inside a chain (the C-terminal residue
#: may carry OXT as well).
HEAVY_ATOMS: dict[str, tuple[str, ...]] = {
    name: BACKBONE + side for name, side in _SIDE_CHAINS.items()
}

#: Non-standard residue names and the standard residue each one becomes.
VARIANTS: dict[str, str] = {
    "MSE": "MET",  # selenomethionine
    "NLE": "MET",  # norleucine
    "HSD": "HIS",
    "HSE": "HIS",
    "HSP": "HIS",
    "HID": "HIS",
    "HIE": "HIS",
    "HIP": "HIS",
    "CYX": "CYS",
}

# Atom names that differ from the standard residue's, keyed by the name in the file.
_ATOM_RENAMES: dict[str, dict[str, str]] = {
    "MSE": {"SE": "SD"},
    "NLE": {"CD": "SD"},
    "ILE": {"CD": "CD1"},
}
_TERMINAL_RENAMES = {"OT1": "O", "OT2": "OXT"}


def is_amino_acid(name: str) -> bool:
    """Whether ``name`` is a standard residue or a mapped variant."""
    return name in ONE_LETTER or name in VARIANTS


def describe_residue(name: str, residue_id: str, chain_id: str) -> str:
    """Human-readable residue label for messages, e.g. ``"TYR 1 (chain A)"``."""
    chain = chain_id.strip() or "blank"
    return f"{name} {residue_id} (chain {chain})"


def standard_name(name: str, residue_id: str, chain_id: str) -> str:
    """Standard three-letter name of a residue.

    Parameters
    ----------
    name : str
        Residue name as in the file.
    residue_id : str
        Residue number plus insertion code, used in the error message.
    chain_id : str
        Chain identifier, used in the error message.

    Raises
    ------
    UnknownResidueError
        If ``name`` is neither standard nor a mapped variant.
    """
    if name in ONE_LETTER:
        return name
    if name in VARIANTS:
        return VARIANTS[name]
    raise UnknownResidueError(
        f"unknown residue {describe_residue(name, residue_id, chain_id)}: not one of the "
        f"20 standard residues nor a mapped variant ({', '.join(sorted(VARIANTS))})"
    )


def standard_atom_name(residue_name: str, atom_name: str) -> str:
    """Atom name in the standard residue for an atom of residue ``residue_name`` (file name).

    Maps selenomethionine SE and norleucine CD to SD, CHARMM's isoleucine CD to CD1
    and the terminal oxygens OT1/OT2 to O/OXT; other names are returned unchanged.
    """
    renamed = _ATOM_RENAMES.get(residue_name, {}).get(atom_name, atom_name)
    return _TERMINAL_RENAMES.get(renamed, renamed)


def cb_type(name: str) -> int:
    """CB bead type of a standard residue: 1-based index of its one-letter code in
    ``TYPE_ORDER`` (ALA 1 ... TYR 20; GLY 6)."""
    return TYPE_ORDER.index(ONE_LETTER[name]) + 1
