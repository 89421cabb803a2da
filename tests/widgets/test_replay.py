"""Replay of a recorded run folder in every panel, moved through time."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")
pytest.importorskip("nglview")
pytest.importorskip("mdtraj")

from widgets import Workbench  # noqa: E402
from widgets.adjacency_frames import frame_adjacency  # noqa: E402
from widgets.panels.replay import ReplayPanel  # noqa: E402
from widgets.replay import RunReplay  # noqa: E402

STEPS, EVERY, REPLICAS = 12, 2, 3


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from helpers import record_run

    return record_run(tmp_path_factory.mktemp("replay") / "run", REPLICAS, STEPS, EVERY)


class PushRecorder:
    """Stands in for the 3-D view's coordinate push and keeps what it was sent."""

    def __init__(self, panel):
        self.sent: list[np.ndarray] = []
        panel.push = self.sent.append


def test_the_replay_snapshot_holds_what_was_recorded_up_to_the_chosen_frame(recorded):
    replay = RunReplay(recorded)
    assert replay.frame_count == STEPS // EVERY and replay.index == replay.frame_count - 1
    replay.seek(2)
    snapshot = replay.snapshot()
    assert snapshot.step == 3 * EVERY and snapshot.replicas == REPLICAS
    assert list(snapshot.metrics["step"]) == [2, 4, 6]
    assert snapshot.metrics["q"].shape == (3, REPLICAS)
    assert [step for step, _ in replay.frames()] == [2, 4, 6]
    np.testing.assert_array_equal(snapshot.latest_positions, replay.run.frames[2])
    replay.seek(99)
    assert replay.index == replay.frame_count - 1
    with pytest.raises(RuntimeError, match="coordinates"):
        replay.with_simulation(lambda sim: sim)


def test_every_panel_follows_the_time_slider(recorded):
    bench = Workbench(replay=recorded)
    pushes = PushRecorder(bench.structure)
    panel = bench.replay
    assert panel.time.max == STEPS // EVERY - 1 and panel.time.value == panel.time.max
    assert f"step {STEPS} " in bench.adjacency.info.value
    run = panel.replay.run

    def expected(index):
        return frame_adjacency(run.frames[index][0], run.system, run.cutoff, "residue")

    np.testing.assert_array_equal(bench.adjacency.heatmap.data[0].z, expected(-1))
    panel.time.value = 0
    bench.adjacency.refresh()
    assert "step 2 " in bench.adjacency.info.value
    assert bench.adjacency.frame.max == 0
    np.testing.assert_array_equal(bench.adjacency.heatmap.data[0].z, expected(0))
    rmsd_trace = bench.plots.folding_figure.data
    assert any(len(trace.x or ()) == 1 for trace in rmsd_trace)  # one recorded point
    panel.time.value = 3
    assert len(pushes.sent) >= 2
    assert not np.allclose(pushes.sent[-1], pushes.sent[0])
    assert "frame 4 of 6" in panel.info.value


def test_a_bad_folder_is_refused_and_the_open_replay_stays(recorded, tmp_path):
    panel = ReplayPanel()
    opened = panel.open_folder(recorded)
    assert opened is not None
    assert panel.open_folder(tmp_path / "nowhere") is None
    assert "Cannot open" in panel.info.value and "not a folder" in panel.info.value
    assert panel.replay is opened
    empty = tmp_path / "empty"
    empty.mkdir()
    assert panel.open_folder(empty) is None and "run.json" in panel.info.value
