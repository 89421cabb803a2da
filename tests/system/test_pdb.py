import numpy as np
import pytest

from workbench.system.errors import (
    ChainBreakError,
    MalformedRecordError,
    MissingAtomError,
    NonFiniteCoordinateError,
    NoProteinError,
    PDBError,
    UnknownResidueError,
)
from workbench.system.pdb import parse_pdb, read_pdb

# SOURCES.md: residue counts and sequences (1YRF is the N68H variant: H at position 27).
SEQUENCES = {
    "5awl": "YYDPETGTWY",
    "2jof": "DAYAQWLKDGGPSSGRPPPS",
    "1enh": "RPRTAFSSEQLARLKREFNENRYLTERRRQQLSSELGLNEAQIKIWFQNKRAKI",
    "1yrf": "LSDEDFKAVFGMTRSAFANLPLWKQQHLKKEKGLF",
    "2a3d": "MGSWAEFKQRLAAIKTRLQALGGSEAELAAFEKEIAAFESELQAYKGKGNPEVEALRKEAAAIRDELQAYRHN",
}
# Heavy atoms after dropping hydrogens, waters, ligands and altloc B (SOURCES.md counts).
HEAVY_ATOM_COUNTS = {"5awl": 93, "2jof": 284 - 136, "1enh": 466, "2a3d": 1140 - 568}


@pytest.mark.parametrize("code", sorted(SEQUENCES))
def test_bundled_sequences(data_dir, code):
    structure = read_pdb(data_dir / f"{code}.pdb")
    assert structure.sequence == SEQUENCES[code]
    assert structure.n_residues == len(SEQUENCES[code])
    assert structure.chain_ids == ("A",)
    assert all(r.missing_heavy_atoms == () for r in structure.residues)
    assert all(el != "H" for r in structure.residues for el in r.elements)
    if code in HEAVY_ATOM_COUNTS:
        assert structure.heavy_atoms()[0].shape == (HEAVY_ATOM_COUNTS[code], 3)


def test_bundled_details(data_dir):
    villin = read_pdb(data_dir / "1yrf.pdb")
    assert villin.sequence[26] == "H"
    assert villin.residues[0].residue_id == "42" and villin.residues[-1].residue_id == "76"
    glu45 = villin.residues[3]
    assert glu45.residue_id == "45" and glu45.name == "GLU"
    # altloc A (occupancy 0.32) is the first one in the file and is kept
    np.testing.assert_allclose(glu45.position("CB"), [1.251, 9.378, 3.099])
    assert len(glu45.atom_names) == len(set(glu45.atom_names)) == 9
    cln = read_pdb(data_dir / "5awl.pdb")
    last = cln.residues[-1]
    assert last.atom_names[-1] == "OXT" and last.charges[-1] == -1
    asp3 = cln.residues[2]
    assert asp3.charges[asp3.atom_names.index("OD2")] == -1
    assert sum(c != 0 for r in cln.residues for c in r.charges) == 3
    homeo = read_pdb(data_dir / "1enh.pdb")
    assert homeo.residues[0].residue_id == "3" and "OXT" not in homeo.residues[-1].atom_names


def test_minimal_file_round_trip(pdb):
    structure = read_pdb(pdb.write(pdb.peptide(["ALA", "GLY", "SER"])))
    assert structure.sequence == "AGS"
    assert structure.residues[1].atom_names == ("N", "CA", "C", "O")
    assert structure.residues[0].coordinates.dtype == np.float64
    assert structure.residues[0].elements == ("N", "C", "C", "O", "C")
    coords, index = structure.heavy_atoms()
    assert coords.shape == (14, 3) and index.tolist() == [0] * 5 + [1] * 4 + [2] * 5


# --- bad inputs: each gets its own exception ---------------------------------------


def test_malformed_coordinates_name_the_line(pdb):
    lines = pdb.peptide(["ALA", "ALA"])
    lines[2] = lines[2][:30] + "  12.x45" + lines[2][38:]
    with pytest.raises(MalformedRecordError, match="line 3"):
        read_pdb(pdb.write(lines))


def test_truncated_record_is_malformed(pdb):
    lines = pdb.peptide(["ALA"])
    lines[1] = lines[1][:40]
    with pytest.raises(MalformedRecordError, match="line 2"):
        read_pdb(pdb.write(lines))


def test_malformed_residue_number(pdb):
    lines = pdb.peptide(["ALA"])
    lines[0] = lines[0][:22] + "  x1" + lines[0][26:]
    with pytest.raises(MalformedRecordError, match="residue number"):
        read_pdb(pdb.write(lines))


def test_malformed_charge(pdb):
    lines = pdb.peptide(["ALA"])
    lines[0] = lines[0][:78] + "?!"
    with pytest.raises(MalformedRecordError, match="charge"):
        read_pdb(pdb.write(lines))


def test_missing_backbone_atom_names_residue_and_atom(pdb):
    lines = pdb.peptide(["ALA"])
    lines += pdb.residue_lines("SER", 2, atoms=("N", "CA", "C", "CB"))
    lines += pdb.residue_lines("ALA", 3)
    with pytest.raises(MissingAtomError, match=r"SER 2 \(chain A\).* O$"):
        read_pdb(pdb.write(lines))


