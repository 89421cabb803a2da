"""Helpers that write small PDB snippets for the system tests."""

from __future__ import annotations

from pathlib import Path

import pytest

# Offsets of a made-up, roughly planar residue (Å); consecutive residues sit 3.8 Å
# apart along x, so C(i)–N(i+1) is 1.3 Å.
_TEMPLATE = {
    "N": (0.0, 0.0, 0.0),
    "CA": (1.2, 0.8, 0.0),
    "CB": (1.2, 1.5, 1.2),
    "CG": (1.2, 2.9, 1.4),
    "C": (2.5, 0.0, 0.0),
    "O": (2.5, -1.2, 0.0),
    "OXT": (3.4, 0.6, 0.0),
}


def atom_line(
    name: str,
    resname: str,
    resseq: int,
    xyz: tuple[float, float, float],
    *,
    chain: str = "A",
    record: str = "ATOM",
    altloc: str = " ",
    icode: str = " ",
    element: str | None = None,
    charge: str = "",
    serial: int = 1,
) -> str:
    """One ATOM/HETATM record in fixed PDB columns."""
    element = name[0] if element is None else element
    field = name if len(name) == 4 else f" {name:<3}"
    x, y, z = xyz
    return (
        f"{record:<6}{serial:>5} {field}{altloc}{resname:>3} {chain}{resseq:>4}{icode}   "
        f"{x:8.3f}{y:8.3f}{z:8.3f}{1.0:6.2f}{10.0:6.2f}          {element:>2}{charge:<2}"
    )


def residue_lines(
    resname: str,
    resseq: int,
    *,
    position: int | None = None,
    atoms: tuple[str, ...] = ("N", "CA", "C", "O", "CB"),
    shift: tuple[float, float, float] = (0.0, 0.0, 0.0),
    **kwargs,
) -> list[str]:
    """Records of one residue at slot ``position`` (default ``resseq``) of a straight chain."""
    slot = resseq if position is None else position
    lines = []
    for name in atoms:
        dx, dy, dz = _TEMPLATE[name]
        xyz = (3.8 * slot + dx + shift[0], dy + shift[1], dz + shift[2])
        lines.append(atom_line(name, resname, resseq, xyz, **kwargs))
    return lines


def peptide(names: list[str], **kwargs) -> list[str]:
    """Records of a chain of residues numbered from 1."""
    lines = []
    for i, name in enumerate(names, start=1):
        atoms = ("N", "CA", "C", "O") if name == "GLY" else ("N", "CA", "C", "O", "CB")
        lines += residue_lines(name, i, atoms=atoms, **kwargs)
    return lines


class Snippets:
    """Writes PDB text into a test's temporary directory."""

    atom_line = staticmethod(atom_line)
    residue_lines = staticmethod(residue_lines)
    peptide = staticmethod(peptide)

    def __init__(self, directory: Path):
        self.directory = directory
        self.count = 0

    def write(self, lines: list[str], name: str | None = None) -> Path:
        """Write ``lines`` (plus END) to a fresh file and return its path."""
        self.count += 1
        path = self.directory / (name or f"snippet{self.count}.pdb")
        path.write_text("\n".join([*lines, "END"]) + "\n")
        return path


@pytest.fixture
def pdb(tmp_path: Path) -> Snippets:
    """Factory for small PDB files (see :class:`Snippets`)."""
    return Snippets(tmp_path)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Directory of the bundled PDB files."""
    return Path(__file__).resolve().parents[2] / "workbench" / "system" / "data"
