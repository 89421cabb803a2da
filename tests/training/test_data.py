"""Teacher data sampled by another potential: teacher-labelled forces, the ``sampled`` mark
through concatenation and files, priors fitted without those frames, and the CLI's
rounds of ``--sampler`` on saved data."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import small_config, tiny_system

from workbench.cli import main
from workbench.md import LangevinIntegrator, Simulation
from workbench.model import load_potential
from workbench.teacher import teacher_potential
from workbench.training.data import (
    concatenate_data,
    generate_teacher_data,
    load_teacher_data,
    sampled_mask,
    save_teacher_data,
    without_violent_frames,
)
from workbench.training.force_matching import FitSettings
from workbench.training.pipeline import TrainSettings, train_potential

TINY = {"hidden": 8, "filters": 8, "blocks": 1, "num_rbf": 6, "cutoff": 5.0}


def tiny_train_args(replicas: int, steps: int, equilibration: int, *extra: str) -> list[str]:
    """``workbench train`` options of a one-epoch CLN025 run with a tiny network on the CPU."""
    return ["--protein", "cln025", "--hidden", "8", "--filters", "8", "--blocks", "1",
            "--num-rbf", "6", "--cutoff", "5", "--epochs", "1", "--batch-size", "8",
            "--device", "cpu", "--quiet", "--replicas", str(replicas), "--steps", str(steps),
            "--save-every", "10", "--equilibration", str(equilibration), *extra]


def test_frames_sampled_by_another_potential_carry_the_teachers_forces(tmp_path):
    system = tiny_system()
    teacher = teacher_potential(system)
    sampler = teacher_potential(system, epsilon=0.02)  # shallower wells: other dynamics
    own = generate_teacher_data(system, teacher, [300.0], 2, 40, 10, seed=0)
    sampled = generate_teacher_data(system, teacher, [300.0], 2, 40, 10, seed=0, sampler=sampler)
    assert "sampled" not in own and sampled["sampled"].all()
    assert not torch.equal(own["positions"], sampled["positions"])
    _, expected = teacher.energy_and_forces(sampled["positions"], None)
    torch.testing.assert_close(sampled["forces"], expected, rtol=1e-5, atol=1e-4)
    _, sampler_forces = sampler.energy_and_forces(sampled["positions"], None)
    assert not torch.allclose(sampled["forces"], sampler_forces, atol=1e-3)

    merged = concatenate_data(own, sampled)
    assert sampled_mask(merged).tolist() == [False] * 8 + [True] * 8
    save_teacher_data(merged, tmp_path / "merged.pt")
    loaded, _ = load_teacher_data(tmp_path / "merged.pt")
    assert torch.equal(loaded["sampled"], merged["sampled"])
    save_teacher_data(own, tmp_path / "own.pt")
    assert "sampled" not in load_teacher_data(tmp_path / "own.pt")[0]


def test_sampler_replicas_start_from_the_given_structures():
    system = tiny_system()
    teacher = teacher_potential(system)
    native = system.native_positions
    starts = torch.stack([native, native + torch.tensor([5.0, 0.0, 0.0])])
    data = generate_teacher_data(
        system, teacher, [300.0, 330.0], 3, 1, 1, seed=0, sampler=teacher, starts=starts
    )
    expected = starts[[0, 1, 0, 0, 1, 0]]  # replica r of each temperature: starts[r mod 2]
    shift = (data["positions"] - expected).norm(dim=-1)
    assert shift.max() < 0.2  # one 4-fs step from its start, 5 Å from the other one
    with pytest.raises(ValueError, match=r"must have shape \(S, 49, 3\), got \(2, 48, 3\)"):
        generate_teacher_data(system, teacher, [300.0], 2, 1, 1, starts=starts[:, 1:])


def test_priors_are_fitted_on_the_teachers_own_frames_only(tmp_path):
    system = tiny_system()
    teacher = teacher_potential(system)
    own = generate_teacher_data(system, teacher, [300.0], 4, 100, 10, seed=0)
    stretched = {k: v.clone() for k, v in own.items()}
    stretched["positions"] = 1.3 * stretched["positions"]  # nothing like the teacher's
    stretched["sampled"] = torch.ones(own["temperature"].shape[0], dtype=torch.bool)
    settings = TrainSettings(
        schnet=small_config(**TINY), fit=FitSettings(epochs=1, batch_size=20), progress=False
    )
    (tmp_path / "own").mkdir()
    (tmp_path / "both").mkdir()
    alone, _ = train_potential(system, teacher, own, settings, tmp_path / "own")
    both, card = train_potential(
        system, teacher, concatenate_data(own, stretched), settings, tmp_path / "both"
    )
    for name, prior in alone.priors.items():
        for key, value in prior.state_dict().items():
            assert torch.equal(value, both.priors[name].state_dict()[key]), (name, key)
    assert card["data"]["frames"] == 80 and card["data"]["frames_sampled_by_a_model"] == 40


def test_cli_train_adds_frames_the_model_samples(tmp_path, capsys):
    common = tiny_train_args(2, 40, 0)
    assert main(["train", "--generate", "--out", str(tmp_path / "a"), *common]) == 0
    model = tmp_path / "a" / "cln025.pt"
    run = Simulation(tiny_system(), load_potential(model), LangevinIntegrator(), replicas=2)
    run.positions[1] += 5.0  # a second starting structure, far from the native one
    (tmp_path / "run").mkdir()
    run.save_checkpoint(tmp_path / "run" / "checkpoint.pt")
    # an earlier round's run, with one structure further still: the sampler's three
    # replicas start from this run's and the other's in turn
    earlier = Simulation(tiny_system(), load_potential(model), LangevinIntegrator(),
                         replicas=1)
    earlier.positions += 12.0
    earlier.save_checkpoint(tmp_path / "earlier.pt")
    starts = f"{tmp_path / 'run'},{tmp_path / 'earlier.pt'}"
    assert main(["train", "--generate", "--sampler", str(model), "--sampler-replicas", "3",
                 "--sampler-steps", "60", "--sampler-save-every", "20",
                 # this barely trained model's frames may overlap: all are kept here
                 "--sampler-max-force", "1e12", "--save-data", str(tmp_path / "data.pt"),
                 "--sampler-start", starts,
                 "--out", str(tmp_path / "b"), *common]) == 0
    card = json.loads((tmp_path / "b" / "cln025.json").read_text())
    assert card["data"]["frames"] == 8 + 9 and card["data"]["frames_sampled_by_a_model"] == 9
    assert card["data"]["sampler"] == {"model": str(model), "start": starts, "frames": 9,
                                       "left_out": 0, "max_force": 1e12}
    assert "17 (9 from --sampler, --compact, --cold or --noise)" in capsys.readouterr().out
    data, _ = load_teacher_data(tmp_path / "data.pt")
    assert sampled_mask(data).tolist() == [False] * 8 + [True] * 9
    # frames are saved replica by replica within each save: run 0's first structure, the
    # earlier run's, then run 0's second
    origins = torch.cat([run.positions[:1], earlier.positions, run.positions[1:]]).mean(1)
    centre = data["positions"][8:].mean(1) - origins.repeat(3, 1)
    assert centre.norm(dim=-1).max() < 3.0  # each sampler replica stayed near its start
    # a later round samples with a model on saved data (here at another temperature), after
    # the earlier sampler's frames, which stay marked
    capsys.readouterr()
    assert main(["train", "--data", str(tmp_path / "data.pt"), "--sampler", str(model),
                 "--sampler-replicas", "1", "--sampler-steps", "40", "--sampler-save-every",
                 "20", "--temperatures", "350", "--save-data", str(tmp_path / "more.pt"),
                 "--sampler-max-force", "1e12",
                 "--out", str(tmp_path / "c"), *common]) == 0
    card = json.loads((tmp_path / "c" / "cln025.json").read_text())
    assert card["data"]["frames"] == 17 + 2 and card["data"]["frames_sampled_by_a_model"] == 11
    assert card["data"]["temperatures_K"] == [300.0, 350.0]
    # where the saved frames came from, and this call's sampler
    assert card["data"]["saved_data"] == {
        "file": str(tmp_path / "data.pt"),
        "sampler": {"model": str(model), "start": starts, "frames": 9, "left_out": 0,
                    "max_force": 1e12},
    }
    assert card["data"]["sampler"] == {"model": str(model), "start": None, "frames": 2,
                                       "left_out": 0, "max_force": 1e12}
    more, _ = load_teacher_data(tmp_path / "more.pt")
    assert sampled_mask(more).tolist() == [False] * 8 + [True] * 11
    assert torch.equal(more["positions"][:17], data["positions"])
    assert more["temperature"].tolist() == [300.0] * 17 + [350.0] * 2


def test_frames_with_a_force_above_the_limit_are_left_out():
    forces = torch.zeros(4, 3, 3)
    forces[1, 2] = torch.tensor([0.0, 600.0, 800.0])  # norm 1000: kept (the limit is inclusive)
    forces[2, 0, 0] = -1000.5
    forces[3, 1] = torch.tensor([1e8, 0.0, 0.0])
    data = {"positions": torch.arange(36.0).reshape(4, 3, 3), "forces": forces,
            "temperature": torch.tensor([300.0, 330.0, 360.0, 300.0]),
            "sampled": torch.ones(4, dtype=torch.bool)}
    kept, dropped = without_violent_frames(data, 1000.0)
    assert dropped == 2
    assert kept["temperature"].tolist() == [300.0, 330.0]
    assert torch.equal(kept["positions"], data["positions"][:2])
    assert torch.equal(kept["forces"], forces[:2]) and kept["sampled"].tolist() == [True, True]
    assert without_violent_frames(data, float("inf"))[1] == 0
    with pytest.raises(ValueError, match="max_force must be positive"):
        without_violent_frames(data, 0.0)


def test_cli_train_refuses_violent_samplers_and_bad_sampler_options(tmp_path, capsys):
    common = tiny_train_args(1, 20, 0)
    assert main(["train", "--generate", "--out", str(tmp_path / "a"), *common]) == 0
    capsys.readouterr()
    # thermal frames near native have teacher forces of tens of kcal/mol/Å
    code = main(["train", "--generate", "--sampler", str(tmp_path / "a" / "cln025.pt"),
                 "--sampler-max-force", "1e-3", "--out", str(tmp_path / "b"), *common])
    assert code == 2
    err = capsys.readouterr().err
    assert "every sampled frame has a teacher force above 0.001 kcal/mol/Å" in err
    assert not (tmp_path / "b" / "cln025.pt").exists()
    assert main(["train", "--generate", "--sampler", str(tmp_path / "a" / "cln025.pt"),
                 "--sampler-max-force", "0", "--out", str(tmp_path / "c"), *common]) == 2
    assert "--sampler-max-force must be positive, got 0.0" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
    assert main(["train", "--generate", "--sampler", str(tmp_path / "a" / "cln025.pt"),
                 "--sampler-equilibration", "-1", "--out", str(tmp_path / "c"), *common]) == 2
    assert "--sampler-equilibration must be >= 0, got -1" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_cli_sampler_equilibration_applies_to_the_sampler_only(tmp_path, monkeypatch):
    import workbench.training.data as data_module

    calls = []
    generate = data_module.generate_teacher_data

    def recording(*args, **kwargs):
        calls.append((kwargs.get("sampler") is not None, args[8]))  # the equilibration
        return generate(*args, **kwargs)

    monkeypatch.setattr(data_module, "generate_teacher_data", recording)
    common = tiny_train_args(1, 20, 30, "--sampler-max-force", "1e12")
    assert main(["train", "--generate", "--out", str(tmp_path / "a"), *common]) == 0
    model = str(tmp_path / "a" / "cln025.pt")
    assert main(["train", "--generate", "--sampler", model, "--sampler-equilibration", "0",
                 "--out", str(tmp_path / "b"), *common]) == 0
    assert main(["train", "--generate", "--sampler", model, "--out", str(tmp_path / "c"),
                 *common]) == 0
    # teacher runs keep --equilibration; the sampler's follows its own option, or that one
    assert calls == [(False, 30), (False, 30), (True, 0), (False, 30), (True, 30)]


def test_sampler_start_needs_a_sampler(tmp_path, capsys):
    code = main(["train", "--protein", "cln025", "--generate", "--sampler-start",
                 str(tmp_path), "--out", str(tmp_path / "out")])
    assert code == 2
    assert "--sampler-start gives the --sampler's starting structures" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cli_train_adds_cold_frames_from_native_kept_out_of_the_priors(tmp_path, capsys):
    common = tiny_train_args(4, 40, 0)
    assert main(["train", "--generate", "--cold", "100,150", "--save-data",
                 str(tmp_path / "data.pt"), "--out", str(tmp_path / "a"), *common]) == 0
    assert "24 (8 from --sampler, --compact, --cold or --noise)" in capsys.readouterr().out
    card = json.loads((tmp_path / "a" / "cln025.json").read_text())
    # a quarter of the 4 replicas per cold temperature, 4 frames each
    assert card["data"]["cold"] == {"temperatures_K": [100.0, 150.0], "start": "native",
                                    "frames": 8}
    assert card["priors"]["temperature_K"] == 300.0  # the teacher's own frames, not the cold
    data, _ = load_teacher_data(tmp_path / "data.pt")
    # each save holds a frame of every cold replica: the two temperatures alternate
    assert data["temperature"].tolist() == [300.0] * 16 + [100.0, 150.0] * 4
    assert sampled_mask(data).tolist() == [False] * 16 + [True] * 8
    # the cold replicas started from native and stayed near it
    native = tiny_system().native_positions
    assert (data["positions"][16:] - native).norm(dim=-1).max() < 3.0
    assert main(["train", "--generate", "--cold", "0,150", "--out", str(tmp_path / "b"),
                 *common]) == 2
    assert "--cold temperatures must be positive, got 0,150" in capsys.readouterr().err
