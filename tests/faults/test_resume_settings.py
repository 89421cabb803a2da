"""A resume that would change the physics is refused unless asked to continue with the
new settings, and then the change is recorded in run.json."""

from __future__ import annotations

import json

import pytest
from fault_runs import TINY, run_cli
from helpers import schnet_potential

from workbench.model.io import save_potential


@pytest.fixture
def stopped(tmp_path):
    folder = tmp_path / "run"
    assert run_cli(*TINY, "--steps", 2, "--out", folder)[0] == 0
    return folder


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (["--dt", "2"], "--dt 4.0 → 2.0"),
        (["--temperature", "350"], "--temperature 300.0 → 350.0"),
        (["--friction", "5"], "--friction 1.0 → 5.0"),
        (["--kernels", "all"], "--kernels {"),
        (["--skin", "3"], "--skin/--exclude-bonded {"),
    ],
)
def test_changed_physics_is_refused_then_continued_and_recorded(stopped, change, named):
    code, _, err = run_cli(*TINY, "--steps", 2, "--out", stopped, "--resume", *change)
    assert code == 2 and "--resume would change the physics of the run" in err and named in err
    assert "--continue-with-new-settings" in err
    code, _, err = run_cli(*TINY, "--steps", 2, "--out", stopped, "--resume", *change,
                           "--continue-with-new-settings")
    assert code == 0, err
    manifest = json.loads((stopped / "run.json").read_text())
    [entry] = manifest["changes"]
    assert entry["step"] == 2 and len(entry["changed"]) == 1


def test_a_changed_seed_or_replica_count_is_never_accepted(stopped):
    for change, named in ((["--seed", "1"], "--seed 0 → 1"), (["--replicas", "4"], "2 → 4")):
        code, _, err = run_cli(*TINY, "--steps", 2, "--out", stopped, "--resume", *change,
                               "--continue-with-new-settings")
        assert code == 2 and "a resume cannot change" in err and named in err


def test_a_model_file_changed_in_place_is_a_changed_model(tmp_path):
    model = tmp_path / "model.pt"
    save_potential(schnet_potential(seed=0), model)
    run = [*TINY[:-2], "--steps", 2, "--model", model, "--out", tmp_path / "run"]
    assert run_cli(*run)[0] == 0
    save_potential(schnet_potential(seed=1), model)
    code, _, err = run_cli(*run, "--resume")
    assert code == 2 and "--model" in err and "sha256" in err


def test_a_neighbour_setting_the_record_predates_counts_as_its_default(stopped):
    manifest = json.loads((stopped / "run.json").read_text())
    del manifest["settings"]["neighbors"]["cell_list_above"]
    (stopped / "run.json").write_text(json.dumps(manifest))
    code, _, err = run_cli(*TINY, "--steps", 2, "--out", stopped, "--resume")
    assert code == 0, err
