"""Frames of the squeezed teacher: the restraint's energy and forces, more compact frames
labelled by the plain teacher, kept out of the prior fit, and the CLI's ``--compact``.
Displaced teacher frames: the teacher's forces at the new positions, the displacement's
size, frames chosen from the teacher's own only, and the CLI's ``--noise``."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import tiny_system
from test_data import tiny_train_args

from workbench.cli import main
from workbench.teacher import teacher_potential
from workbench.training.data import (
    concatenate_data,
    generate_teacher_data,
    load_teacher_data,
    sampled_mask,
)
from workbench.training.extra_frames import (
    GyrationSqueeze,
    compacted_frames,
    displaced_frames,
    radius_of_gyration,
    squeezed_teacher,
)


def test_radius_of_gyration_of_a_known_shape():
    # four beads at the corners of a square of side 2 (centre at 1, 1): every bead √2 away
    square = torch.tensor([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [2.0, 2.0, 0.0]])
    assert radius_of_gyration(square).item() == pytest.approx(2**0.5)
    assert radius_of_gyration(torch.stack([square, 3 * square])).tolist() == pytest.approx(
        [2**0.5, 3 * 2**0.5]
    )


def test_squeeze_is_flat_below_its_target_and_its_forces_are_minus_the_gradient():
    torch.manual_seed(0)
    pos = 4.0 * torch.randn(3, 10, 3, dtype=torch.float64)
    pos[2] *= 1.5  # the largest of the three
    rg = radius_of_gyration(pos)
    target = rg.median().item()
    squeeze = GyrationSqueeze(target, strength=2.0).double()
    energy = squeeze(pos)
    expected = 2.0 * torch.relu(rg - target) ** 2
    torch.testing.assert_close(energy, expected, rtol=1e-5, atol=1e-9)  # float32 target
    assert (energy == 0.0).sum() == 2 and energy[2] > 0.0
    # central finite differences of the energy against the autograd gradient (above target)
    x = pos[2:3].clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(squeeze(x).sum(), x)
    step = 1e-5  # at 1e-6 the rounding of the float64 energies reaches 1e-6 of the slope
    for bead, axis in ((0, 0), (4, 1), (9, 2)):
        plus, minus = pos[2:3].clone(), pos[2:3].clone()
        plus[0, bead, axis] += step
        minus[0, bead, axis] -= step
        numeric = (squeeze(plus) - squeeze(minus)).item() / (2 * step)
        assert grad[0, bead, axis].item() == pytest.approx(numeric, rel=1e-6, abs=1e-9)


def test_bad_squeezes_are_refused():
    system = tiny_system()
    teacher = teacher_potential(system)
    for fraction in (0.0, -0.5, 1.2):
        with pytest.raises(ValueError, match=r"compaction fraction .* in \(0, 1\]"):
            squeezed_teacher(system, teacher, fraction)
    with pytest.raises(ValueError, match="rg_max > 0 and strength > 0"):
        GyrationSqueeze(5.0, strength=0.0)
    with pytest.raises(ValueError, match="at least one compaction fraction"):
        compacted_frames(system, teacher, [], [300.0], 2, 10, 5)


def test_compacted_frames_are_more_compact_and_carry_the_plain_teachers_forces():
    system = tiny_system()
    teacher = teacher_potential(system)
    common = dict(temperatures=[300.0], replicas=4, steps=600, save_every=150, equilibration=300)
    own = generate_teacher_data(system, teacher, seed=1, **common)
    squeezed = compacted_frames(system, teacher, [0.6], seed=1, **common)
    assert sampled_mask(squeezed).all() and squeezed["positions"].shape[0] == 16
    rg_native = radius_of_gyration(system.native_positions).item()
    assert radius_of_gyration(squeezed["positions"]).mean() < 0.96 * rg_native
    assert radius_of_gyration(squeezed["positions"]).mean() < radius_of_gyration(
        own["positions"]
    ).mean()
    # labelled by the teacher without the squeeze (which pushes inwards up there)
    plain = teacher.energy_and_forces(squeezed["positions"], None)[1]
    torch.testing.assert_close(squeezed["forces"], plain, rtol=1e-5, atol=1e-5)
    biased = squeezed_teacher(system, teacher, 0.6).energy_and_forces(
        squeezed["positions"], None
    )[1]
    assert (biased - plain).abs().max() > 1e-3


def test_cli_train_adds_compacted_frames_and_records_them(tmp_path, capsys):
    common = ["--protein", "cln025", "--hidden", "8", "--filters", "8", "--blocks", "1",
              "--num-rbf", "6", "--cutoff", "5", "--epochs", "1", "--batch-size", "8",
              "--device", "cpu", "--quiet", "--replicas", "2", "--steps", "40",
              "--save-every", "10", "--equilibration", "0"]
    assert main(["train", "--generate", "--compact", "0.7,0.8", "--compact-replicas", "3",
                 "--compact-steps", "20", "--out", str(tmp_path / "a"), *common]) == 0
    card = json.loads((tmp_path / "a" / "cln025.json").read_text())
    # 2 replicas × 4 teacher frames, then 3 replicas × 2 frames for each of two fractions
    assert card["data"]["frames"] == 8 + 12 and card["data"]["frames_sampled_by_a_model"] == 12
    assert card["data"]["compaction"]["radius_of_gyration_fractions"] == [0.7, 0.8]
    assert card["data"]["compaction"]["frames"] == 12
    assert "20 (12 from --sampler, --compact, --cold or --noise)" in capsys.readouterr().out


def test_cli_refuses_bad_compaction(tmp_path, capsys):
    code = main(["train", "--protein", "cln025", "--compact", "0.7,1.5", "--generate",
                 "--out", str(tmp_path / "out")])
    assert code == 2
    assert "--compact fractions must lie in (0, 1]" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def teacher_and_data():
    system = tiny_system()
    teacher = teacher_potential(system)
    return teacher, generate_teacher_data(system, teacher, [300.0, 360.0], 4, 100, 10, seed=0)


def test_displaced_frames_carry_the_teachers_forces_at_their_positions(teacher_and_data):
    teacher, data = teacher_and_data
    frames = displaced_frames(teacher, data, [0.1, 0.3], 0.25, seed=3)
    own = data["positions"].shape[0]  # 80 teacher frames: 20 per scale
    assert frames["positions"].shape == (40, *data["positions"].shape[1:])
    assert frames["sampled"].all() and frames["sampled"].shape == (40,)
    _, expected = teacher.energy_and_forces(frames["positions"], None)
    torch.testing.assert_close(frames["forces"], expected, rtol=1e-5, atol=1e-4)
    # each frame is a teacher frame plus noise of its scale per coordinate, and keeps that
    # frame's temperature
    flat = data["positions"].reshape(own, -1)
    for half, scale in ((slice(0, 20), 0.1), (slice(20, 40), 0.3)):
        moved = frames["positions"][half].reshape(20, -1)
        source = torch.cdist(moved, flat).argmin(1)
        step = moved - flat[source]
        assert abs(float(step.std()) / scale - 1.0) < 0.05
        assert abs(float(step.mean())) < 0.05 * scale
        torch.testing.assert_close(frames["temperature"][half], data["temperature"][source])
        assert source.unique().numel() == 20  # distinct frames per scale
    # the same seed gives the same frames
    again = displaced_frames(teacher, data, [0.1, 0.3], 0.25, seed=3)
    assert torch.equal(again["positions"], frames["positions"])


def test_only_the_teachers_own_frames_are_displaced(teacher_and_data):
    teacher, data = teacher_and_data
    far = {key: value.clone() for key, value in data.items()}
    far["positions"] += 1000.0
    far["sampled"] = torch.ones(far["temperature"].shape[0], dtype=torch.bool)
    frames = displaced_frames(teacher, concatenate_data(data, far), [0.2], 1.0, seed=0)
    assert frames["positions"].shape[0] == data["positions"].shape[0]
    assert float(frames["positions"].abs().max()) < 500.0
    with pytest.raises(ValueError, match="no teacher frames to displace"):
        displaced_frames(teacher, far, [0.2], 1.0)
    with pytest.raises(ValueError, match="scales must be positive"):
        displaced_frames(teacher, data, [0.2, 0.0], 0.5)
    with pytest.raises(ValueError, match=r"must lie in \(0, 1\], got 1.5"):
        displaced_frames(teacher, data, [0.2], 1.5)


def test_cli_train_adds_displaced_frames_kept_out_of_the_priors(tmp_path, capsys):
    common = tiny_train_args(4, 40, 0)
    assert main(["train", "--generate", "--noise", "0.1,0.2", "--noise-fraction", "0.5",
                 "--save-data", str(tmp_path / "data.pt"), "--out", str(tmp_path / "a"),
                 *common]) == 0
    assert "32 (16 from --sampler, --compact, --cold or --noise)" in capsys.readouterr().out
    card = json.loads((tmp_path / "a" / "cln025.json").read_text())
    assert card["data"]["noise"] == {"scales_A": [0.1, 0.2], "fraction": 0.5, "frames": 16,
                                     "left_out": 0, "max_force": 1000.0}
    data, _ = load_teacher_data(tmp_path / "data.pt")
    assert data["sampled"].tolist() == [False] * 16 + [True] * 16
    # the saved data hold them: the same copies are not added to them twice
    again = ["train", "--data", str(tmp_path / "data.pt"), "--out", str(tmp_path / "d")]
    assert main([*again, "--noise", "0.1", *common]) == 2
    assert "already holds the frames of --noise" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
    resaved = tmp_path / "resaved.pt"
    assert main([*again, "--save-data", str(resaved), *common]) == 0
    assert "32 (16 from --sampler" in capsys.readouterr().out
    # nor to data saved again from them (the record goes back through each saving)
    assert main(["train", "--data", str(resaved), "--noise", "0.2", "--out",
                 str(tmp_path / "e"), *common]) == 2
    assert f"{resaved} already holds the frames of --noise" in capsys.readouterr().err
    # a limit below thermal forces leaves every displaced frame out, and says so
    assert main(["train", "--generate", "--noise", "0.3", "--sampler-max-force", "1e-3",
                 "--out", str(tmp_path / "b"), *common]) == 0
    assert "2 of 2 displaced frames left out" in capsys.readouterr().out
    for bad, message in ((["--noise", "0.1,-1"], "--noise scales must be positive Å"),
                         (["--noise", "0.1", "--noise-fraction", "0"],
                          "--noise-fraction must lie in (0, 1], got 0.0")):
        assert main(["train", "--generate", *bad, "--out", str(tmp_path / "c"), *common]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "c").exists()
