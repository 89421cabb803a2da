"""The moving average of a network's weights: its update rule, the block that lends the
averaged weights, and force matching that validates and keeps them."""

from __future__ import annotations

import pytest
import torch
from helpers import small_schnet, tiny_system

from workbench.teacher import teacher_potential
from workbench.training.data import generate_teacher_data
from workbench.training.force_matching import FitSettings, train_force_matching
from workbench.training.online_ensemble import OnlineEnsemble, OnlineSettings
from workbench.training.relative_entropy import EnsembleSet
from workbench.training.weight_average import WeightAverage

TINY = {"hidden": 8, "filters": 8, "blocks": 1, "num_rbf": 6, "cutoff": 5.0}


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_update_follows_the_rule_and_the_block_lends_the_average():
    module = torch.nn.Linear(3, 2)
    start = _state(module)
    average = WeightAverage(module, 0.75)
    with torch.no_grad():
        module.weight.add_(4.0)
    average.update(module)
    torch.testing.assert_close(average.shadow["weight"], start["weight"] + 1.0)  # 0.25 × 4
    moved = _state(module)
    with average.applied(module):
        torch.testing.assert_close(module.weight, start["weight"] + 1.0)
    torch.testing.assert_close(module.weight, moved["weight"])
    with pytest.raises(RuntimeError, match="inside"), average.applied(module):
        raise RuntimeError("inside")
    torch.testing.assert_close(module.weight, moved["weight"])  # restored after an error
    with pytest.raises(ValueError, match=r"decay must lie in \[0, 1\)"):
        WeightAverage(module, 1.0)


@pytest.fixture(scope="module")
def frames():
    sys = tiny_system()
    data = generate_teacher_data(sys, teacher_potential(sys), [300.0], 2, 80, 10, seed=0)
    return data["positions"], data["forces"]


def _fit(frames, monkeypatch=None, online=None, **options):
    """Two epochs of 4 steps; with ``monkeypatch``, the raw weights after every step."""
    steps = []
    if monkeypatch is not None:
        step = torch.optim.Adam.step

        def recording(self, *args, **kwargs):
            out = step(self, *args, **kwargs)
            steps.append(_state(schnet))
            return out

        monkeypatch.setattr(torch.optim.Adam, "step", recording)
    schnet = small_schnet(0, **TINY)
    settings = FitSettings(epochs=2, batch_size=4, learning_rate=1e-2, patience=10,
                           **options)
    result = train_force_matching(schnet, tiny_system().bead_types, frames, frames, settings,
                                  progress=False, online=online)
    return schnet, result, steps


def _average_along(steps: list[dict], decay: float) -> dict[str, torch.Tensor]:
    expected = _state(small_schnet(0, **TINY))
    for state in steps:
        for name, value in expected.items():
            if value.is_floating_point():
                value.lerp_(state[name], 1.0 - decay)
    return expected


def test_training_keeps_and_validates_the_averaged_weights(frames, monkeypatch):
    raw, raw_result, steps = _fit(frames, monkeypatch)
    monkeypatch.undo()
    assert len(steps) == 8
    averaged, result, _ = _fit(frames, weight_average=0.8)
    # the optimiser's own path is the same; the kept weights are the average along it,
    # taken at the best epoch's end
    expected = _average_along(steps[: 4 * result.best_epoch], 0.8)
    for name, value in averaged.state_dict().items():
        torch.testing.assert_close(value, expected[name])
    assert result.history[0]["val_force_rmse"] != raw_result.history[0]["val_force_rmse"]
    # decay 0: the average is the latest weights, the run the plain one
    plain, plain_result, _ = _fit(frames, weight_average=0.0)
    latest, latest_result, _ = _fit(frames, weight_average=1e-12)
    for name, value in plain.state_dict().items():
        torch.testing.assert_close(latest.state_dict()[name], value)
    assert [row["val_force_rmse"] for row in latest_result.history] == pytest.approx(
        [row["val_force_rmse"] for row in plain_result.history], rel=1e-5)


def test_with_walkers_the_last_average_is_kept(frames, monkeypatch):
    sys = tiny_system()

    def walkers():
        settings = OnlineSettings(walkers=2, refresh_every=3, steps=20, save_every=10)
        return OnlineEnsemble(sys, sys.bead_types, teacher_potential(sys).priors,
                              frames[0][:4], settings)

    _, _, steps = _fit(frames, monkeypatch, walkers(), ensemble_weight=1.0)
    monkeypatch.undo()
    averaged, result, _ = _fit(frames, online=walkers(), ensemble_weight=1.0,
                               weight_average=0.5)
    assert result.best_epoch == 2
    expected = _average_along(steps, 0.5)
    for name, value in averaged.state_dict().items():
        torch.testing.assert_close(value, expected[name])


def test_sampler_frames_refuse_the_average(frames):
    positions = frames[0][:4]
    zeros = torch.zeros(4)
    sets = [EnsembleSet(positions, zeros, positions, zeros, 300.0)]
    with pytest.raises(ValueError, match="weight averaging goes with walkers"):
        train_force_matching(
            small_schnet(0, **TINY), tiny_system().bead_types, frames, frames,
            FitSettings(epochs=1, ensemble_weight=1.0, weight_average=0.5), progress=False,
            ensemble=(sets, sets),
        )
