import pytest

from workbench.system.errors import PDBError, UnknownResidueError
from workbench.system.residues import (
    HEAVY_ATOMS,
    ONE_LETTER,
    TYPE_ORDER,
    cb_type,
    standard_atom_name,
    standard_name,
)


def test_twenty_standard_residues():
    assert len(ONE_LETTER) == 20
    assert sorted(ONE_LETTER.values()) == sorted(TYPE_ORDER)
    assert set(HEAVY_ATOMS) == set(ONE_LETTER)


@pytest.mark.parametrize(
    ("name", "code"), [("ALA", 1), ("CYS", 2), ("GLY", 6), ("HIS", 7), ("PRO", 13), ("TYR", 20)]
)
def test_cb_type_is_position_in_type_order(name, code):
    assert cb_type(name) == code


def test_heavy_atom_counts():
    counts = {name: len(atoms) for name, atoms in HEAVY_ATOMS.items()}
    assert counts["GLY"] == 4
    assert counts["ALA"] == 5
    assert counts["TRP"] == 14
    assert counts["ARG"] == 11
    assert all(atoms[:4] == ("N", "CA", "C", "O") for atoms in HEAVY_ATOMS.values())


@pytest.mark.parametrize(
    ("variant", "standard"),
    [
        ("MSE", "MET"),
        ("NLE", "MET"),
        ("HSD", "HIS"),
        ("HIP", "HIS"),
        ("CYX", "CYS"),
        ("TRP", "TRP"),
    ],
)
def test_variants_map_to_standard(variant, standard):
    assert standard_name(variant, "1", "A") == standard


def test_unknown_residue_message_names_residue_number_and_chain():
    with pytest.raises(UnknownResidueError, match=r"XYZ 52A \(chain B\)") as info:
        standard_name("XYZ", "52A", "B")
    assert isinstance(info.value, PDBError)
    assert isinstance(info.value, ValueError)


def test_atom_renames():
    assert standard_atom_name("MSE", "SE") == "SD"
    assert standard_atom_name("NLE", "CD") == "SD"
    assert standard_atom_name("ILE", "CD") == "CD1"
    assert standard_atom_name("SER", "OT1") == "O"
    assert standard_atom_name("LYS", "CD") == "CD"
