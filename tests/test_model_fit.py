"""A model runs only on the system it was made for; the shipped default follows the
system's sequence, not the PDB file's name."""

from __future__ import annotations

from importlib import resources

import pytest
from helpers import tiny_system

from workbench.model.io import load_potential
from workbench.model_fit import ModelMismatchError, bundled_match, check_model_fits
from workbench.models import shipped_model_file
from workbench.runner import choose_potential
from workbench.system import build_system

#: Side-chain atoms of GLU that ALA has not.
GLU_ONLY = {"CG", "CD", "OE1", "OE2"}


def cln025_pdb() -> str:
    return (resources.files("workbench.system") / "data" / "5awl.pdb").read_text()


def e5a_mutant(path):
    """CLN025 with its GLU 5 made ALA (side chain cut to CB): same length, same beads."""
    lines = []
    for line in cln025_pdb().splitlines():
        if line.startswith(("ATOM", "HETATM")) and line[17:20] == "GLU":
            if line[12:16].strip() in GLU_ONLY or line[76:78].strip() == "H":
                continue
            line = line[:17] + "ALA" + line[20:]
        lines.append(line)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_model_onto_a_same_length_other_sequence_is_refused(tmp_path):
    mutant = build_system(e5a_mutant(tmp_path / "e5a.pdb"))
    assert mutant.n_beads == tiny_system().n_beads
    shipped = shipped_model_file("cln025")
    with pytest.raises(ModelMismatchError, match="residue 5 GLU → ALA") as caught:
        check_model_fits(load_potential(shipped), mutant, str(shipped))
    assert "YYDPETGTWY, this system's YYDPATGTWY" in str(caught.value)
    check_model_fits(load_potential(shipped), tiny_system(), str(shipped))


def test_a_model_of_other_beads_is_refused_by_bead_where_it_records_no_sequence(tmp_path):
    mutant = build_system(e5a_mutant(tmp_path / "e5a.pdb"))
    potential = load_potential(shipped_model_file("cln025"))
    potential.metadata = {}
    with pytest.raises(ModelMismatchError, match=r"bead \d+ \(CB of ALA 5\) has type"):
        check_model_fits(potential, mutant, "model.pt")


def test_a_file_named_like_a_bundled_protein_gets_no_shipped_model(tmp_path):
    imposter = build_system(e5a_mutant(tmp_path / "cln025.pdb"))
    assert imposter.name == "cln025" and bundled_match(imposter) is None
    _, notice = choose_potential(imposter, None)
    assert notice.startswith("Untrained demo model") and "shipped" not in notice


def test_a_copy_of_a_bundled_structure_under_any_name_gets_its_shipped_model(tmp_path):
    path = tmp_path / "my_hairpin.pdb"
    path.write_text(cln025_pdb())
    system = build_system(path)
    assert bundled_match(system) == "cln025"
    _, notice = choose_potential(system, None)
    assert notice.startswith("Trained model shipped for cln025")


def test_a_file_named_like_a_bundled_protein_gets_the_default_teacher_and_thresholds(tmp_path):
    from workbench.teacher import DEFAULT_EPSILON, TEACHER_EPSILON, teacher_potential

    imposter = build_system(e5a_mutant(tmp_path / "cln025.pdb"))
    assert teacher_potential(imposter).metadata["epsilon"] == DEFAULT_EPSILON
    assert teacher_potential(tiny_system()).metadata["epsilon"] == TEACHER_EPSILON["cln025"]