def test_terminal_oxt_without_problem_and_charmm_names(pdb):
    lines = pdb.peptide(["ALA"])
    lines += pdb.residue_lines("GLY", 2, atoms=("N", "CA", "C", "O", "OXT"))
    assert read_pdb(pdb.write(lines)).residues[-1].atom_names[-1] == "OXT"
    charmm = pdb.peptide(["ALA"])
    charmm += pdb.residue_lines("GLY", 2, atoms=("N", "CA", "C"))
    charmm.append(pdb.atom_line("OT1", "GLY", 2, (10.1, -1.2, 0.0)))
    charmm.append(pdb.atom_line("OT2", "GLY", 2, (11.0, 0.6, 0.0)))
    assert read_pdb(pdb.write(charmm)).residues[-1].atom_names == ("N", "CA", "C", "O", "OXT")


def test_unknown_residue_names_residue_and_number(pdb):
    lines = pdb.peptide(["ALA"]) + pdb.residue_lines("XYZ", 7, position=2, icode="B")
    with pytest.raises(UnknownResidueError, match=r"XYZ 7B \(chain A\)"):
        read_pdb(pdb.write(lines))


def test_nan_coordinates(pdb):
    lines = pdb.peptide(["ALA", "ALA"])
    lines[6] = lines[6][:38] + "     nan" + lines[6][46:]
    with pytest.raises(NonFiniteCoordinateError, match="line 7"):
        read_pdb(pdb.write(lines))


def test_chain_break_names_both_residues(pdb):
    lines = pdb.residue_lines("ALA", 1) + pdb.residue_lines("LEU", 2, shift=(0.0, 3.0, 0.0))
    with pytest.raises(ChainBreakError, match=r"ALA 1 \(chain A\) and LEU 2 \(chain A\)"):
        read_pdb(pdb.write(lines))


@pytest.mark.parametrize(
    "lines",
    [
        [],
        ["REMARK nothing here"],
        [
            "HETATM    1  O   HOH A 101      1.000   2.000   3.000  1.00 10.00           O",
            "HETATM    2 NA    NA A 102      4.000   2.000   3.000  1.00 10.00          NA",
        ],
    ],
)
def test_no_protein(pdb, lines):
    with pytest.raises(NoProteinError):
        read_pdb(pdb.write(lines))


def test_errors_are_value_errors(pdb):
    with pytest.raises(ValueError):
        parse_pdb("")
    assert issubclass(ChainBreakError, PDBError)


def test_residue_repeated_after_others_is_malformed(pdb):
    lines = pdb.peptide(["ALA", "ALA"]) + pdb.residue_lines("ALA", 1, position=3)
    with pytest.raises(MalformedRecordError, match="appears again"):
        read_pdb(pdb.write(lines))


# --- what is kept and what is dropped ----------------------------------------------


@pytest.mark.parametrize(("first", "second"), [("A", "B"), ("B", "A"), (" ", "B")])
def test_first_alternate_location_is_kept(pdb, first, second):
    lines = pdb.residue_lines("SER", 1, atoms=("N", "CA", "C", "O"))
    lines.append(pdb.atom_line("CB", "SER", 1, (1.0, 2.0, 3.0), altloc=first))
    lines.append(pdb.atom_line("CB", "SER", 1, (7.0, 8.0, 9.0), altloc=second))
    residue = read_pdb(pdb.write(lines)).residues[0]
    assert residue.atom_names.count("CB") == 1
    np.testing.assert_allclose(residue.position("CB"), [1.0, 2.0, 3.0])


def test_microheterogeneity_keeps_first_residue_name(pdb):
    lines = pdb.residue_lines("SER", 1, atoms=("N", "CA", "C", "O"))
    lines.append(pdb.atom_line("CB", "SER", 1, (1.0, 2.0, 3.0), altloc="A"))
    lines.append(pdb.atom_line("OG", "SER", 1, (1.0, 2.0, 4.0), altloc="A"))
    lines.append(pdb.atom_line("CB", "CYS", 1, (1.5, 2.0, 3.0), altloc="B"))
    lines.append(pdb.atom_line("SG", "CYS", 1, (1.5, 2.0, 4.5), altloc="B"))
    residue = read_pdb(pdb.write(lines)).residues[0]
    assert residue.name == "SER" and residue.atom_names == ("N", "CA", "C", "O", "CB", "OG")


