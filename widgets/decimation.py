"""Bounded histories for long runs: keep every k-th row, doubling k when full."""

from __future__ import annotations

from typing import Any

import numpy as np


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
