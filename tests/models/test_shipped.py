"""The trained models that ship with the package: each loads, fits its protein and has a
complete card; only a card whose validation passed makes a model the default of a run."""

from __future__ import annotations

import json

import pytest

from workbench.model.io import load_potential
from workbench.models import shipped_model_file, shipped_model_path, validation_passed
from workbench.system import build_system

PROTEINS = ["cln025", "2jof", "1yrf", "1enh", "2a3d"]


@pytest.mark.parametrize("protein", PROTEINS)
def test_each_protein_ships_a_model_with_its_card(protein):
    path = shipped_model_file(protein)
    assert path is not None
    potential = load_potential(path)
    system = build_system(protein)
    assert potential.metadata["trained"] and potential.metadata["protein"] == protein
    assert potential.bead_types.shape[0] == system.n_beads
    card = json.loads(path.with_suffix(".json").read_text())
    assert card["teacher"]["epsilon"] > 0 and card["data"]["frames"] > 0
    assert card["training"]["val_force_rmse"] > 0
    assert path.with_suffix(".log.csv").is_file()  # the training curve
    validation = card["validation"]
    assert validation.get("results") or (validation.get("long_run") or {}).get("passes"), (
        "no validation against the teacher recorded")
    assert (shipped_model_path(protein) is not None) == validation_passed(path)


def test_validation_verdict_reads_every_check(tmp_path):
    model = tmp_path / "m.pt"
    assert not validation_passed(model)  # no card
    card = tmp_path / "m.json"
    card.write_text(json.dumps({"validation": None}))
    assert not validation_passed(model)
    passed = {"results": [{"passes": {"a": True, "b": True}}, {"passes": {"a": True}}]}
    card.write_text(json.dumps({"validation": passed}))
    assert validation_passed(model)
    passed["results"][1]["passes"]["b"] = False
    card.write_text(json.dumps({"validation": passed}))
    assert not validation_passed(model)
    long_run = {"passes": {"q_intersection": True, "transitions": True}}
    card.write_text(json.dumps({"validation": {"long_run": long_run}}))
    assert validation_passed(model)  # a long run alone validates
    long_run["passes"]["transitions"] = False
    card.write_text(json.dumps({"validation": {"long_run": long_run}}))
    assert not validation_passed(model)
    # a long run decides over failing short runs from native, and a failing one over
    # passing short runs
    failed_short = {"results": [{"passes": {"q_intersection": False}}]}
    long_run["passes"]["transitions"] = True
    card.write_text(json.dumps({"validation": {**failed_short, "long_run": long_run}}))
    assert validation_passed(model)
    long_run["passes"]["transitions"] = False
    card.write_text(json.dumps({"validation": {**passed, "long_run": long_run}}))
    passed["results"][1]["passes"]["b"] = True
    card.write_text(json.dumps({"validation": {**passed, "long_run": long_run}}))
    assert not validation_passed(model)
    card.write_text(json.dumps({"validation": {"long_run": {"passes": {}}}}))
    assert not validation_passed(model)  # nothing checked
    card.write_text("{not json")
    assert not validation_passed(model)
