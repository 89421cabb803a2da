"""Damaged files of each kind: repaired where the checkpoint's records are all there,
refused with a clear message where they are not; damaged model files named as such."""

from __future__ import annotations

import json
import os

import pytest
import torch
from fault_runs import STEPS, TINY, assert_same_run, run_cli
from helpers import schnet_potential

from workbench.model.io import save_potential


@pytest.fixture
def finished(tmp_path):
    """A DCD run that ended two steps short of the reference run (its checkpoint: step 4)."""
    folder = tmp_path / "run"
    code, _, err = run_cli(*TINY, "--steps", STEPS - 2, "--out", folder)
    assert code == 0, err
    return folder


def resume(folder, *extra):
    return run_cli(*TINY, "--steps", 2, "--out", folder, "--resume", *extra)


def test_a_dcd_cut_short_by_100_bytes_is_refused(finished):
    path = finished / "trajectory" / "replica_001.dcd"
    os.truncate(path, path.stat().st_size - 100)
    code, _, err = resume(finished)
    assert code == 2
    assert "replica_001.dcd holds 1 whole frames, fewer than 2" in err
    assert "the checkpoint covers 2 frames, step 4" in err


def test_lost_metrics_rows_are_refused(finished):
    path = finished / "metrics.csv"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))
    code, _, err = resume(finished)
    assert code == 2 and "holds 3 rows up to step 4, the checkpoint covers 4" in err


def test_a_missing_trajectory_is_refused(finished):
    (finished / "trajectory" / "replica_000.dcd").unlink()
    code, _, err = resume(finished)
    assert code == 2 and "replica_000.dcd is missing; the checkpoint covers 2 frames" in err


def test_a_damaged_checkpoint_is_refused(finished):
    (finished / "checkpoint.pt").write_bytes(b"not a checkpoint")
    code, _, err = resume(finished)
    assert code == 2 and "checkpoint.pt is not a readable checkpoint" in err


def test_a_damaged_manifest_is_refused(finished):
    (finished / "run.json").write_text("{")
    code, _, err = resume(finished)
    assert code == 2 and "run.json is damaged" in err


def test_an_intact_folder_resumes_to_the_uninterrupted_run(finished, reference_runs):
    code, _, err = resume(finished)
    assert code == 0, err
    assert_same_run(finished, reference_runs["dcd"])


def test_a_hdf5_run_is_not_resumed(finished):
    """HDF5 files cannot be cut back without rewriting them: such a run is not resumed."""
    for path in (finished / "trajectory").glob("replica_*.dcd"):
        path.rename(path.with_suffix(".h5"))
    manifest = json.loads((finished / "run.json").read_text())
    (finished / "run.json").write_text(json.dumps({**manifest, "trajectory": "h5"}))
    code, _, err = resume(finished, "--format", "h5")
    assert code == 2 and ".h5 trajectories cannot be cut back to a checkpoint" in err


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "model.pt"
    save_potential(schnet_potential(), path)
    return path


def rewrite(path, change):
    payload = torch.load(path, weights_only=True)
    change(payload["state_dict"])
    torch.save(payload, path)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_at_load_with_the_tensor_named(model_file, value):
    def poison(state):
        name = next(k for k in state if k.startswith("schnet.") and k.endswith("weight"))
        state[name][0, 0] = value

    rewrite(model_file, poison)
    code, _, err = run_cli(*TINY[:-2], "--steps", 2, "--model", model_file)
    assert code == 2 and "is a damaged cg-workbench-potential file: tensor schnet." in err
    assert "holds 1 NaN or infinite values" in err


def test_a_tensor_of_the_wrong_shape_is_named_not_taken_for_another_format(model_file):
    def reshape(state):
        name = next(k for k in state if k.startswith("schnet.") and k.endswith("weight"))
        state[name] = state[name][:-1]

    rewrite(model_file, reshape)
    code, _, err = run_cli(*TINY[:-2], "--steps", 2, "--model", model_file)
    assert code == 2 and "is a damaged cg-workbench-potential file" in err
    assert "size mismatch for schnet." in err and "mlcg" not in err


def test_dcd_files_of_an_older_version_are_continued(finished):
    """DCD files written by mdtraj (earlier versions) are cut back and appended to alike."""
    mdtraj = pytest.importorskip("mdtraj")
    for path in (finished / "trajectory").glob("replica_*.dcd"):
        with mdtraj.formats.DCDTrajectoryFile(str(path)) as handle:
            xyz = handle.read()[0]
        path.unlink()
        with mdtraj.formats.DCDTrajectoryFile(str(path), "w") as handle:
            handle.write(xyz)
    kept = {p.name: p.read_bytes() for p in (finished / "trajectory").glob("replica_*")}
    code, _, err = resume(finished)
    assert code == 0, err
    for name, before in kept.items():
        with mdtraj.formats.DCDTrajectoryFile(str(finished / "trajectory" / name)) as handle:
            frames = handle.read()[0]
        assert frames.shape[0] == STEPS // 2
        assert (finished / "trajectory" / name).read_bytes()[8:12] == (3).to_bytes(4, "little")
        assert before[:8] == (finished / "trajectory" / name).read_bytes()[:8]


def test_a_log_appended_to_by_an_older_resume_is_refused(finished):
    """Rows repeated by an older version's resume cannot be told apart: refused."""
    path = finished / "metrics.csv"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines + lines[1:3]))
    code, _, err = resume(finished)
    assert code == 2 and "steps out of order (4 then 2)" in err


def test_huge_weights_freeze_every_replica_and_the_run_says_so(model_file):
    def inflate(state):
        for name in state:
            if name.startswith("schnet.") and name.endswith("weight"):
                state[name] = state[name] * 1e30

    rewrite(model_file, inflate)
    code, out, err = run_cli(*TINY[:-2], "--steps", 2, "--model", model_file)
    assert code == 1 and "error: every replica was frozen by the safety checks" in err
    assert "n/a (every replica frozen)" in out
