"""The models page: generated from the cards, a section per model with its figures, plot and
defects; docs/models/index.md is the generator's output for the shipped cards."""

from __future__ import annotations

import json
from pathlib import Path

from workbench import models
from workbench.models import shipped_models
from workbench.models.pages import index_table, main, model_section, models_page

ROOT = Path(__file__).resolve().parents[2]

CARD = {
    "protein": "cln025",
    "model": "CGSchNet + priors fitted by Boltzmann inversion, trained by force matching",
    "teacher": {"teacher": "Go-like potential", "protein": "cln025", "mapping": "five-bead",
                "epsilon": 0.1041, "dihedral_ratio": None},
    "data": {"frames": 215040, "frames_sampled_by_a_model": 0, "temperatures_K": [300.0, 360.0],
             "noise": {"scales_A": [0.1, 0.2], "fraction": 0.1, "frames": 5690}},
    "priors": {"method": "Boltzmann inversion", "repulsion": "edge", "grouping": "term"},
    "schnet": {"blocks": 3, "hidden": 128, "filters": 128, "num_rbf": 50, "cutoff": 10.0},
    "training": {"epochs_run": 2, "best_epoch": 2, "val_force_rmse": 0.47084317500976475,
                 "final_learning_rate": 0.0003},
    "validation": {"long_run": {
        "model_run": "runs/model/metrics.csv.gz", "teacher_run": "runs/teacher/metrics.csv.gz",
        "replicas": 64, "time_ps": 5000.0, "q_intersection": 0.9613125,
        "folded_teacher": 0.6921875, "folded_model": 0.73028125, "events_model": [687, 693],
        "passes": {"q_intersection": True, "transitions": True},
        "plot": "docs/models/cln025-v1.long-run.png"}},
    "known_defects": ["Validated at 300 K only."],
}


def test_a_section_carries_the_cards_figures_plot_and_defects(tmp_path):
    (tmp_path / "docs" / "models").mkdir(parents=True)
    (tmp_path / "docs" / "models" / "cln025-v1.long-run.png").write_bytes(b"png")
    page = model_section(CARD, Path("cln025-v1.pt"), tmp_path / "docs" / "models", tmp_path)
    assert page.startswith('<a id="cln025"></a>') and "## CLN025: `cln025-v1`" in page
    for text in ("| training frames | 215,040 |", "| epsilon | 0.1041 |",
                 "| validation force RMSE (kcal/mol/Å) | 0.471 |",
                 "| final learning rate | 0.0003 |", "| data temperatures (K) | 300 / 360 |",
                 "| Q-histogram intersection, model vs teacher | 0.961 |",
                 "| folding / unfolding events, model | 687 / 693 |",
                 "0.1, 0.2 Å on 10% of the frames, 5,690 kept",
                 "long run: passes (q_intersection ✓, transitions ✓)",
                 "![long_run](cln025-v1.long-run.png)", "- Validated at 300 K only."):
        assert text in page, text
    assert "dihedral ratio" not in page  # None is left out
    failing = json.loads(json.dumps(CARD))
    failing["validation"]["long_run"]["passes"]["transitions"] = False
    other = tmp_path / "elsewhere"
    page = model_section(failing, Path("cln025-v1.pt"), other, tmp_path)
    assert "long run: fails (q_intersection ✓, transitions ✗)" in page
    assert "](../docs/models/cln025-v1.long-run.png)" in page  # relative to the page


def test_a_card_of_another_architecture_lists_its_config(tmp_path):
    card = {key: value for key, value in CARD.items() if key != "schnet"}
    card["architecture"] = "painn"
    card["painn"] = {"hidden": 64, "blocks": 2, "cutoff": 8.0, "embedding": "type"}
    page = model_section(card, Path("cln025-v1.pt"), tmp_path, tmp_path)
    assert "| CGPaiNN config | hidden 64, blocks 2, cutoff 8 |" in page
    assert "| embedding | type |" in page and "CGSchNet blocks" not in page


