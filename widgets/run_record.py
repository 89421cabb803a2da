"""What a run keeps for the panels, whichever runner advances it: metric, throughput and
walker-temperature rows and position frames, each bounded (older rows are thinned), and
the latest parallel-tempering state.

:class:`~widgets.controller.SimulationController` (a run in this process) and
:class:`~widgets.sharded.ShardedController` (a run over several processes) fill one
:class:`RunRecord` each, under their own lock, and build their snapshots from it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from widgets.decimation import DecimatingBuffer
from widgets.snapshot import METRIC_KEYS, TEMPERING_KEYS, THROUGHPUT_KEYS, TemperingSnapshot


class RunRecord:
    """Decimated history of one run.

    Parameters
    ----------
    history_points : int
        Bound on stored metric, throughput and temperature rows.
    frame_capacity : int
        Bound on stored position frames.

    Attributes
    ----------
    metrics, throughput, temperatures : DecimatingBuffer
        Rows with the keys :data:`~widgets.snapshot.METRIC_KEYS`,
        :data:`~widgets.snapshot.THROUGHPUT_KEYS` and
        :data:`~widgets.snapshot.TEMPERING_KEYS`.
    frames : DecimatingBuffer
        ``(step, positions [R, n, 3] float32)``.
    tempering : TemperingSnapshot or None
        Latest exchange state (without history) of a run with a ladder.
    """

    def __init__(self, history_points: int, frame_capacity: int):
        self.metrics = DecimatingBuffer(history_points)
        self.throughput = DecimatingBuffer(history_points)
        self.temperatures = DecimatingBuffer(history_points)
        self.frames = DecimatingBuffer(frame_capacity)
        self.tempering: TemperingSnapshot | None = None

    def snapshot_fields(self) -> dict:
        """The :class:`~widgets.snapshot.Snapshot` fields this record holds: ``metrics``,
        ``throughput``, ``frame_steps``, ``latest_positions`` and ``tempering`` (with its
        temperature history)."""
        latest = self.frames.latest
        tempering = self.tempering
        if tempering is not None:
            tempering = replace(tempering, history=self.temperatures.columns(TEMPERING_KEYS))
        return {
            "metrics": self.metrics.columns(METRIC_KEYS),
            "throughput": self.throughput.columns(THROUGHPUT_KEYS),
            "frame_steps": np.array([f[0] for f in self.frames.rows()], dtype=np.int64),
            "latest_positions": None if latest is None else latest[1],
            "tempering": tempering,
        }
