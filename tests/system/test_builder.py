import dataclasses

import pytest
import torch

from workbench.system import (
    CGSystem,
    MissingAtomError,
    UnknownProteinError,
    available_proteins,
    build_system,
)


def test_available_proteins():
    assert available_proteins() == ["cln025", "2jof", "1yrf", "1enh", "2a3d"]


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("CLN025", "cln025"),
        ("5awl", "cln025"),
        ("Chignolin", "cln025"),
        ("trpcage", "2jof"),
        ("homeodomain", "1enh"),
        ("villin", "1yrf"),
        ("ALPHA3D", "2a3d"),
        (" 1ENH ", "1enh"),
    ],
)
def test_aliases(alias, name):
    assert build_system(alias, mapping="ca").name == name


def test_unknown_name_lists_valid_names():
    with pytest.raises(UnknownProteinError, match="cln025, 2jof, 1yrf, 1enh, 2a3d"):
        build_system("ubiquitin")


def test_missing_file(tmp_path):
    for source in (tmp_path / "nope.pdb", str(tmp_path / "nope"), "nope.pdb"):
        with pytest.raises(FileNotFoundError, match="nope"):
            build_system(source)


def test_path_source(pdb):
    path = pdb.write(pdb.peptide(["ALA", "GLY", "SER"]), name="tiny.pdb")
    for source in (path, str(path)):
        system = build_system(source)
        assert system.name == "tiny"
        assert system.n_beads == 14
        assert system.metadata["source"] == str(path)


def test_system_fields_shapes_and_dtypes():
    system = build_system("1enh")
    assert isinstance(system, CGSystem)
    n, n_res = system.n_beads, system.n_residues
    assert (n, n_res) == (269, 54)
    assert system.mapping == "five-bead"
    assert len(system.bead_names) == n
    expected = {
        "bead_types": ((n,), torch.int64),
        "masses": ((n,), torch.float32),
        "bead_residue": ((n,), torch.int64),
        "chain_index": ((n_res,), torch.int64),
        "ca_index": ((n_res,), torch.int64),
        "native_positions": ((n, 3), torch.float32),
    }
    for field, (shape, dtype) in expected.items():
        value = getattr(system, field)
        assert (tuple(value.shape), value.dtype) == (shape, dtype), field
    for field, width in (("bonds", 2), ("angles", 3), ("dihedrals", 4), ("native_contacts", 2)):
        value = getattr(system, field)
        assert value.dtype == torch.int64 and value.shape[1] == width, field
    assert system.native_contact_distances.shape == (system.native_contacts.shape[0],)
    assert system.residue_ids[0] == "3" and system.residue_ids[-1] == "56"
    assert system.residue_names[0] == "ARG"
    assert system.sequence.startswith("RPRTAFSSEQ")
    assert system.metadata["missing_heavy_atoms"] == {}
    moved = system.to("cpu")
    assert all(
        torch.equal(getattr(moved, f.name), getattr(system, f.name))
        for f in dataclasses.fields(system)
        if isinstance(getattr(system, f.name), torch.Tensor)
    )


def test_incomplete_side_chain_recorded(pdb):
    lines = pdb.peptide(["ALA"]) + pdb.residue_lines("LEU", 2, atoms=("N", "CA", "C", "O", "CB"))
    system = build_system(pdb.write(lines))
    assert system.metadata["missing_heavy_atoms"] == {"LEU 2 (chain A)": ("CG", "CD1", "CD2")}


def test_pdb_errors_propagate(pdb):
    lines = pdb.peptide(["ALA"]) + pdb.residue_lines("LEU", 2, atoms=("N", "CA", "C", "O"))
    path = pdb.write(lines)
    with pytest.raises(MissingAtomError):
        build_system(path)
    assert build_system(path, mapping="ca").n_beads == 2
