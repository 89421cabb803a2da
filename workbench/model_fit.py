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


def _per_bead(types: torch.Tensor) -> bool:
    """Whether bead types are one index per bead (a per-bead embedding), not residue types."""
    return torch.equal(types.cpu(), torch.arange(types.numel()))


def made_for(potential: Potential) -> tuple[str, ...] | None:
    """Residue names of the system a potential was made for, where it tells.

    A ``sequence`` in its metadata, else the bundled protein its metadata names (if the
    potential's bead types are that protein's, or one per bead); None for a model that
    records neither.
    """
    metadata = potential.metadata or {}
    if metadata.get("sequence"):
        return tuple(metadata["sequence"])
    protein, mapping = metadata.get("protein"), metadata.get("mapping", "five-bead")
    if protein not in available_proteins():
        return None
    names, types = _bundled(protein, mapping)
    model_types = potential.bead_types
    fits = _per_bead(model_types) or types == tuple(model_types.tolist())
    return names if fits and len(types) == model_types.numel() else None


def _letters(names) -> str:
    return "".join(ONE_LETTER.get(name, "X") for name in names)


def _sequence_difference(sequence: tuple[str, ...], here: tuple[str, ...]) -> str:
    """Two sequences' difference in words."""
    text = f"the model's sequence is {_letters(sequence)}, this system's {_letters(here)}"
    if len(sequence) != len(here):
        return f"{text} ({len(sequence)} residues, not {len(here)})"
    where = [i for i, (a, b) in enumerate(zip(sequence, here, strict=True)) if a != b]
    named = ", ".join(f"residue {i + 1} {sequence[i]} → {here[i]}" for i in where[:5])
    return f"{text} ({named}{', ...' if len(where) > 5 else ''})"


def _bead_difference(types: torch.Tensor, system: CGSystem) -> str:
    """The first bead whose type differs, in words."""
    bead = int(torch.nonzero(types != system.bead_types.cpu())[0])
    residue = int(system.bead_residue[bead])
    return (f"bead {bead} ({system.bead_names[bead]} of {system.residue_names[residue]} "
            f"{residue + 1}) has type {int(system.bead_types[bead])} here, {int(types[bead])} "
            "in the model")


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
        Another mapping, sequence, bead count or bead types; the message names the
        difference.
    """
    mapping = (potential.metadata or {}).get("mapping")
    if mapping is not None and mapping != system.mapping:
        raise ModelMismatchError(f"{source} is a {mapping} model; {system.name} is mapped "
                                 f"{system.mapping}")
    problem = None
    sequence = made_for(potential)
    types = potential.bead_types.cpu()
    if sequence is not None and sequence != tuple(system.residue_names):
        problem = _sequence_difference(sequence, tuple(system.residue_names))
    elif types.numel() != system.n_beads:
        problem = f"the model has {types.numel()} beads, this system {system.n_beads}"
    elif not (_per_bead(types) or torch.equal(types, system.bead_types.cpu())):
        problem = _bead_difference(types, system)
    if problem is not None:
        raise ModelMismatchError(f"{source} was made for another system than {system.name}: "
                                 f"{problem}")
