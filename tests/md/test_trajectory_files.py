"""Append-only DCD and XTC files: read by mdtraj, counted and cut back to whole frames."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.md.trajectory_files import (
    AppendedTrajectory,
    TrajectoryFileError,
    cut_frames,
    whole_frames,
)

md = pytest.importorskip("mdtraj")

FRAMES = (np.random.default_rng(0).random((5, 12, 3)) * 30).astype(np.float32)


def written(path, frames=FRAMES, first=0):
    """``path`` with ``frames`` appended, numbered from ``first`` (0.5 ps apart)."""
    trajectory = AppendedTrajectory(path, frames.shape[1])
    for k, frame in enumerate(frames, start=first):
        trajectory.append(frame, 0.5 * k)
    trajectory.close()
    return path


def read(path):
    if path.suffix == ".dcd":
        with md.formats.DCDTrajectoryFile(str(path)) as handle:
            return handle.read()[0]
    with md.formats.XTCTrajectoryFile(str(path)) as handle:
        return handle.read()[0] * 10.0


@pytest.mark.parametrize("fmt", ["dcd", "xtc"])
def test_frames_appended_in_two_sessions_read_back_with_mdtraj(tmp_path, fmt):
    path = written(tmp_path / f"r.{fmt}", FRAMES[:3])
    written(path, FRAMES[3:], first=3)
    tolerance = 0 if fmt == "dcd" else 5e-3  # XTC keeps 0.001 nm
    np.testing.assert_allclose(read(path), FRAMES, atol=tolerance, rtol=0)
    assert whole_frames(path) == 5


@pytest.mark.parametrize("fmt", ["dcd", "xtc"])
def test_a_frame_cut_short_is_not_counted_and_cut_off(tmp_path, fmt):
    path = written(tmp_path / f"r.{fmt}")
    whole = path.read_bytes()
    path.write_bytes(whole[:-7])
    assert whole_frames(path) == 4
    cut_frames(path, 2)
    assert whole_frames(path) == 2 and len(read(path)) == 2
    written(path, FRAMES[2:], first=2)
    assert path.read_bytes() == whole  # the same bytes as written in one go


def test_cutting_to_more_frames_than_held_is_refused(tmp_path):
    path = written(tmp_path / "r.dcd", FRAMES[:2])
    with pytest.raises(TrajectoryFileError, match="holds 2 whole frames, fewer than 3"):
        cut_frames(path, 3)


def test_hdf5_files_are_not_cut(tmp_path):
    path = tmp_path / "r.h5"
    path.write_bytes(b"")
    with pytest.raises(TrajectoryFileError, match="cannot be cut back to a checkpoint"):
        whole_frames(path)
