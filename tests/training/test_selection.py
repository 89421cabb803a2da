"""Selection of training epochs by the folded fraction of a short MD run."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import small_config, small_schnet, tiny_system

from workbench.teacher import teacher_potential
from workbench.training.data import generate_teacher_data
from workbench.training.force_matching import FitSettings
from workbench.training.pipeline import TrainSettings, train_potential
from workbench.training.selection import folded_fraction_gap

TINY = {"hidden": 8, "filters": 8, "blocks": 1, "num_rbf": 6, "cutoff": 5.0}


def silent_schnet():
    """A small CGSchNet whose energy is exactly zero (output layer zeroed)."""
    schnet = small_schnet(**TINY)
    with torch.no_grad():
        for parameter in schnet.output_network.parameters():
            parameter.zero_()
    return schnet


def test_the_teachers_own_terms_score_zero_and_a_free_chain_scores_the_teachers_fraction():
    system = tiny_system()
    teacher = teacher_potential(system)
    score, target = folded_fraction_gap(
        system, teacher, silent_schnet(), dict(teacher.priors), 300.0, 4, 500, seed=1
    )
    assert target >= 0.4  # the native half stays folded for 2 ps, the unfolded half does not
    assert score() == 0.0  # the same forces, starts and random numbers: the same run
    free, target_again = folded_fraction_gap(system, teacher, silent_schnet(), {}, 300.0, 4,
                                             500, seed=1)
    assert target_again == target
    assert free() == pytest.approx(target)  # beads without bonds or wells: nothing folded
    with pytest.raises(ValueError, match="replicas >= 2"):
        folded_fraction_gap(system, teacher, silent_schnet(), {}, 300.0, 1, 500)


def test_training_keeps_the_selected_epoch_and_records_the_scores(tmp_path):
    system = tiny_system()
    teacher = teacher_potential(system)
    data = generate_teacher_data(system, teacher, [300.0], 2, 60, 10, seed=0)
    settings = TrainSettings(
        schnet=small_config(**TINY),
        fit=FitSettings(epochs=2, batch_size=6, select_every=1),
        select_steps=40, select_replicas=2, progress=False,
    )
    _, card = train_potential(system, teacher, data, settings, tmp_path)
    selection = card["training"]["selection_by_folded_fraction"]
    assert [row["epoch"] for row in selection["scores"]] == [1, 2]
    assert all(0.0 <= row["score"] <= 1.0 for row in selection["scores"])
    best = min(selection["scores"], key=lambda row: row["score"])["epoch"]
    assert selection["kept_epoch"] == card["training"]["best_epoch"] == best
    assert selection["steps"] == 40 and selection["temperature_K"] == 300.0
    assert 0.0 <= selection["teacher_folded"] <= 1.0
    saved = json.loads((tmp_path / "cln025.json").read_text())
    assert saved["training"]["selection_by_folded_fraction"] == selection
