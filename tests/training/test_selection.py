"""Selection of training epochs by a short MD run against the teacher's."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import small_config, small_schnet, tiny_system

from workbench.cli import main
from workbench.md import LangevinIntegrator, Simulation
from workbench.teacher import mixed_starts, second_half_q, teacher_potential
from workbench.training.data import generate_teacher_data
from workbench.training.force_matching import FitSettings
from workbench.training.pipeline import TrainSettings, train_potential
from workbench.training.selection import selection_score

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
    score, target = selection_score(
        system, teacher, silent_schnet(), dict(teacher.priors), 300.0, 4, 500, seed=1
    )
    assert target >= 0.4  # the native half stays folded for 2 ps, the unfolded half does not
    assert score() == 0.0  # the same forces, starts and random numbers: the same run
    free, target_again = selection_score(system, teacher, silent_schnet(), {}, 300.0, 4,
                                             500, seed=1)
    assert target_again == target
    assert free() == pytest.approx(target)  # beads without bonds or wells: nothing folded
    with pytest.raises(ValueError, match="replicas >= 2"):
        selection_score(system, teacher, silent_schnet(), {}, 300.0, 1, 500)


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
    selection = card["training"]["selection_in_md"]
    assert [row["epoch"] for row in selection["scores"]] == [1, 2]
    assert all(0.0 <= row["score"] <= 1.0 for row in selection["scores"])
    best = min(selection["scores"], key=lambda row: row["score"])["epoch"]
    assert selection["kept_epoch"] == card["training"]["best_epoch"] == best
    assert selection["steps"] == 40 and selection["temperature_K"] == 300.0
    assert selection["criterion"] == "folded"
    assert selection["second_half_starts"] == "unfolded"
    assert 0.0 <= selection["teacher_folded"] <= 1.0
    saved = json.loads((tmp_path / "cln025.json").read_text())
    assert saved["training"]["selection_in_md"] == selection


def test_the_ensemble_criterion_weighs_both_validation_limits():
    from workbench.model.potential import Potential
    from workbench.training.validate import histogram_intersection

    system = tiny_system()
    teacher = teacher_potential(system)
    args = (system, teacher, silent_schnet())
    same, target = selection_score(*args, dict(teacher.priors), 300.0, 4, 200, seed=1,
                                   criterion="ensemble")
    assert same() == 0.0  # the teacher's own run: overlap 1, the same folded fraction
    free, _ = selection_score(*args, {}, 300.0, 4, 200, seed=1, criterion="ensemble")
    # the same two runs by hand: the worse criterion, each as a share of its limit
    starts = mixed_starts(system, 300.0, 4, 2, 200, "cpu", 1)
    q_teacher = second_half_q(system, teacher, 300.0, starts, 200, "cpu", 1)
    q_free = second_half_q(system, Potential(system.bead_types, silent_schnet(), {}), 300.0,
                           starts, 200, "cpu", 1)
    gap = abs(float((q_free > 0.8).float().mean()) - target)
    overlap = histogram_intersection(q_free, q_teacher)
    assert free() == pytest.approx(max(gap / 0.1, (1.0 - overlap) / 0.2))
    assert free() > 1.0  # a chain without bonds or wells fails
    with pytest.raises(ValueError, match="selection criterion must be one of"):
        selection_score(*args, {}, 300.0, 4, 200, criterion="rmse")


def test_selection_counts_folded_by_the_proteins_own_threshold(monkeypatch):
    import workbench.teacher

    # a protein whose folded state starts at Q 0.87 (as 2JOF's native basin starts at 0.5):
    # the native-started replicas sit at Q 0.8–0.9 here, so the threshold matters
    monkeypatch.setitem(workbench.teacher.NATIVE_BASIN_Q, "cln025", (0.87, 0.4))
    system = tiny_system()
    teacher = teacher_potential(system)
    _, target = selection_score(system, teacher, silent_schnet(), {}, 300.0, 4, 500, seed=1)
    starts = mixed_starts(system, 300.0, 4, 2, 500, "cpu", 1)
    q = second_half_q(system, teacher, 300.0, starts, 500, "cpu", 1)
    assert target == pytest.approx(float((q > 0.87).float().mean()))
    assert target != pytest.approx(float((q > 0.8).float().mean()))  # the check distinguishes


def test_selection_runs_can_start_half_their_replicas_from_given_structures():
    system = tiny_system()
    teacher = teacher_potential(system)
    native = system.native_positions
    # two "drifted" structures: the native one stretched by 20 % about its centre
    centre = native.mean(0)
    stretched = torch.stack([centre + 1.2 * (native - centre), centre + 1.1 * (native - centre)])
    score, target = selection_score(system, teacher, silent_schnet(), dict(teacher.priors),
                                    300.0, 5, 200, seed=1, other_starts=stretched)
    assert score() == 0.0  # the teacher's own terms from the same starts
    # the same run by hand: replicas 0-1 from native, 2-4 from the given ones, cycled
    starts = torch.cat([native.expand(2, -1, -1), stretched[[0, 1, 0]]])
    q = second_half_q(system, teacher, 300.0, starts, 200, "cpu", 1)
    assert target == pytest.approx(float((q > 0.8).float().mean()))
    _, unfolded_target = selection_score(system, teacher, silent_schnet(), {}, 300.0, 5, 200,
                                         seed=1)
    assert unfolded_target != pytest.approx(target)  # not the unfolded starts
    with pytest.raises(ValueError, match=r"other starts must have shape \(S, 49, 3\)"):
        selection_score(system, teacher, silent_schnet(), {}, 300.0, 4, 200,
                        other_starts=stretched[:, :10])


def test_cli_selection_starts_from_a_run_and_the_card_names_it(tmp_path, capsys):
    system = tiny_system()
    run = Simulation(system, teacher_potential(system), LangevinIntegrator(), replicas=2)
    (tmp_path / "run").mkdir()
    run.save_checkpoint(tmp_path / "run" / "checkpoint.pt")
    common = ["--protein", "cln025", "--generate", "--hidden", "8", "--filters", "8",
              "--blocks", "1", "--num-rbf", "6", "--cutoff", "5", "--epochs", "1",
              "--batch-size", "8", "--device", "cpu", "--quiet", "--replicas", "2", "--steps",
              "40", "--save-every", "10", "--equilibration", "0"]
    assert main(["train", *common, "--select-start", str(tmp_path / "run"),
                 "--out", str(tmp_path / "a")]) == 2
    assert "add --select-every" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
    assert main(["train", *common, "--select-every", "1", "--select-steps", "20",
                 "--select-replicas", "2", "--select-start", str(tmp_path / "missing"),
                 "--out", str(tmp_path / "b")]) == 2
    assert not (tmp_path / "b").exists()  # a bad run is refused before anything is written
    assert main(["train", *common, "--select-every", "1", "--select-steps", "20",
                 "--select-replicas", "2", "--select-start", str(tmp_path / "run"),
                 "--out", str(tmp_path / "c")]) == 0
    selection = json.loads((tmp_path / "c" / "cln025.json").read_text())["training"][
        "selection_in_md"]
    assert selection["second_half_starts"] == str(tmp_path / "run")
    assert [row["epoch"] for row in selection["scores"]] == [1]
