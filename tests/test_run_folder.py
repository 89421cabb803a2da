"""Run folders read back (finished, running, damaged) and thinned copies."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from workbench.run_folder import (
    MANIFEST,
    RunFolderError,
    metrics_table,
    read_run,
    recorded_run,
    thin_run,
)

mdtraj = pytest.importorskip("mdtraj")

#: 12 steps of 3 replicas with a frame every 2 steps.
STEPS, EVERY, REPLICAS = 12, 2, 3


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A finished run of a prior-only CLN025 model (kept pristine; tests use copies)."""
    from helpers import record_run

    return record_run(tmp_path_factory.mktemp("recorded") / "run", REPLICAS, STEPS, EVERY)


@pytest.fixture
def copy(recorded, tmp_path):
    target = tmp_path / "run"
    shutil.copytree(recorded, target)
    return target


def test_a_finished_run_reads_back_whole(recorded):
    run = read_run(recorded)
    frames = STEPS // EVERY
    assert run.finished and run.summary["steps"] == STEPS
    assert run.system.name == "cln025" and run.cutoff == 6.0
    assert run.manifest["settings"]["replicas"] == REPLICAS
    assert run.frames.shape == (frames, REPLICAS, run.system.n_beads, 3)
    assert run.frames.dtype == np.float32
    assert list(run.frame_steps) == [EVERY * (k + 1) for k in range(frames)]
    assert list(run.metrics["step"]) == list(run.frame_steps)
    assert run.metrics["q"].shape == (frames, REPLICAS)
    checkpoint = torch.load(recorded / "checkpoint.pt", weights_only=False)
    np.testing.assert_allclose(run.frames[-1], checkpoint["positions"].numpy(), atol=1e-3)


def test_long_runs_are_read_every_kth_frame(recorded):
    run = read_run(recorded, max_frames=2)
    assert run.frame_stride == 3 and list(run.frame_steps) == [2, 8]
    np.testing.assert_array_equal(run.frames[1], read_run(recorded).frames[3])


def test_a_running_run_reads_without_its_summary_and_its_cut_last_row(copy):
    (copy / "summary.json").unlink()
    metrics = copy / "metrics.csv"
    text = metrics.read_text()
    metrics.write_text(text + "14,0.056,0,300.0,29")  # a row cut by the writer's crash
    run = read_run(copy)
    assert not run.finished
    assert run.metrics["step"][-1] == STEPS
    assert metrics_table(metrics)["q"].shape == (STEPS // EVERY, REPLICAS)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: (f / MANIFEST).unlink(), "has no run.json"),
        (lambda f: (f / MANIFEST).write_text("{"), "damaged"),
        (lambda f: (f / "metrics.csv").unlink(), "no metrics.csv"),
        (lambda f: shutil.rmtree(f / "trajectory"), "no trajectory"),
    ],
)
def test_damaged_folders_are_refused_with_what_is_wrong(copy, damage, message):
    damage(copy)
    with pytest.raises(RunFolderError, match=message):
        read_run(copy)


def test_a_thinned_copy_keeps_the_chosen_replicas_and_frames(recorded, tmp_path):
    target = thin_run(recorded, tmp_path / "thin", replicas=[2, 0], stride=2, fmt="xtc")
    source, thin = read_run(recorded), read_run(target)
    assert thin.replicas == 2 and list(thin.frame_steps) == [4, 8, 12]
    np.testing.assert_allclose(thin.frames, source.frames[1::2][:, [2, 0]], atol=0.006)
    np.testing.assert_allclose(thin.metrics["q"], source.metrics["q"][:, [2, 0]], rtol=1e-5)
    assert thin.manifest["thinned_from"]["replicas"] == [2, 0]
    summary = json.loads((target / "summary.json").read_text())
    assert summary["replicas"] == 2 and summary["thinned_from"]["frame_stride"] == 2
    assert summary["q_mean"] == pytest.approx(source.metrics["q"][-1, [2, 0]].mean(), rel=1e-5)


def test_thinning_never_overwrites_without_being_asked(recorded, tmp_path):
    target = tmp_path / "thin"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(RunFolderError, match="exists"):
        thin_run(recorded, target)
    assert (target / "keep.txt").read_text() == "mine"
    with pytest.raises(RunFolderError, match="replicas must lie"):
        thin_run(recorded, tmp_path / "other", replicas=[REPLICAS])
    assert not (tmp_path / "other").exists()


def test_the_shipped_recording_shows_1enh_unfolding():
    run = read_run(recorded_run("1enh-unfolding"))
    assert run.finished and run.system.name == "1enh" and run.replicas == 4
    assert run.frames.shape == (200, 4, 269, 3) and run.frame_steps[-1] == 100_000
    q, rmsd = run.metrics["q"], run.metrics["rmsd"]
    assert (q[:5].mean(0) > 0.8).all()  # starts native
    unfolded = (rmsd[-10:].mean(0) > 10.0) & (q[-10:].mean(0) < 0.65)
    assert unfolded.sum() >= 3
    with pytest.raises(RunFolderError, match="1enh-unfolding"):
        recorded_run("nothing")