def test_a_card_without_a_validation_says_so_under_its_heading(tmp_path):
    card = {key: value for key, value in CARD.items() if key != "validation"}
    page = model_section(card, Path("cln025-v1.pt"), tmp_path, tmp_path)
    heading = "### Validation against the teacher\n\n"
    assert heading + "Not validated yet: a run of this model" in page
    assert "Not validated yet" not in model_section(CARD, Path("cln025-v1.pt"), tmp_path,
                                                    tmp_path)


def test_a_deep_potential_card_renders_as_a_line_of_its_own(tmp_path):
    """A Deep Potential shipped beside the protein's CGSchNet (``cln025-dp-v1``): its own
    anchor and title, its config keys (unset ones left out, switches as a recipe writes
    them), not CGSchNet's sizes."""
    card = {key: value for key, value in CARD.items() if key != "schnet"}
    card["model"] = "CGDeepPotential + priors fitted by Boltzmann inversion"
    card["architecture"] = "dp"
    card["dp"] = {"embedding_size": 25, "cutoff": 10.0, "cutoff_smooth": 8.0,
                  "embedding_widths": [16, 32, 64], "axis_neurons": 8,
                  "fitting_widths": [64, 64, 64], "type_one_side": False, "sel": None,
                  "embedding": "type"}
    page = model_section(card, Path("cln025-dp-v1.pt"), tmp_path, tmp_path)
    assert page.startswith('<a id="cln025-dp"></a>')
    assert "## CLN025 (CGDeepPotential): `cln025-dp-v1`" in page
    assert ("| CGDeepPotential config | embedding_size 25, cutoff 10, cutoff_smooth 8, "
            "embedding_widths 16 / 32 / 64, axis_neurons 8, fitting_widths 64 / 64 / 64, "
            "type_one_side false |") in page
    assert "sel" not in page and "CGSchNet" not in page and "| embedding | type |" in page
    index = index_table({"cln025": (Path("cln025-v1.pt"), CARD),
                         "cln025-dp": (Path("cln025-dp-v1.pt"), card)})
    assert "| [CLN025](#cln025) | `cln025-v1` |" in index[2]
    assert "| [CLN025 (CGDeepPotential)](#cln025-dp) | `cln025-dp-v1` | 0.471 |" in index[3]


def test_the_table_lists_each_protein_with_its_long_run():
    index = index_table({"cln025": (Path("cln025-v1.pt"), CARD)})
    assert "| [CLN025](#cln025) | `cln025-v1` | 0.471 | 5,000 | 0.961 | 0.692 / 0.730 |" in index


def test_the_command_writes_the_page_of_the_newest_versions(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    for version in (1, 2):
        (tmp_path / "data" / f"cln025-v{version}.pt").write_bytes(b"")
        card = {**CARD, "model": f"version {version}"}
        (tmp_path / "data" / f"cln025-v{version}.json").write_text(json.dumps(card))
    monkeypatch.setattr(models.resources, "files", lambda _: tmp_path)
    assert main(["--out", str(tmp_path / "pages" / "index.md"), "--root", str(tmp_path)]) == 0
    assert sorted(p.name for p in (tmp_path / "pages").iterdir()) == ["index.md"]
    page = (tmp_path / "pages" / "index.md").read_text()
    assert page.startswith("<!-- generated") and "# Shipped models" in page
    assert "version 2." in page and "version 1." not in page  # the newest


def test_the_committed_page_is_up_to_date():
    cards = {protein: (files[-1], json.loads(files[-1].with_suffix(".json").read_text()))
             for protein, files in shipped_models().items()}
    expected = models_page(cards, ROOT / "docs" / "models", ROOT)
    assert (ROOT / "docs" / "models" / "index.md").read_text() == expected, (
        "regenerate with `python -m workbench.models.pages`")
