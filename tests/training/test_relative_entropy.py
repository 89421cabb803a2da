"""The relative-entropy term: its value and gradient against the formula, the effective
sample fraction, the per-temperature sets, training with it (and its stop), the card and
the CLI's ``--ensemble-weight``; walkers of the model being trained as the term's model
frames."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch
from helpers import perturbed_positions, small_schnet, system, tiny_system

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
    OnlineEnsemble,
    OnlineSettings,
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


def _train(frames: EnsembleSet, min_fraction: float, epochs: int = 3, backoffs: int = 0):
    """Train a fresh copy of the sampler on the ensemble term alone (zero force targets,
    force weight swamped by a large ensemble weight), checking the fraction every step."""
    schnet = small_schnet(0, **TINY)
    positions = torch.cat([frames.teacher, frames.model])
    data = (positions, torch.zeros_like(positions))
    settings = FitSettings(epochs=epochs, batch_size=4, learning_rate=3e-3, ensemble_weight=50.0,
                           min_sample_fraction=min_fraction, ensemble_check_every=1,
                           patience=50, reweighting_backoffs=backoffs)
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
    assert stopped.reweighting_kept_step == 0 and stopped.reweighting_backoffs == 0
    for key, value in schnet.state_dict().items():
        assert torch.equal(value, small_schnet(0, **TINY).state_dict()[key]), key


def test_backoffs_halve_the_rate_and_get_further_than_stopping():
    """A threshold the first step at the full rate crosses: with backoffs, each crossing
    restores the last passing weights and halves the rate, and training moves the weights
    as far as the frames allow, where without them it keeps the starting weights."""
    frames = _frames(_schnet_only(0), model_shift=0.6)
    threshold = 0.99995
    _, stopped = _train(frames, threshold)
    assert stopped.stopped_by_reweighting and stopped.reweighting_kept_step == 0
    schnet, backed = _train(frames, threshold, backoffs=8)
    used = backed.reweighting_backoffs
    assert 1 <= used <= 8 and backed.reweighting_kept_step > 0
    assert backed.stopped_by_reweighting == (used == 8)
    assert backed.history[-1]["learning_rate"] == pytest.approx(3e-3 * 0.5**used)
    kept = Potential(tiny_system().bead_types, schnet)
    change, fraction = validation_relative_entropy(kept, [frames], 4, "cpu")
    assert fraction >= threshold and change < 0.0
    with pytest.raises(ValueError, match="reweighting_backoffs must be >= 0"):
        FitSettings(reweighting_backoffs=-1)


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
    capsys.readouterr()
    # a threshold the first check crosses, after one backoff as well: the summary says
    # the model came out unchanged
    assert main(["train", "--generate", "--sampler", str(model), "--ensemble-weight", "0.1",
                 "--ensemble-temperatures", "330", "--min-sample-fraction", "0.9999999",
                 "--ensemble-check-every", "1", "--reweighting-backoffs", "1",
                 "--val-fraction", "0.5", "--out", str(tmp_path / "d"), *common]) == 0
    assert ("stopped: sample fraction below 0.9999999 after 1 of 1 backoffs; kept the weights "
            "training started from: the model is unchanged") in capsys.readouterr().out
    assert term["min_sample_fraction"] == 0.0 and not term["stopped_by_reweighting"]
    assert term["check_every_steps"] == 50
    assert 0.0 < term["kept_epoch"]["ensemble_sample_fraction"] <= 1.0
    rows = read_epoch_log(tmp_path / "b" / "cln025.pt")
    # the continued model's two epochs have no term; this run's two have it
    assert [row["val_relative_entropy"] is None for row in rows] == [True, True, False, False]
    assert [row["epoch"] for row in rows] == [1, 2, 3, 4]
    only = json.loads((tmp_path / "d" / "cln025.json").read_text())["training"]
    assert only["relative_entropy"]["temperatures_K"] == [330.0]
    assert only["relative_entropy"]["backoffs"] == {"allowed": 1, "used": 1}
    assert only["relative_entropy"]["kept_step"] == 0
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


def _walkers(walkers: int = 3, steps: int = 20, save_every: int = 10,
             refresh_every: int = 2, starts: torch.Tensor | None = None,
             **options) -> OnlineEnsemble:
    sys = tiny_system()
    teacher = perturbed_positions(sys, replicas=5, sigma=0.1, seed=1, dtype=torch.float32)
    settings = OnlineSettings(walkers=walkers, temperature=300.0, refresh_every=refresh_every,
                              steps=steps, save_every=save_every, **options)
    return OnlineEnsemble(sys, sys.bead_types, teacher_potential(sys).priors, teacher, settings,
                          starts=starts)


def _nearest_teacher_gap(online: OnlineEnsemble, walker: torch.Tensor) -> float:
    return float((online.teacher_frames - walker).flatten(1).norm(dim=1).min())


def test_a_run_uses_the_current_weights_and_continues_where_the_last_ended():
    online = _walkers()
    schnet = small_schnet(0, **TINY)
    started = online.positions.clone()
    frames = online.refresh(schnet)
    # 3 walkers × 2 kept frames, and as many teacher frames drawn
    assert frames.model.shape == (6, tiny_system().n_beads, 3) == frames.teacher.shape
    assert frames.temperature == 300.0
    assert torch.equal(online.positions, frames.model[3:])  # the last kept frames
    assert not torch.equal(online.positions, started)
    change, fraction = relative_entropy_change(
        Potential(tiny_system().bead_types, schnet), frames, "cpu")
    assert abs(float(change.detach())) < 1e-5 and float(fraction) == pytest.approx(1.0)
    # the weights change (an optimiser step, say): the next run copies the new ones
    with torch.no_grad():
        for p in schnet.parameters():
            p.mul_(1.5)
    again = online.refresh(schnet)
    change, fraction = relative_entropy_change(
        Potential(tiny_system().bead_types, schnet), again, "cpu")
    assert abs(float(change.detach())) < 1e-5 and float(fraction) == pytest.approx(1.0)
    assert len(online.history) == 2 and online.history[-1].restarted == 0
    assert 0.0 <= online.history[-1].q_mean <= 1.0
    card = online.card()
    assert card["refreshes"] == 2 and card["walkers"] == 3
    assert card["last_walker_state"]["folded"] == online.history[-1].folded


def test_burn_in_runs_before_the_first_kept_frames_only():
    schnet = small_schnet(0, **TINY)
    plain = _walkers(steps=40)
    frames = plain.refresh(schnet).model.view(4, 3, -1, 3)  # kept after 10, 20, 30, 40 steps
    burnt = _walkers(steps=20, burn_in=20)
    first = burnt.refresh(schnet).model.view(2, 3, -1, 3)  # after 20 + 10 and 20 + 20
    torch.testing.assert_close(first, frames[2:])
    assert burnt.card()["burn_in"] == 20
    ended = burnt.positions.clone()
    second = burnt.refresh(schnet).model.view(2, 3, -1, 3)
    plain_again = _walkers(steps=20)
    plain_again.positions = ended
    plain_again.history = list(burnt.history[:1])  # the same run count: the same seed
    torch.testing.assert_close(second, plain_again.refresh(schnet).model.view(2, 3, -1, 3))


def test_a_frozen_walker_is_left_out_and_restarts_from_a_teacher_frame():
    online = _walkers()
    online.positions[1, 0] += 1000.0  # far beyond the safe extent: frozen at once
    frames = online.refresh(small_schnet(0, **TINY))
    assert frames.model.shape[0] == 4 and online.history[-1].restarted == 1
    # the restarted walker sits on one of the teacher frames again
    assert _nearest_teacher_gap(online, online.positions[1]) == 0.0
    assert online.card()["walkers_restarted"] == 1


def test_half_of_the_walkers_start_from_given_structures():
    starts = perturbed_positions(tiny_system(), replicas=3, sigma=0.5, seed=7,
                                 dtype=torch.float32)
    online = _walkers(walkers=4, starts=starts)
    assert torch.equal(online.positions[:2], starts[:2])
    assert all(_nearest_teacher_gap(online, w) == 0.0 for w in online.positions[2:])
    assert online.card()["walkers_from_given_starts"] == 2
    with pytest.raises(ValueError, match=r"walker starts of .* must have shape \(S, "):
        _walkers(starts=starts[:, :3])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"walkers": 0}, "walkers must be >= 1"),
        ({"steps": 10, "save_every": 20}, "must not exceed steps"),
        ({"temperature": -1.0}, "temperature must be positive"),
        ({"start_fraction": 1.5}, "start_fraction must lie in"),
        ({"burn_in": -1}, "burn_in must be >= 0"),
    ],
)
def test_online_settings_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        OnlineSettings(**kwargs)


def test_no_teacher_frames_is_refused():
    sys = tiny_system()
    with pytest.raises(ValueError, match="no teacher frames at 300.0 K"):
        OnlineEnsemble(sys, sys.bead_types, {}, torch.zeros(0, sys.n_beads, 3),
                       OnlineSettings())


@pytest.mark.parametrize("contrastive", [False, True])
def test_training_lowers_the_term_on_each_run_and_keeps_the_last_weights(
    contrastive, monkeypatch
):
    import workbench.training.force_matching as force_matching

    forms = []
    change_of = force_matching.relative_entropy_change
    monkeypatch.setattr(force_matching, "relative_entropy_change",
                        lambda *a, **k: forms.append(k["reweight"]) or change_of(*a, **k))
    online = _walkers(walkers=4, steps=40, save_every=10, refresh_every=3,
                      contrastive=contrastive)
    runs = []
    refresh = online.refresh
    online.refresh = lambda schnet: runs.append((refresh(schnet), _copy(schnet))) or runs[-1][0]
    schnet = small_schnet(0, **TINY)
    positions = perturbed_positions(tiny_system(), replicas=8, sigma=0.2, seed=3,
                                    dtype=torch.float32)
    data = (positions, torch.zeros_like(positions))
    settings = FitSettings(epochs=2, batch_size=4, learning_rate=1e-3, ensemble_weight=50.0,
                           patience=50)
    result = train_force_matching(schnet, tiny_system().bead_types, data, data, settings,
                                  progress=False, online=online)
    # 2 epochs × 2 steps, a run every 3 steps: runs before steps 1 and 4
    assert len(runs) == len(online.history) == 2
    # the steps after each run lowered the term over that run's frames
    after = [runs[1][1], _copy(schnet)]
    for (frames, _), weights in zip(runs, after, strict=True):
        model = small_schnet(0, **TINY)
        model.load_state_dict(weights)
        change = relative_entropy_change(Potential(tiny_system().bead_types, model), frames,
                                         "cpu", reweight=not contrastive)[0]
        assert float(change.detach()) < 0.0
    assert forms == [not contrastive] * 4  # the form the settings ask for, at every step
    assert result.best_epoch == 2  # the last epoch's weights, not the best force loss's
    rows = result.history
    assert rows[0]["walker_q_mean"] == online.history[0].q_mean
    assert rows[1]["walker_folded"] == online.history[1].folded
    assert rows[0]["ensemble_sample_fraction"] is None  # no second run in epoch 1
    assert 0.0 < rows[1]["ensemble_sample_fraction"] <= 1.0
    assert rows[1]["val_relative_entropy"] is None


def _copy(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_walkers_and_sampler_sets_together_are_refused():
    online = _walkers()
    positions = perturbed_positions(tiny_system(), replicas=4, dtype=torch.float32)
    data = (positions, torch.zeros_like(positions))
    frames = online.refresh(small_schnet(0, **TINY))
    with pytest.raises(ValueError, match="sampler frames or walkers, not both"):
        train_force_matching(small_schnet(0, **TINY), tiny_system().bead_types, data, data,
                             FitSettings(epochs=1, ensemble_weight=1.0), progress=False,
                             ensemble=([frames], [frames]), online=online)


def test_cli_trains_with_walkers_and_records_them(tmp_path, capsys):
    common = ["train", "--protein", "cln025", "--generate", "--hidden", "8", "--filters", "8",
              "--blocks", "1", "--num-rbf", "6", "--cutoff", "5", "--epochs", "2",
              "--batch-size", "4", "--device", "cpu", "--quiet", "--replicas", "2",
              "--steps", "40", "--save-every", "10", "--equilibration", "0",
              "--temperatures", "300,330"]
    run = Simulation(system("cln025"), teacher_potential(
        system("cln025")), LangevinIntegrator(), replicas=1)
    (tmp_path / "run").mkdir()
    run.save_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert main([*common, "--ensemble-weight", "0.1", "--online-walkers", "2",
                 "--online-every", "2", "--online-steps", "20", "--online-save-every", "10",
                 "--online-start", str(tmp_path / "run"), "--online-burn-in", "10",
                 "--online-contrastive", "--out", str(tmp_path / "a")]) == 0
    assert "walkers" in capsys.readouterr().out
    term = json.loads((tmp_path / "a" / "cln025.json").read_text())["training"][
        "relative_entropy"]
    walkers = term["walkers"]
    assert term["weight"] == 0.1 and walkers["temperature"] == 300.0
    # 14 training frames (16 less the validation split's 2) at 4 per step: 4 steps per
    # epoch, a run every 2 steps
    assert walkers["refreshes"] == 4 and walkers["steps"] == 20
    assert walkers["walkers_from_given_starts"] == 1
    assert walkers["burn_in"] == 10 and walkers["contrastive"] is True
    with open(tmp_path / "a" / "cln025.log.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert all(0.0 <= float(row["walker_q_mean"]) <= 1.0 for row in rows)
    assert main([*common, "--online-walkers", "2", "--out", str(tmp_path / "b")]) == 2
    assert "--online-walkers feeds the relative-entropy term: add --ensemble-weight" in (
        capsys.readouterr().err)
    assert main([*common, "--ensemble-weight", "0.1", "--online-walkers", "2",
                 "--online-steps", "10", "--out", str(tmp_path / "c")]) == 2
    assert "online save_every (100) must not exceed steps (10)" in capsys.readouterr().err
    assert main([*common, "--online-start", str(tmp_path / "run"),
                 "--out", str(tmp_path / "d")]) == 2
    assert "--online-start gives the walkers' starting structures: add --online-walkers" in (
        capsys.readouterr().err)
    assert not any((tmp_path / name).exists() for name in "bcd")
