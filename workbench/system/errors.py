"""Exceptions raised while reading structures and building systems.

Every problem found in a PDB file raises a subclass of :class:`PDBError`, itself a
:class:`ValueError`, so callers may catch one specific problem or all of them.
"""

from __future__ import annotations


class PDBError(ValueError):
    """A PDB file cannot be turned into a coarse-grained system."""


class MalformedRecordError(PDBError):
    """A coordinate record has fields that cannot be parsed (the message gives the line)."""


class NoProteinError(PDBError):
    """The file holds no protein residue (empty, or only waters, ions and ligands)."""


class NonFiniteCoordinateError(PDBError):
    """An atom has a NaN or infinite coordinate."""


class MissingAtomError(PDBError):
    """A residue lacks an atom the mapping needs (a backbone atom, or CB in five-bead)."""


class ChainBreakError(PDBError):
    """Two consecutive residues of one chain are not peptide-bonded (C–N above 2.0 Å)."""


class UnknownResidueError(PDBError):
    """A residue name is neither one of the 20 standard residues nor a mapped variant."""


class UnsupportedFormatError(PDBError):
    """A structure file of another format (mmCIF), which is not read."""


class UnknownProteinError(ValueError):
    """A name is neither a bundled protein nor an existing file."""
