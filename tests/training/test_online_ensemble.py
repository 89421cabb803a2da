"""Walkers of the model being trained as the relative-entropy term's model frames."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from helpers import perturbed_positions, small_schnet, system, tiny_system

from workbench.cli import main
from workbench.md import LangevinIntegrator, Simulation
from workbench.model.potential import Potential
from workbench.teacher import teacher_potential
from workbench.training.force_matching import FitSettings, train_force_matching
from workbench.training.online_ensemble import OnlineEnsemble, OnlineSettings
from workbench.training.relative_entropy import relative_entropy_change

TINY = {"hidden": 8, "filters": 8, "blocks": 1, "num_rbf": 6, "cutoff": 5.0}


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
def test_settings_are_checked(kwargs, match):
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
