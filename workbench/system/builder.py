"""Build a :class:`CGSystem` from a bundled protein name or a PDB file."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import torch

from workbench.system.cg_system import CGSystem
from workbench.system.contacts import native_contacts
from workbench.system.copies import parse_copies, replicate_system
from workbench.system.errors import UnknownProteinError
from workbench.system.mapping import map_structure
from workbench.system.pdb import PDBStructure, parse_pdb, read_pdb
from workbench.system.topology import build_angles, build_bonds, build_dihedrals

#: Bundled proteins: canonical name -> file in ``workbench/system/data``.
BUNDLED = {
    "cln025": "5awl.pdb",
    "2jof": "2jof.pdb",
    "1yrf": "1yrf.pdb",
    "1enh": "1enh.pdb",
    "2a3d": "2a3d.pdb",
}

#: Other accepted names of the bundled proteins.
ALIASES = {
    "5awl": "cln025",
    "chignolin": "cln025",
    "trpcage": "2jof",
    "trp-cage": "2jof",
    "villin": "1yrf",
    "homeodomain": "1enh",
    "alpha3d": "2a3d",
    "a3d": "2a3d",
}


def available_proteins() -> list[str]:
    """Canonical names of the bundled proteins, smallest first."""
    return list(BUNDLED)


def build_system(source: str | os.PathLike, mapping: str = "five-bead") -> CGSystem:
    """Coarse-grained system of a bundled protein or a PDB file.

    Parameters
    ----------
    source : str or os.PathLike
        A bundled name (see :func:`available_proteins` and ``ALIASES``; any case) or
        the path of a PDB file, optionally followed by ``*N`` for ``N`` copies of it on a
        grid in one system (``1enh*372``; `workbench.system.copies.replicate_system`).
    mapping : {"five-bead", "ca"}

    Returns
    -------
    CGSystem
        Named by the canonical bundled name, or by the file stem (``*N`` appended for
        copies).

    Raises
    ------
    UnknownProteinError
        ``source`` is a bare name that is not bundled.
    FileNotFoundError
        ``source`` looks like a path (has a suffix or a directory) but no file is there.
    workbench.system.errors.PDBError
        The file cannot be mapped (see :func:`workbench.system.pdb.parse_pdb`).
    ValueError
        Unknown mapping, or a copy count that is not a positive integer.
    """
    if not isinstance(source, os.PathLike):
        source, copies = parse_copies(source)
        if copies > 1:
            return replicate_system(build_system(source, mapping), copies)
    key = str(source).strip().lower()
    key = ALIASES.get(key, key)
    if key in BUNDLED:
        text = (resources.files("workbench.system") / "data" / BUNDLED[key]).read_text()
        structure = parse_pdb(text, source=f"bundled {BUNDLED[key]}")
        name = key
    else:
        path = Path(source)
        if not path.is_file():
            if isinstance(source, os.PathLike) or path.suffix or len(path.parts) > 1:
                raise FileNotFoundError(f"PDB file not found: {str(source)!r}")
            raise UnknownProteinError(
                f"unknown protein {str(source)!r}; bundled proteins are "
                f"{', '.join(available_proteins())} (aliases: {', '.join(ALIASES)}), "
                "or give the path of a PDB file"
            )
        structure = read_pdb(path)
        name = path.stem
    return system_from_structure(structure, name, mapping)


def system_from_structure(structure: PDBStructure, name: str, mapping: str) -> CGSystem:
    """Map a parsed structure and derive its topology and native contacts.

    ``metadata`` holds ``source`` (where the structure came from), ``chain_ids``
    (identifier of each chain), ``missing_heavy_atoms`` (residue label -> names of
    side-chain atoms absent from the file, which the native contacts therefore miss) and
    ``modified_residues`` (residue label -> the standard residue it is read as, and why).
    """
    beads = map_structure(structure, mapping)
    chain_index = torch.from_numpy(structure.chain_index)
    bonds = build_bonds(beads, chain_index)
    contacts, contact_distances = native_contacts(structure)
    missing = {r.label: r.missing_heavy_atoms for r in structure.residues if r.missing_heavy_atoms}
    modified = {r.label: f"{r.name} ({'its MODRES record' if r.by_modres else 'built-in mapping'})"
                for r in structure.residues if r.name != r.file_name}
    return CGSystem(
        name=name,
        mapping=mapping,
        bead_names=beads.bead_names,
        bead_types=beads.bead_types,
        masses=beads.masses,
        bead_residue=beads.bead_residue,
        residue_names=tuple(r.name for r in structure.residues),
        residue_ids=tuple(r.residue_id for r in structure.residues),
        chain_index=chain_index,
        ca_index=beads.ca_index,
        bonds=bonds,
        angles=build_angles(len(beads.bead_names), bonds),
        dihedrals=build_dihedrals(beads, chain_index),
        native_positions=beads.positions,
        native_contacts=contacts,
        native_contact_distances=contact_distances,
        metadata={
            "source": structure.source,
            "chain_ids": structure.chain_ids,
            "missing_heavy_atoms": missing,
            "modified_residues": modified,
        },
    )
