"""What a run keeps for the panels, whichever runner advances it: metric, throughput and
walker-temperature rows and position frames, each bounded (older rows are thinned: a
:class:`DecimatingBuffer` keeps every k-th row, doubling k when full), and the latest
parallel-tempering state.

:class:`~widgets.controller.SimulationController` (a run in this process) and
:class:`~widgets.sharded.ShardedController` (a run over several processes) fill one
:class:`RunRecord` each, under their own lock, and build their snapshots from it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from widgets.snapshot import METRIC_KEYS, TEMPERING_KEYS, THROUGHPUT_KEYS, TemperingSnapshot


class DecimatingBuffer:
    """Append-only rows that never hold more than ``capacity`` of them.

    When a new row would exceed the capacity, every second stored row is dropped
    and from then on only every ``stride``-th appended row is kept (the stride
    doubles each time). The stored rows therefore stay evenly spaced over the whole
    run, and memory is bounded however long it lasts. The most recent row is always
    available as :attr:`latest`, kept or not.

    Parameters
    ----------
    capacity : int
        Largest number of stored rows, at least 2.
    """

    def __init__(self, capacity: int):
        if capacity < 2:
            raise ValueError(f"capacity must be at least 2, got {capacity}")
        self.capacity = int(capacity)
        self.stride = 1
        self.appended = 0
        self.latest: Any = None
        self._rows: list = []

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: int):
        return self._rows[index]

    def append(self, row) -> None:
        """Add a row (kept when its position in the stream is a multiple of the stride)."""
        if self.appended % self.stride == 0:
            self._rows.append(row)
            if len(self._rows) > self.capacity:
                self._rows = self._rows[::2]
                self.stride *= 2
        self.appended += 1
        self.latest = row

    def rows(self) -> list:
        """A shallow copy of the stored rows, oldest first."""
        return list(self._rows)

    def columns(self, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
        """Stored dict rows as stacked arrays, one per key (empty arrays when no rows).

        Parameters
        ----------
        keys : tuple of str
            Keys every row holds; scalar entries give shape ``(m,)``, arrays of shape
            ``s`` give ``(m, *s)``.
        """
        if not self._rows:
            return {key: np.empty(0) for key in keys}
        return {key: np.stack([np.asarray(row[key]) for row in self._rows]) for key in keys}


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
