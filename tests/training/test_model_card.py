"""Model cards: the priors record of a continued model, the one-line description and the
epoch log."""

import json

from workbench.training.model_card import (
    epoch_log,
    kept_prior_settings,
    model_description,
    read_epoch_log,
)

FIT = {
    "method": "Boltzmann inversion, then bonds, angles and dihedrals refined by force matching",
    "repulsion": "edge",
    "repulsion_grouping": "touching",
    "refinement": {"frames": 4096},
    "terms": ["bonds", "angles", "dihedrals", "repulsion"],
    "dihedrals_with_a_non_native_minimum": 2,
}
TERMS = ["bonds", "angles", "dihedrals", "repulsion"]


def write_card(folder, stem, priors):
    (folder / f"{stem}.json").write_text(json.dumps({"protein": "2a3d", "priors": priors}))
    return str(folder / f"{stem}.pt")


def test_kept_priors_carry_the_record_of_their_fit(tmp_path):
    first = write_card(tmp_path, "f", FIT)
    record = kept_prior_settings(first, TERMS)
    assert record["method"] == FIT["method"] and record["refinement"] == {"frames": 4096}
    assert record["repulsion_grouping"] == "touching" and record["kept_from"] == [first]
    assert record["terms"] == TERMS
    # recounted on the new card (its dihedral priors are the same, its check is its own)
    assert "dihedrals_with_a_non_native_minimum" not in record
    assert "refined by force matching" in model_description(record)
    # passed on again: the chain grows, newest first
    second = write_card(tmp_path, "h", record)
    again = kept_prior_settings(second, TERMS)
    assert again["kept_from"] == [second, first] and again["method"] == FIT["method"]


def test_older_cards_that_name_only_their_source_are_followed(tmp_path):
    first = write_card(tmp_path, "f", FIT)
    older = write_card(tmp_path, "h", {"method": f"kept from {first}", "terms": TERMS})
    record = kept_prior_settings(older, TERMS)
    assert record["kept_from"] == [older, first]
    assert record["method"] == FIT["method"] and "refinement" in record


def test_without_a_card_the_record_says_the_fit_is_unknown(tmp_path):
    record = kept_prior_settings(tmp_path / "bare.pt", TERMS)
    assert record["kept_from"] == [str(tmp_path / "bare.pt")]
    assert "no card records how they were fitted" in record["method"]
    assert "refined" not in model_description(record)
    # a card that names itself ends the search rather than looping
    looped = str(tmp_path / "self.pt")
    write_card(tmp_path, "self", {"method": f"kept from {looped}", "terms": TERMS})
    record = kept_prior_settings(looped, TERMS)
    assert record["kept_from"] == [looped] and "no card records" in record["method"]


def test_the_epoch_log_is_read_from_the_card_or_an_older_csv(tmp_path):
    rows = [{"epoch": 1, "train_loss": 2.5, "val_relative_entropy": None},
            {"epoch": 2, "train_loss": 1.5, "val_relative_entropy": -0.25}]
    log = epoch_log(rows, ("epoch", "train_loss", "val_relative_entropy"))
    assert log == {"columns": ["epoch", "train_loss", "val_relative_entropy"],
                   "rows": [[1, 2.5, None], [2, 1.5, -0.25]]}
    model = write_card(tmp_path, "m", FIT)
    card = json.loads((tmp_path / "m.json").read_text())
    (tmp_path / "m.json").write_text(json.dumps({**card, "training": {"log": log}}))
    assert read_epoch_log(model) == rows
    # a model whose card has no log: the CSV beside it, its text read as numbers
    older = write_card(tmp_path, "older", FIT)
    (tmp_path / "older.log.csv").write_text(
        "epoch,train_loss,val_relative_entropy\n1,2.5,\n2,1.5,-0.25\n")
    assert read_epoch_log(older) == rows
    assert read_epoch_log(tmp_path / "none.pt") == []
