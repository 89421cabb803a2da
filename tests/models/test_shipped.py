"""The trained models that ship with the package: each loads, fits its protein and has a
complete card; only a card whose validation passed makes a model the default of a run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench.model.io import load_potential
from workbench.models import (
    shipped_model_file,
    shipped_model_path,
    shipped_models,
    validation_passed,
)
from workbench.system import build_system
from workbench.teacher import state_thresholds
from workbench.training.model_card import kept_prior_settings
from workbench.training.validate import compare_runs

ROOT = Path(__file__).resolve().parents[2]
PROTEINS = ["cln025", "2jof", "1yrf", "1enh", "2a3d"]
#: Every line of shipped models: each protein's own, and its lines of other architectures
LINES = sorted(shipped_models())


def _newest(line: str) -> tuple[Path, dict, str | None]:
    """The newest model of a line, its card and the architecture that finds it (None for a
    protein's own line)."""
    path = shipped_models()[line][-1]
    card = json.loads(path.with_suffix(".json").read_text())
    return path, card, None if line == card["protein"] else card["architecture"]


def test_each_protein_ships_a_model():
    assert set(PROTEINS) <= set(LINES)


@pytest.mark.parametrize("line", LINES)
def test_each_line_ships_a_model_with_its_card(line):
    path, card, architecture = _newest(line)
    protein = card["protein"]
    assert shipped_model_file(protein, architecture=architecture) == path
    potential = load_potential(path)
    system = build_system(protein)
    assert potential.metadata["trained"] and potential.metadata["protein"] == protein
    assert potential.bead_types.shape[0] == system.n_beads
    assert potential.architecture == card.get("architecture", potential.architecture)
    assert card["teacher"]["epsilon"] > 0 and card["data"]["frames"] > 0
    assert card["training"]["val_force_rmse"] > 0
    # the training curve: every epoch, the model's it continued from first
    log = card["training"]["log"]
    before = card["training"].get("continued_from", {}).get("epochs_before", 0)
    assert len(log["rows"]) == before + card["training"]["epochs_run"]
    assert [row[log["columns"].index("epoch")] for row in log["rows"]] == list(
        range(1, len(log["rows"]) + 1))
    validation = card["validation"]
    assert validation.get("results") or (validation.get("long_run") or {}).get("passes"), (
        "no validation against the teacher recorded")
    assert (shipped_model_path(protein, architecture=architecture) is not None) == (
        validation_passed(path))


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


@pytest.mark.parametrize("line", LINES)
def test_each_default_rests_on_a_long_run_reproduced_from_the_kept_metrics(line):
    """Every shipped model is the default (of its architecture, on a line of another one),
    by a long run whose card figures come back from the runs the repository keeps (model
    run and teacher run, gzipped)."""
    path, card, architecture = _newest(line)
    protein, long_run = card["protein"], card["validation"]["long_run"]
    assert shipped_model_path(protein, architecture=architecture) == path
    assert validation_passed(path)
    assert long_run["replicas"] == 64 and long_run["time_ps"] >= 1000
    # the card may note after the path how the run was made: "PATH (...)"
    runs = [ROOT / long_run[key].split(" (")[0] for key in ("model_run", "teacher_run")]
    # a card written before the thresholds were recorded in it used the protein's own
    states = tuple(long_run.get("states") or state_thresholds(protein))
    again = compare_runs(*runs, states=states)
    for key in ("q_intersection", "folded_teacher", "folded_model", "time_ps"):
        assert again[key] == pytest.approx(long_run[key], abs=1e-6), key
    assert again["passes"] == long_run["passes"]
    assert (ROOT / long_run["plot"]).is_file()


def test_the_newest_version_of_a_protein_is_the_shipped_one(tmp_path, monkeypatch):
    from workbench import models

    (tmp_path / "data").mkdir()
    for name in ("cln025-v1.pt", "cln025-v2.pt", "cln025-v10.pt", "2jof-v1.pt", "2jof.pt"):
        (tmp_path / "data" / name).write_bytes(b"")
    monkeypatch.setattr(models.resources, "files", lambda _: tmp_path)
    assert [p.name for p in models.shipped_models()["cln025"]] == [
        "cln025-v1.pt", "cln025-v2.pt", "cln025-v10.pt"]
    assert shipped_model_file("cln025").name == "cln025-v10.pt"
    assert shipped_model_file("2jof").name == "2jof-v1.pt"  # an unversioned file is not shipped
    assert shipped_model_file("1yrf") is None and shipped_model_file("cln025", "one-bead") is None
    # a line of another architecture: its own versions, found for that architecture alone
    for name in ("cln025-dp-v1.pt", "cln025-dp-v2.pt"):
        (tmp_path / "data" / name).write_bytes(b"")
    assert [p.name for p in models.shipped_models()["cln025-dp"]] == [
        "cln025-dp-v1.pt", "cln025-dp-v2.pt"]
    assert shipped_model_file("cln025").name == "cln025-v10.pt"
    assert shipped_model_file("cln025", architecture="dp").name == "cln025-dp-v2.pt"
    # none of that architecture ships: the protein's own line (the run checks its network)
    assert shipped_model_file("2jof", architecture="dp").name == "2jof-v1.pt"
    assert models.model_line("cln025") == "cln025"


def test_a_run_of_an_architecture_takes_the_shipped_model_of_it(tmp_path, monkeypatch):
    from workbench import models
    from workbench.model.io import save_potential
    from workbench.model.native_priors import demo_potential
    from workbench.runner import choose_potential

    system = build_system("cln025")
    (tmp_path / "data").mkdir()
    passed = {"validation": {"long_run": {"passes": {"q_intersection": True}}}}
    for name, architecture in (("cln025-v1", "schnet"), ("cln025-dp-v1", "dp")):
        potential = demo_potential(system, architecture=architecture)
        potential.metadata["trained"] = True
        save_potential(potential, tmp_path / "data" / f"{name}.pt")
        (tmp_path / "data" / f"{name}.json").write_text(json.dumps(passed))
    # the package's data folder, for the model lookup alone (bundled structures stay found)
    monkeypatch.setattr(models, "resources", SimpleNamespace(files=lambda _: tmp_path))
    schnet, notice = choose_potential(system, None)
    assert schnet.architecture == "schnet" and "cln025-v1.json" in notice
    dp, notice = choose_potential(system, None, "dp")
    assert dp.architecture == "dp" and dp.metadata["trained"] and "cln025-dp-v1.json" in notice
    (tmp_path / "data" / "cln025-dp-v1.json").write_text(json.dumps({"validation": None}))
    demo, notice = choose_potential(system, None, "dp")
    assert demo.architecture == "dp" and not demo.metadata.get("trained")
    assert "cln025-dp-v1.pt) but has not passed its validation" in notice


def _strings(value):
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return [value] if isinstance(value, str) else []


@pytest.mark.parametrize("line", LINES)
def test_every_file_a_card_names_is_in_the_repository(line):
    """A card names files by their path in the repository, or says the file was not kept."""
    _, card, _ = _newest(line)
    named = [path for text in _strings(card)
             for path in re.findall(r"(?:workbench|docs)/[\w./-]+\.[a-z]+", text)]
    assert named, "the card names none of its kept runs"
    for path in named:
        assert (ROOT / path).is_file(), path
    # no other folder is named (kcal/mol/A is a unit, not a path)
    for text in _strings(card):
        rest = re.sub(r"kcal/mol(/A)?", "", text)
        assert "/" not in rest or re.search(r"(?:workbench|docs)/", text), text


@pytest.mark.parametrize("protein", PROTEINS)
def test_training_continues_from_a_shipped_model_with_its_prior_record(protein):
    """Continuing from a shipped model finds how its priors were fitted on its own card."""
    path = shipped_model_file(protein)
    terms = ["bonds", "angles", "dihedrals", "repulsion"]
    record = kept_prior_settings(path, terms)
    assert record["kept_from"][0] == str(path)
    assert record["method"].startswith("Boltzmann inversion") and record["terms"] == terms
