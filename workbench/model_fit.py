"""Whether a potential was made for a system: bead types, sequence, mapping.

A potential's bead types (saved in every model file) encode the residue of each side-chain
bead (`workbench.system.residues.cb_type`), so a model of one protein run on a mutant of
the same length has other bead types at the mutated residue. :func:`check_model_fits`
refuses such a pairing and names the difference: by residue where the model records its
sequence (models trained since sequences are recorded, and the shipped models, whose
``protein`` is a bundled structure), by bead otherwise.

:func:`bundled_match` picks the bundled protein a system is a copy of, by sequence and bead
count (never by file name): the protein whose shipped model a run may take as its default.
"""

from __future__ import annotations

import functools
from importlib import resources

import torch

from workbench.model.potential import Potential
from workbench.system import available_proteins, build_system
from workbench.system.builder import BUNDLED
from workbench.system.cg_system import CGSystem
from workbench.system.pdb import parse_pdb
from workbench.system.residues import ONE_LETTER


class ModelMismatchError(ValueError):
    """A potential made for another system (other sequence, beads or mapping)."""


@functools.cache
def _bundled_sequence(protein: str) -> tuple[str, ...]:
    """Residue names of a bundled protein's structure (read, not mapped)."""
    text = (resources.files("workbench.system") / "data" / BUNDLED[protein]).read_text()
    return tuple(residue.name for residue in parse_pdb(text, source=BUNDLED[protein]).residues)


@functools.cache
def _bundled(protein: str, mapping: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Residue names and bead types of a bundled protein's system."""
    system = build_system(protein, mapping)
    return system.residue_names, tuple(system.bead_types.tolist())


def bundled_match(system: CGSystem) -> str | None:
    """The bundled protein whose structure has the sequence of ``system``, or None (the
    mapping then gives both the same beads)."""
    for protein in available_proteins():
        if _bundled_sequence(protein) == tuple(system.residue_names):
            return protein
    return None


def made_for(potential: Potential) -> tuple[str, ...] | None:
    """Residue names of the system a potential was made for, where it tells.

    A ``sequence`` in its metadata, else the bundled protein its metadata names if the
    potential's bead types are that protein's; None for a model that records neither.
    """
    metadata = potential.metadata or {}
    if metadata.get("sequence"):
        return tuple(metadata["sequence"])
    protein, mapping = metadata.get("protein"), metadata.get("mapping", "five-bead")
    if protein not in available_proteins():
        return None
    names, types = _bundled(protein, mapping)
    return names if types == tuple(potential.bead_types.tolist()) else None


def _letters(names) -> str:
    return "".join(ONE_LETTER.get(name, "X") for name in names)


def _difference(potential: Potential, system: CGSystem) -> str:
    """What differs between the model's system and ``system``, in words."""
    sequence = made_for(potential)
    here = system.residue_names
    if sequence is not None and tuple(sequence) != tuple(here):
        where = [i for i, (a, b) in enumerate(zip(sequence, here, strict=False)) if a != b]
        text = f"the model's sequence is {_letters(sequence)}, this system's {_letters(here)}"
        if len(sequence) != len(here):
            return f"{text} ({len(sequence)} residues, not {len(here)})"
        named = ", ".join(f"residue {i + 1} {sequence[i]} → {here[i]}" for i in where[:5])
        return f"{text} ({named}{', ...' if len(where) > 5 else ''})"
    model_types = potential.bead_types.cpu()
    if model_types.numel() != system.n_beads:
        return f"the model has {model_types.numel()} beads, this system {system.n_beads}"
    bead = int(torch.nonzero(model_types != system.bead_types.cpu())[0])
    residue = int(system.bead_residue[bead])
    return (f"bead {bead} ({system.bead_names[bead]} of {here[residue]} {residue + 1}) has "
            f"type {int(system.bead_types[bead])} here, {int(model_types[bead])} in the model")


def check_model_fits(potential: Potential, system: CGSystem, source: str) -> None:
    """Refuse a potential made for another system than ``system``.

    Parameters
    ----------
    potential : Potential
    system : CGSystem
    source : str
        Where the potential came from (a file), for the message.

    Raises
    ------
    ModelMismatchError
        Another mapping, bead count or bead types; the message names the difference.
    """
    mapping = (potential.metadata or {}).get("mapping")
    if mapping is not None and mapping != system.mapping:
        raise ModelMismatchError(f"{source} is a {mapping} model; {system.name} is mapped "
                                 f"{system.mapping}")
    types = potential.bead_types.cpu()
    if types.shape == system.bead_types.shape and torch.equal(types, system.bead_types.cpu()):
        return
    raise ModelMismatchError(f"{source} was made for another system than {system.name}: "
                             f"{_difference(potential, system)}")
