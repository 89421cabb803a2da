import pytest
import torch

from workbench.system import build_system
from workbench.system.errors import MissingAtomError
from workbench.system.mapping import map_structure
from workbench.system.pdb import read_pdb

# docs/mlcg-format.md §9.3: CLN025 (YYDPETGTWY) in the five-bead mapping.
CLN025_TYPES = [21, 22, 20, 23, 24, 21, 22, 20, 23, 24, 21, 22, 3, 23, 24, 21, 22, 13, 23, 24,
                21, 22, 4, 23, 24, 21, 22, 17, 23, 24, 21, 6, 23, 24, 21, 22, 17, 23, 24,
                21, 22, 19, 23, 24, 21, 22, 20, 23, 24]  # fmt: skip
# docs/mlcg-format.md §9.1: the same protein in the CA mapping.
CLN025_CA_TYPES = [20, 20, 3, 13, 4, 17, 6, 17, 19, 20]


def test_cln025_five_bead_types_and_masses():
    system = build_system("cln025")
    assert system.n_beads == 49
    assert system.bead_types.tolist() == CLN025_TYPES
    assert system.bead_types.dtype == torch.int64
    mass_of = {21: 14.0, 22: 12.0, 23: 12.0, 24: 16.0}
    expected = [mass_of.get(t, 12.0) for t in CLN025_TYPES]
    assert system.masses.tolist() == expected
    assert system.masses.dtype == torch.float32
    assert system.bead_names[:5] == ("N", "CA", "CB", "C", "O")
    assert system.bead_names[30:34] == ("N", "CA", "C", "O")  # Gly7


def test_five_bead_counts():
    assert build_system("1enh").n_beads == 269
    assert build_system("2jof").n_beads == 5 * 20 - 3  # three glycines


def test_bead_residue_and_ca_index():
    system = build_system("cln025")
    assert system.bead_residue.tolist() == sum(([r] * (4 if r == 6 else 5) for r in range(10)), [])
    assert [system.bead_names[i] for i in system.ca_index.tolist()] == ["CA"] * 10
    assert system.bead_residue[system.ca_index].tolist() == list(range(10))


def test_native_positions_are_the_atoms(data_dir):
    system = build_system("cln025")
    structure = read_pdb(data_dir / "5awl.pdb")
    for bead, (name, res) in enumerate(
        zip(system.bead_names, system.bead_residue.tolist(), strict=True)
    ):
        expected = torch.tensor(structure.residues[res].position(name), dtype=torch.float32)
        assert torch.equal(system.native_positions[bead], expected)
    assert system.native_positions.dtype == torch.float32


@pytest.mark.parametrize("name", ["cln025", "2jof", "1yrf", "1enh", "2a3d"])
def test_ca_mapping_one_bead_per_residue(name):
    system = build_system(name, mapping="ca")
    assert system.n_beads == system.n_residues
    assert set(system.bead_names) == {"CA"}
    assert system.ca_index.tolist() == list(range(system.n_residues))
    assert torch.all(system.masses == 12.0)
    five = build_system(name)
    assert torch.equal(system.native_positions, five.native_positions[five.ca_index])


def test_ca_mapping_types():
    assert build_system("cln025", mapping="ca").bead_types.tolist() == CLN025_CA_TYPES


def test_missing_cb_refused_by_five_bead_only(pdb):
    lines = pdb.peptide(["ALA"]) + pdb.residue_lines("LEU", 2, atoms=("N", "CA", "C", "O"))
    structure = read_pdb(pdb.write(lines))
    with pytest.raises(MissingAtomError, match=r"LEU 2 \(chain A\).*CB"):
        map_structure(structure, "five-bead")
    assert map_structure(structure, "ca").bead_types.tolist() == [1, 10]


def test_unknown_mapping(data_dir):
    structure = read_pdb(data_dir / "5awl.pdb")
    with pytest.raises(ValueError, match="five-bead"):
        map_structure(structure, "martini")