def test_hydrogens_waters_ions_ligands_dropped(pdb):
    lines = pdb.peptide(["ALA", "ALA"])
    h = [
        pdb.atom_line("H", "ALA", 2, (3.8, -1.0, 0.0), element="H"),
        pdb.atom_line("HA", "ALA", 2, (5.0, 1.5, 0.0), element=" "),
        pdb.atom_line("1HB", "ALA", 2, (5.0, 2.0, 1.5), element=" "),
        pdb.atom_line("HB11", "ALA", 2, (5.0, 2.5, 1.5), element=" "),
        pdb.atom_line("D", "ALA", 2, (3.8, -1.1, 0.0), element="D"),
    ]
    lines[5:5] = h  # inside residue 2
    lines += [
        pdb.atom_line("O", "HOH", 101, (20.0, 0.0, 0.0), record="HETATM"),
        pdb.atom_line("O", "WAT", 102, (21.0, 0.0, 0.0)),
        pdb.atom_line("OH2", "TIP3", 103, (22.0, 0.0, 0.0)),
        pdb.atom_line("NA", "NA", 104, (23.0, 0.0, 0.0), record="HETATM", element="NA"),
        pdb.atom_line("CL", "CL", 105, (24.0, 0.0, 0.0), element="CL"),
        pdb.atom_line("S", "SO4", 106, (25.0, 0.0, 0.0), record="HETATM"),
        pdb.atom_line("C", "ACT", 107, (26.0, 0.0, 0.0), record="HETATM"),
    ]
    structure = read_pdb(pdb.write(lines))
    assert structure.sequence == "AA"
    assert structure.residues[1].atom_names == ("N", "CA", "C", "O", "CB")


def test_element_inferred_from_name_without_element_column(pdb):
    lines = [line[:66] for line in pdb.peptide(["ALA", "ALA"])]
    lines.insert(3, pdb.atom_line("HA", "ALA", 1, (1.0, 1.5, 0.0))[:66])
    residue = read_pdb(pdb.write(lines)).residues[0]
    assert residue.elements == ("N", "C", "C", "O", "C")


@pytest.mark.parametrize("name", ["MSE", "NLE"])
def test_selenomethionine_and_norleucine_become_methionine(pdb, name):
    side = "SE" if name == "MSE" else "CD"
    lines = pdb.peptide(["ALA"])
    res = pdb.residue_lines(name, 2, atoms=("N", "CA", "C", "O", "CB", "CG"), record="HETATM")
    res.append(pdb.atom_line(side, name, 2, (8.8, 3.0, 2.8), record="HETATM", element=side))
    res.append(pdb.atom_line("CE", name, 2, (8.8, 4.0, 4.0), record="HETATM"))
    lines += res + pdb.residue_lines("GLY", 3, atoms=("N", "CA", "C", "O"))
    structure = read_pdb(pdb.write(lines))
    assert structure.sequence == "AMG"
    met = structure.residues[1]
    assert met.name == "MET" and met.file_name == name
    assert met.atom_names == ("N", "CA", "C", "O", "CB", "CG", "SD", "CE")
    assert met.missing_heavy_atoms == ()


def test_hetatm_standard_residue_kept(pdb):
    lines = pdb.peptide(["ALA"]) + pdb.residue_lines("LYS", 2, record="HETATM")
    assert read_pdb(pdb.write(lines)).sequence == "AK"


def test_insertion_codes_are_distinct_residues(pdb):
    lines = pdb.residue_lines("ALA", 52, position=1)
    lines += pdb.residue_lines("GLY", 52, position=2, icode="A", atoms=("N", "CA", "C", "O"))
    lines += pdb.residue_lines("SER", 52, position=3, icode="B")
    lines += pdb.residue_lines("LEU", 53, position=4)
    structure = read_pdb(pdb.write(lines))
    assert structure.sequence == "AGSL"
    assert [r.residue_id for r in structure.residues] == ["52", "52A", "52B", "53"]


def test_only_first_model_is_read(pdb):
    model1 = pdb.peptide(["ALA", "GLY"])
    model2 = pdb.peptide(["ALA", "GLY", "SER"], shift=(0.0, 0.0, 5.0))
    lines = ["MODEL        1", *model1, "ENDMDL", "MODEL        2", *model2, "ENDMDL"]
    structure = read_pdb(pdb.write(lines))
    assert structure.sequence == "AG"
    np.testing.assert_allclose(structure.residues[0].position("N"), [3.8, 0.0, 0.0])


def test_other_records_ignored(pdb):
    lines = pdb.peptide(["ALA"])
    anisou = "ANISOU" + lines[1][6:]
    lines = ["HEADER    TEST", "CRYST1", lines[0], lines[1], anisou, *lines[2:], "CONECT    1    2"]
    assert read_pdb(pdb.write(lines)).sequence == "A"


def test_two_chains_by_identifier_and_by_ter(pdb):
    chain_a = pdb.peptide(["ALA", "GLY"], chain="A")
    chain_b = pdb.peptide(["SER", "LEU"], chain="B", shift=(0.0, 10.0, 0.0))
    structure = read_pdb(pdb.write(chain_a + chain_b))
    assert structure.chain_index.tolist() == [0, 0, 1, 1]
    assert structure.chain_ids == ("A", "B")
    # same identifier, separated by TER: two chains as well
    second = [
        line[:22] + f"{int(line[22:26]) + 10:>4}" + line[26:]
        for line in pdb.peptide(["SER", "LEU"], shift=(0.0, 10.0, 0.0))
    ]
    structure = read_pdb(pdb.write(chain_a + ["TER"] + second))
    assert structure.chain_index.tolist() == [0, 0, 1, 1]
    assert structure.chain_ids == ("A", "A")
