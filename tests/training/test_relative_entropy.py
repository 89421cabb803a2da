"""The relative-entropy term: its value and gradient against the formula, the effective
sample fraction, the per-temperature sets, training with it (and its stop), the card and
the CLI's ``--ensemble-weight``."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import perturbed_positions, small_schnet, tiny_system

from workbench.cli import main
from workbench.md import LangevinIntegrator, Simulation
from workbench.model.potential import Potential
from workbench.teacher import teacher_potential
from workbench.training.data import generate_teacher_data, load_teacher_data
from workbench.training.force_matching import FitSettings, train_force_matching
from workbench.training.model_card import read_epoch_log
from workbench.training.pipeline import TrainSettings, train_potential
from workbench.training.relative_entropy import (
    EnsembleSet,
    SamplerFrames,
    ensemble_sets,
    relative_entropy_change,
    schnet_energies,
    validation_relative_entropy,
)
from workbench.units import KB

TINY = {"hidden": 8, "filters": 8, "blocks": 1, "num_rbf": 6, "cutoff": 5.0}


def _schnet_only(seed: int = 0) -> Potential:
    return Potential(tiny_system().bead_types, small_schnet(seed, **TINY))


def _frames(potential: Potential, model_shift: float = 0.3) -> EnsembleSet:
    """Teacher frames near native and model frames further out, with the offsets of a
    sampler equal to ``potential`` (so ``ΔU`` is zero at its weights)."""
    teacher = perturbed_positions(tiny_system(), replicas=3, sigma=0.2, seed=1,
                                  dtype=torch.float32)
    model = perturbed_positions(tiny_system(), replicas=4, sigma=model_shift, seed=2,
                                dtype=torch.float32)
    with torch.no_grad():
        return EnsembleSet(
            teacher, -schnet_energies(potential, teacher), model,
            -schnet_energies(potential, model), 300.0,
        )


def test_change_is_zero_at_the_sampler_with_every_frame_counting():
    potential = _schnet_only()
    change, fraction = relative_entropy_change(potential, _frames(potential), "cpu")
    assert abs(float(change.detach())) < 1e-6
    assert float(fraction) == pytest.approx(1.0, abs=1e-6)


def test_value_and_gradient_follow_the_formula():
    sampler, trained = _schnet_only(0), _schnet_only(5).double()  # float64: no cancellation
    frames = _frames(sampler)
    frames = EnsembleSet(*(t.double() for t in (frames.teacher, frames.teacher_offset,
                                                frames.model, frames.model_offset)), 300.0)
    beta = 1.0 / (KB * 300.0)
    change, fraction = relative_entropy_change(trained, frames, "cpu")
    grads = torch.autograd.grad(change, list(trained.parameters()))
    # by hand: ΔU per frame, the weights w ∝ exp(−β ΔU) of the sampler's frames
    with torch.no_grad():
        du_t = schnet_energies(trained, frames.teacher) + frames.teacher_offset
        du_m = schnet_energies(trained, frames.model) + frames.model_offset
    w = torch.softmax(-beta * du_m, 0)
    expected = beta * du_t.mean() + torch.log(torch.exp(-beta * du_m).mean())
    assert float(change.detach()) == pytest.approx(float(expected), rel=1e-10, abs=1e-12)
    assert float(fraction) == pytest.approx(float(1.0 / (w.square().sum() * 4)), rel=1e-10)
    assert float(fraction) < 1.0
    # gradient: β (mean of ∂U/∂θ over the teacher's frames − its w-weighted mean over the
    # sampler's), summed from one frame at a time
    by_hand = [torch.zeros_like(p) for p in trained.parameters()]
    mean = torch.full((3,), 1 / 3, dtype=torch.float64)
    for positions, weights in ((frames.teacher, mean), (frames.model, -w)):
        for k in range(positions.shape[0]):
            energy = schnet_energies(trained, positions[k : k + 1]).sum()
            for total, g in zip(by_hand, torch.autograd.grad(energy, list(trained.parameters())),
                                strict=True):
                total += beta * float(weights[k]) * g
    for g, h in zip(grads, by_hand, strict=True):
        torch.testing.assert_close(g, h, rtol=1e-9, atol=1e-12)


def test_equal_weights_give_the_contrastive_change_with_the_same_gradient_at_the_sampler():
    sampler = _schnet_only(0)
    frames = _frames(sampler)
    grads = {}
    for reweight in (True, False):
        change, _ = relative_entropy_change(sampler, frames, "cpu", reweight=reweight)
        assert abs(float(change.detach())) < 1e-6
        grads[reweight] = torch.autograd.grad(change, list(sampler.parameters()))
    for a, b in zip(grads[True], grads[False], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    # away from the sampler: β (⟨ΔU⟩_teacher − ⟨ΔU⟩_model), every model frame counting
    trained = _schnet_only(5).double()  # float64: no cancellation
    frames = EnsembleSet(*(t.double() for t in (frames.teacher, frames.teacher_offset,
                                                frames.model, frames.model_offset)), 300.0)
    change, fraction = relative_entropy_change(trained, frames, "cpu", reweight=False)
    change = change.detach()
    with torch.no_grad():
        du_t = schnet_energies(trained, frames.teacher) + frames.teacher_offset
        du_m = schnet_energies(trained, frames.model) + frames.model_offset
    beta = 1.0 / (KB * 300.0)
    assert float(change) == pytest.approx(float(beta * (du_t.mean() - du_m.mean())),
                                          rel=1e-10)
    reweighted, same_fraction = relative_entropy_change(trained, frames, "cpu")
    assert float(same_fraction) == pytest.approx(float(fraction)) and float(fraction) < 1.0
    assert float(change) != pytest.approx(float(reweighted.detach()), rel=1e-3)


def test_one_dominant_frame_leaves_a_fraction_of_one_frame():
    potential = _schnet_only()
    frames = _frames(potential)
    frames.model_offset = frames.model_offset - torch.tensor([0.0, 0.0, 0.0, 50.0])
    assert float(relative_entropy_change(potential, frames, "cpu")[1]) == pytest.approx(
        0.25, rel=1e-3
    )
    change, fraction = validation_relative_entropy(potential, [frames, _frames(potential)], 2,
                                                   "cpu")
    assert fraction == pytest.approx(0.25, rel=1e-3)  # the smaller of the two temperatures
    beta = 1.0 / (KB * 300.0)
    assert change == pytest.approx((beta * 50.0 - math.log(4)) / 2, rel=1e-3)


def test_sets_pair_the_frames_of_each_temperature():
    positions = torch.arange(6.0).reshape(6, 1, 1).expand(6, 2, 3)
    temperature = torch.tensor([300.0, 300.0, 330.0, 360.0, 300.0, 330.0])
    teacher = torch.tensor([True, True, False, True, False, False])
    model = ~teacher
    sets = ensemble_sets(positions, temperature, teacher, model, torch.arange(6.0))
    # 330 K has sampler frames only, 360 K teacher frames only: one set, at 300 K
    assert [s.temperature for s in sets] == [300.0]
    assert sets[0].teacher[:, 0, 0].tolist() == [0.0, 1.0]
    assert sets[0].model[:, 0, 0].tolist() == [4.0] and sets[0].model_offset.tolist() == [4.0]
    with pytest.raises(ValueError, match="no temperature has both"):
        ensemble_sets(positions, temperature, teacher & (temperature > 350), model,
                      torch.zeros(6))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"ensemble_weight": -1.0}, "ensemble_weight must be a finite number >= 0"),
     ({"min_sample_fraction": 1.0}, r"min_sample_fraction must lie in \[0, 1\)"),
     ({"ensemble_check_every": 0}, "ensemble_check_every must be >= 1")],
)
def test_settings_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FitSettings(**kwargs)


def _train(frames: EnsembleSet, min_fraction: float, epochs: int = 3):
    """Train a fresh copy of the sampler on the ensemble term alone (zero force targets,
    force weight swamped by a large ensemble weight), checking the fraction every step."""
    schnet = small_schnet(0, **TINY)
    positions = torch.cat([frames.teacher, frames.model])
    data = (positions, torch.zeros_like(positions))
    settings = FitSettings(epochs=epochs, batch_size=4, learning_rate=3e-3, ensemble_weight=50.0,
                           min_sample_fraction=min_fraction, ensemble_check_every=1,
                           patience=50)
    result = train_force_matching(schnet, tiny_system().bead_types, data, data, settings,
                                  progress=False, ensemble=([frames], [frames]))
    return schnet, result


def test_training_lowers_the_relative_entropy_and_stops_where_the_frames_run_out():
    frames = _frames(_schnet_only(0), model_shift=0.6)
    _, free = _train(frames, 0.0)
    changes = [row["val_relative_entropy"] for row in free.history]
    fractions = [row["ensemble_sample_fraction"] for row in free.history]
    assert changes[-1] < changes[0] < 0.0 and not free.stopped_by_reweighting
    assert fractions[0] > fractions[1] > fractions[2]
    # a threshold the second epoch crosses: training stops there, with the weights of the
    # last step that kept the fraction above it
    threshold = (fractions[0] + fractions[1]) / 2
    schnet, stopped = _train(frames, threshold)
    assert stopped.stopped_by_reweighting and len(stopped.history) == 2
    kept = Potential(tiny_system().bead_types, schnet)
    change, fraction = validation_relative_entropy(kept, [frames], 4, "cpu")
    assert threshold <= fraction < fractions[0] and change < changes[0]
    assert stopped.history[-1]["ensemble_sample_fraction"] == pytest.approx(fraction)
    # a threshold the first step already crosses: the starting weights are kept
    schnet, stopped = _train(frames, 0.999999)
    assert stopped.stopped_by_reweighting and len(stopped.history) == 1
    for key, value in schnet.state_dict().items():
        assert torch.equal(value, small_schnet(0, **TINY).state_dict()[key]), key


def test_pipeline_and_cli_record_the_term(tmp_path, capsys):
    sys = tiny_system()
    teacher = teacher_potential(sys)
    data = generate_teacher_data(sys, teacher, [300.0], 2, 40, 10, seed=0)
    settings = TrainSettings(
        fit=FitSettings(epochs=1, batch_size=4, ensemble_weight=0.1), progress=False,
        schnet=small_schnet(**TINY).config,
    )
    with pytest.raises(ValueError, match="needs frames of a sampler model"):
        train_potential(sys, teacher, data, settings, tmp_path)
    with pytest.raises(ValueError, match="the sampler's frame mask has shape"):
        train_potential(sys, teacher, data, settings, tmp_path,
                        SamplerFrames(_schnet_only(), torch.ones(3, dtype=torch.bool)))
    common = ["--protein", "cln025", "--hidden", "8", "--filters", "8", "--blocks", "1",
              "--num-rbf", "6", "--cutoff", "5", "--epochs", "2", "--batch-size", "4",
              "--device", "cpu", "--quiet", "--replicas", "2", "--steps", "40",
              "--save-every", "10", "--equilibration", "0", "--temperatures", "300,330",
              # this barely trained model's frames may overlap: all are kept here
              "--sampler-max-force", "1e12"]
    assert main(["train", "--generate", "--out", str(tmp_path / "a"), *common]) == 0
    model = tmp_path / "a" / "cln025.pt"
    run = Simulation(sys, teacher, LangevinIntegrator(), replicas=2)
    run.positions[1] += 5.0  # a second starting structure, far from the native one
    (tmp_path / "run").mkdir()
    run.save_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert main(["train", "--generate", "--sampler", str(model), "--start-from", str(model),
                 "--ensemble-weight", "0.1", "--min-sample-fraction", "0", "--compact", "0.8",
                 "--compact-replicas", "1", "--compact-steps", "20", "--teacher-start",
                 str(tmp_path / "run"), "--save-data", str(tmp_path / "data.pt"),
                 "--out", str(tmp_path / "b"), *common]) == 0
    card = json.loads((tmp_path / "b" / "cln025.json").read_text())
    assert card["data"]["teacher_start"] == str(tmp_path / "run")
    term = card["training"]["relative_entropy"]
    assert term["weight"] == 0.1 and term["temperatures_K"] == [300.0, 330.0]
    # the teacher's replicas started from the run's structures, in turn
    data, _ = load_teacher_data(tmp_path / "data.pt")
    centre = data["positions"][:16].mean(1) - run.positions.mean(1)[[0, 1, 0, 1]].repeat(4, 1)
    assert centre.norm(dim=-1).max() < 3.0
    assert main(["train", "--generate", "--sampler", str(model), "--ensemble-weight", "0.1",
                 "--ensemble-temperatures", "330", "--min-sample-fraction", "0",
                 "--val-fraction", "0.5", "--out", str(tmp_path / "d"), *common]) == 0
    assert term["min_sample_fraction"] == 0.0 and not term["stopped_by_reweighting"]
    assert term["check_every_steps"] == 50
    assert 0.0 < term["kept_epoch"]["ensemble_sample_fraction"] <= 1.0
    rows = read_epoch_log(tmp_path / "b" / "cln025.pt")
    # the continued model's two epochs have no term; this run's two have it
    assert [row["val_relative_entropy"] is None for row in rows] == [True, True, False, False]
    assert [row["epoch"] for row in rows] == [1, 2, 3, 4]
    only = json.loads((tmp_path / "d" / "cln025.json").read_text())["training"]
    assert only["relative_entropy"]["temperatures_K"] == [330.0]
    capsys.readouterr()
    assert main(["train", "--generate", "--ensemble-weight", "0.1",
                 "--out", str(tmp_path / "c"), *common]) == 2
    assert "--ensemble-weight compares the teacher's frames with a model's: add --sampler" in (
        capsys.readouterr().err
    )
    assert main(["train", "--protein", "cln025", "--data", str(tmp_path / "data.pt"),
                 "--teacher-start", str(tmp_path / "run"), "--out", str(tmp_path / "e")]) == 2
    assert "--teacher-start starts new teacher runs" in capsys.readouterr().err
    # a start that is not a run is refused before the output folder is made
    assert main(["train", "--protein", "cln025", "--generate", "--teacher-start",
                 str(tmp_path / "none"), "--out", str(tmp_path / "f")]) == 2
    assert "no checkpoint at" in capsys.readouterr().err and not (tmp_path / "f").exists()
