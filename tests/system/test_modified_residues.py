"""MODRES records name what a modified residue stands for; mmCIF files are refused as
such; what was mapped and what is missing is told to the user."""

from __future__ import annotations

from importlib import resources

import pytest

from workbench.runner import structure_notices
from workbench.system import build_system
from workbench.system.errors import UnsupportedFormatError
from workbench.system.pdb import parse_pdb, read_pdb


def cln025_text() -> str:
    return (resources.files("workbench.system") / "data" / "5awl.pdb").read_text()


def with_norleucine(modres: bool) -> str:
    """CLN025 with GLU 5 written as HETATM norleucine (its side chain: CB CG CD CE)."""
    names = {"CG": "CG", "CD": "CD", "OE1": "CE"}
    lines = []
    for line in cln025_text().splitlines():
        if line.startswith("ATOM") and line[17:20] == "GLU":
            atom = line[12:16].strip()
            if atom in names:
                line = line[:12] + f" {names[atom]:<3}" + line[16:]
            elif atom not in ("N", "CA", "C", "O", "CB"):
                continue
            line = "HETATM" + line[6:17] + "NLE" + line[20:]
        lines.append(line)
    chain = next(line[21] for line in lines if line.startswith("ATOM"))
    record = f"MODRES 5AWL NLE {chain}    5  LEU  NORLEUCINE"
    return "\n".join(([record] if modres else []) + lines) + "\n"


def test_modres_maps_a_modified_residue_and_says_so(tmp_path):
    path = tmp_path / "nle.pdb"
    path.write_text(with_norleucine(modres=True))
    system = build_system(path)
    assert system.residue_names[4] == "LEU"
    [notice] = [n for n in structure_notices(system) if n.startswith("Residues read")]
    assert "NLE 5" in notice and "as LEU (its MODRES record)" in notice


def test_without_modres_the_built_in_mapping_is_used_and_told(tmp_path):
    path = tmp_path / "nle.pdb"
    path.write_text(with_norleucine(modres=False))
    system = build_system(path)
    assert system.residue_names[4] == "MET"
    assert any("as MET (built-in mapping)" in n for n in structure_notices(system))


def test_missing_side_chains_are_reported(tmp_path):
    lines = [line for line in cln025_text().splitlines()
             if not (line.startswith("ATOM") and line[17:20] == "TRP" and line[12:16].strip()
                     in ("CZ2", "CH2"))]
    path = tmp_path / "cut.pdb"
    path.write_text("\n".join(lines) + "\n")
    notices = structure_notices(build_system(path))
    assert any(n.startswith("Side-chain atoms missing") and "TRP 9" in n and "CZ2, CH2" in n
               for n in notices)


@pytest.mark.parametrize(("name", "text"), [("x.cif", "ATOM"), ("x.pdb", "data_5AWL\n#\n")])
def test_mmcif_files_are_refused_as_such(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UnsupportedFormatError, match="is an mmCIF file, which is not read"):
        read_pdb(path)


def test_the_bundled_structures_read_as_before():
    assert len(parse_pdb(cln025_text()).residues) == 10
