"""A small, strict reader for protein PDB files (numpy only).

What it keeps: heavy atoms of amino-acid residues from ATOM records, and HETATM
records whose residue name is a standard residue or a mapped variant (MSE, NLE, ...).
What it drops: hydrogens and deuterium, waters, ions, ligands, alternate locations
other than the first seen for each atom, every model after the first, and all
other record types (ANISOU, CONECT, HELIX, ...). A residue named by a MODRES record is
read as the standard residue the record gives (its HETATM records kept), before any
built-in mapping of its name. mmCIF files are not read (they are refused as such).

Chains are split where the chain identifier changes and after each TER record.
Problems raise a subclass of :class:`~workbench.system.errors.PDBError`.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np

from workbench.system.errors import (
    ChainBreakError,
    MalformedRecordError,
    MissingAtomError,
    NonFiniteCoordinateError,
    NoProteinError,
    UnknownResidueError,
    UnsupportedFormatError,
)
from workbench.system.residues import (
    BACKBONE,
    HEAVY_ATOMS,
    ONE_LETTER,
    describe_residue,
    is_amino_acid,
    standard_atom_name,
    standard_name,
)

#: File suffixes of mmCIF structures (refused: not read).
MMCIF_SUFFIXES = (".cif", ".mmcif", ".bcif")

#: Largest C(i)–N(i+1) distance, Å, still read as a peptide bond.
PEPTIDE_BOND_MAX = 2.0

#: Residue names dropped even from ATOM records: waters and common ions.
SOLVENT_NAMES = frozenset(
    {"HOH", "WAT", "DOD", "H2O", "TIP", "TIP3", "TIP4", "SPC", "SOL"}
    | {"NA", "K", "CL", "MG", "CA", "ZN", "MN", "FE", "CU", "CO", "NI", "CD", "IOD", "BR"}
    | {"SOD", "POT", "CLA", "CAL", "CES", "LIT", "RUB", "NA+", "CL-", "K+"}
)

_CHARGE = re.compile(r"^(?:(\d)([+-])|([+-])(\d))$")


@dataclass(frozen=True)
class PDBResidue:
    """One amino-acid residue as read from a PDB file.

    Attributes
    ----------
    name : str
        Standard three-letter name (after mapping MSE, NLE, HSD, ... to standard).
    file_name : str
        Residue name as written in the file.
    number : int
        Residue sequence number.
    insertion_code : str
        Insertion code, ``""`` if blank.
    chain_id : str
        Chain identifier, ``""`` if blank.
    chain_index : int
        0-based index of the chain (a new chain starts at a chain-id change or a TER).
    atom_names : tuple of str, length a
        Heavy-atom names in file order, standardised (MSE SE -> SD, OT1 -> O, ...).
    elements : tuple of str, length a
        Element symbols (from columns 77-78, else from the atom name).
    charges : tuple of int, length a
        Formal charges from columns 79-80 (0 where blank).
    coordinates : numpy.ndarray, shape (a, 3), float64
        Atom coordinates, Å.
    by_modres : bool
        ``name`` comes from the file's MODRES record of this residue.
    """

    name: str
    file_name: str
    number: int
    insertion_code: str
    chain_id: str
    chain_index: int
    atom_names: tuple[str, ...]
    elements: tuple[str, ...]
    charges: tuple[int, ...]
    coordinates: np.ndarray
    by_modres: bool = False

    @property
    def residue_id(self) -> str:
        """Residue number plus insertion code, e.g. ``"52"`` or ``"52A"``."""
        return f"{self.number}{self.insertion_code}"

    @property
    def label(self) -> str:
        """Label for messages, e.g. ``"TYR 1 (chain A)"``."""
        return describe_residue(self.file_name, self.residue_id, self.chain_id)

    @property
    def missing_heavy_atoms(self) -> tuple[str, ...]:
        """Heavy atoms of the standard residue that the file does not give."""
        return tuple(a for a in HEAVY_ATOMS[self.name] if a not in self.atom_names)

    def position(self, atom_name: str) -> np.ndarray:
        """Coordinates of one atom, shape (3,), float64.

        Raises
        ------
        MissingAtomError
            If the residue has no atom of that name.
        """
        try:
            return self.coordinates[self.atom_names.index(atom_name)]
        except ValueError:
            raise MissingAtomError(f"residue {self.label} has no atom {atom_name}") from None


@dataclass(frozen=True)
class PDBStructure:
    """The protein residues of a PDB file, in file order.

    Attributes
    ----------
    residues : tuple of PDBResidue, length n_res
    source : str
        Where the text came from (a path, or ``"<string>"``).
    """

    residues: tuple[PDBResidue, ...]
    source: str

    @property
    def n_residues(self) -> int:
        """Number of residues."""
        return len(self.residues)

    @property
    def sequence(self) -> str:
        """One-letter sequence of all chains, concatenated."""
        return "".join(ONE_LETTER[r.name] for r in self.residues)

    @property
    def chain_index(self) -> np.ndarray:
        """0-based chain of each residue, shape (n_res,), int64."""
        return np.array([r.chain_index for r in self.residues], dtype=np.int64)

    @property
    def chain_ids(self) -> tuple[str, ...]:
        """Chain identifier of each chain, in order (``""`` for a blank one)."""
        ids: dict[int, str] = {}
        for r in self.residues:
            ids.setdefault(r.chain_index, r.chain_id)
        return tuple(ids.values())

    def heavy_atoms(self) -> tuple[np.ndarray, np.ndarray]:
        """All heavy atoms, residue by residue.

        Returns
        -------
        coordinates : numpy.ndarray, shape (A, 3), float64
        residue_index : numpy.ndarray, shape (A,), int64
            0-based residue of each atom (non-decreasing).
        """
        coords = np.concatenate([r.coordinates for r in self.residues], axis=0)
        counts = [len(r.atom_names) for r in self.residues]
        index = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        return coords, index


class _ResidueBuilder:
    """Collects the atoms of one residue while the file is read."""

    def __init__(self, key: tuple[int, str, int, str], file_name: str, where: str,
                 modres: str | None = None):
        self.key = key
        self.chain_index, self.chain_id, self.number, self.icode = key
        self.file_name = file_name
        self.by_modres = modres is not None
        try:
            self.name = modres or standard_name(file_name, f"{self.number}{self.icode.strip()}",
                                                key[1])
        except UnknownResidueError as err:
            raise UnknownResidueError(f"{where}: {err}") from None
        self.where = where
        self.atoms: dict[str, tuple[str, int, tuple[float, float, float]]] = {}

    def add(
        self,
        file_name: str,
        atom_name: str,
        altloc: str,
        element: str,
        charge: int,
        xyz: tuple[float, float, float],
    ) -> None:
        # Keep the first altloc seen for each atom; a different residue name under an
        # altloc (microheterogeneity) belongs to a later conformer and is skipped too.
        if altloc != " " and file_name != self.file_name:
            return
        if not self.by_modres:
            atom_name = standard_atom_name(self.file_name, atom_name)
        self.atoms.setdefault(atom_name, (element, charge, xyz))

    def build(self) -> PDBResidue:
        residue = PDBResidue(
            name=self.name,
            file_name=self.file_name,
            number=self.number,
            insertion_code=self.icode.strip(),
            chain_id=self.chain_id.strip(),
            chain_index=self.chain_index,
            atom_names=tuple(self.atoms),
            elements=tuple(v[0] for v in self.atoms.values()),
            charges=tuple(v[1] for v in self.atoms.values()),
            coordinates=np.array([v[2] for v in self.atoms.values()], dtype=np.float64),
            by_modres=self.by_modres,
        )
        missing = [a for a in BACKBONE if a not in residue.atom_names]
        if missing:
            raise MissingAtomError(
                f"{self.where}: residue {residue.label} is missing backbone "
                f"atom{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
            )
        return residue


def read_pdb(path: str | os.PathLike) -> PDBStructure:
    """Read a PDB file; see :func:`parse_pdb`.

    Raises
    ------
    UnsupportedFormatError
        An mmCIF file (by its ``data_`` block or its suffix).
    """
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    if text.lstrip().startswith("data_") or Path(path).suffix.lower() in MMCIF_SUFFIXES:
        raise UnsupportedFormatError(
            f"{path} is an mmCIF file, which is not read: give the structure as a PDB file "
            "(convert it with, e.g., gemmi convert, PyMOL or ChimeraX)"
        )
    return parse_pdb(text, source=str(path))


def modified_residues(text: str) -> dict[tuple[str, int, str], str]:
    """The MODRES records of a PDB file: ``(chain id, number, insertion code)`` -> the
    standard residue the modified one stands for (records naming no standard residue are
    left out)."""
    found = {}
    for raw in text.splitlines():
        if raw.startswith("MODRES"):
            line = raw.ljust(80)
            standard = line[24:27].strip()
            if standard in ONE_LETTER and line[18:22].strip().lstrip("-").isdigit():
                found[line[16], int(line[18:22]), line[22]] = standard
    return found


def parse_pdb(text: str, source: str = "<string>") -> PDBStructure:
    """Parse the text of a PDB file into its protein residues.

    Parameters
    ----------
    text : str
        Content of a PDB file.
    source : str
        Name used in error messages and kept in the result.

    Returns
    -------
    PDBStructure

    Raises
    ------
    MalformedRecordError
        A coordinate, residue-number or charge field cannot be parsed.
    NonFiniteCoordinateError
        A coordinate is NaN or infinite.
    UnknownResidueError
        An ATOM record names a residue that is neither standard nor a mapped variant.
    MissingAtomError
        A residue lacks N, CA, C or O.
    ChainBreakError
        Consecutive residues of one chain are more than ``PEPTIDE_BOND_MAX`` apart (C–N).
    NoProteinError
        No protein residue was found.
    """
    modres = modified_residues(text)
    residues: list[_ResidueBuilder] = []
    seen_keys: set[tuple] = set()
    chain_index = -1
    ter_seen = False
    n_models = 0
    for line_no, raw in enumerate(text.splitlines(), start=1):
        record = raw[:6].strip()
        if record == "MODEL":
            n_models += 1
            if n_models > 1:
                break
            continue
        if record in ("ENDMDL", "END"):
            break
        if record == "TER":
            ter_seen = True
            continue
        if record not in ("ATOM", "HETATM"):
            continue
        line = raw.ljust(80)
        file_name = line[17:21].strip()
        ligand = record == "HETATM" and not is_amino_acid(file_name)
        if file_name in SOLVENT_NAMES or (ligand and not modres):
            continue
        where = f"{source}, line {line_no}"
        number = _parse_int(line[22:26], "residue number", where)
        icode, chain_id = line[26], line[21]
        standard = modres.get((chain_id, number, icode))
        if ligand and standard is None:
            continue
        xyz = _parse_coordinates(line, where)
        atom_name = line[12:16].strip()
        element = _element(line[76:78], atom_name)
        if element in ("H", "D"):
            continue
        charge = _parse_charge(line[78:80], where)

        current = residues[-1] if residues else None
        if current is None or ter_seen or chain_id != current.chain_id:
            chain_index += 1
            ter_seen = False
        key = (chain_index, chain_id, number, icode)
        if current is None or key != current.key:
            if key in seen_keys:
                raise MalformedRecordError(
                    f"{where}: residue "
                    f"{describe_residue(file_name, f'{number}{icode.strip()}', chain_id)} "
                    "appears again after other residues"
                )
            seen_keys.add(key)
            current = _ResidueBuilder(key, file_name, where, standard)
            residues.append(current)
        current.add(file_name, atom_name, line[16], element, charge, xyz)

    if not residues:
        raise NoProteinError(f"{source}: no protein residues (ATOM/HETATM of amino acids) found")
    structure = PDBStructure(residues=tuple(r.build() for r in residues), source=source)
    _check_chain_continuity(structure)
    return structure


def _parse_int(field: str, what: str, where: str) -> int:
    try:
        return int(field)
    except ValueError:
        raise MalformedRecordError(f"{where}: bad {what} {field!r}") from None


def _parse_coordinates(line: str, where: str) -> tuple[float, float, float]:
    fields = (line[30:38], line[38:46], line[46:54])
    try:
        xyz = tuple(float(f) for f in fields)
    except ValueError:
        raise MalformedRecordError(
            f"{where}: malformed coordinates {'|'.join(fields)!r} (columns 31-54)"
        ) from None
    if not all(math.isfinite(v) for v in xyz):
        raise NonFiniteCoordinateError(
            f"{where}: non-finite coordinate in {line[:27].rstrip()!r}: {xyz}"
        )
    return xyz


def _parse_charge(field: str, where: str) -> int:
    field = field.strip()
    if not field:
        return 0
    match = _CHARGE.match(field)
    if match is None:
        raise MalformedRecordError(f"{where}: bad formal charge {field!r} (columns 79-80)")
    magnitude, sign, sign2, magnitude2 = match.groups()
    value = int(magnitude or magnitude2)
    return -value if (sign or sign2) == "-" else value


def _element(field: str, atom_name: str) -> str:
    """Element from columns 77-78, or from the atom name where those are blank."""
    element = field.strip().upper()
    if element:
        return element
    name = atom_name.lstrip("0123456789").upper()
    if name.startswith("SE"):
        return "SE"
    return name[:1]


def _check_chain_continuity(structure: PDBStructure) -> None:
    for prev, nxt in pairwise(structure.residues):
        if prev.chain_index != nxt.chain_index:
            continue
        gap = float(np.linalg.norm(nxt.position("N") - prev.position("C")))
        if gap > PEPTIDE_BOND_MAX:
            raise ChainBreakError(
                f"{structure.source}: chain break between residues {prev.label} and "
                f"{nxt.label}: C–N distance {gap:.2f} Å > {PEPTIDE_BOND_MAX} Å"
            )
