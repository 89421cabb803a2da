"""Displaced teacher frames: the teacher's forces at the new positions, the displacement's
size, frames chosen from the teacher's own only, and the CLI's ``--noise``."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import tiny_system
from test_data import tiny_train_args

from workbench.cli import main
from workbench.teacher import teacher_potential
from workbench.training.data import concatenate_data, generate_teacher_data, load_teacher_data
from workbench.training.perturbation import displaced_frames


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
