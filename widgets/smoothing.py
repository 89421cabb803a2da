"""A steady line through noisy per-chunk throughput, restarted at every kernel switch."""

from __future__ import annotations

import numpy as np


def segment_mean(
    steps: np.ndarray, values: np.ndarray, breaks: list[int], window: int = 9
) -> np.ndarray:
    """Centred running mean of ``values`` that never averages across a break.

    Parameters
    ----------
    steps : numpy.ndarray, shape (m,)
        Step of each value, increasing.
    values : numpy.ndarray, shape (m,)
        E.g. timestep·mol/s of each chunk; NaN values are left out of the means.
    breaks : list of int
        Steps at which a new segment starts (kernel switches): a value at or after a break
        is averaged only with values of its own segment.
    window : int
        Values per mean (odd; shrinks at the ends of a segment).

    Returns
    -------
    numpy.ndarray, shape (m,), float64
        NaN where a value's neighbourhood holds no finite value.
    """
    steps = np.asarray(steps)
    values = np.asarray(values, dtype=np.float64)
    segment = np.searchsorted(np.sort(np.asarray(breaks)), steps, side="right")
    half = max(window, 1) // 2
    smooth = np.full(values.shape, np.nan)
    for label in np.unique(segment):
        index = np.flatnonzero(segment == label)
        part = values[index]
        for k, i in enumerate(index):
            near = part[max(0, k - half) : k + half + 1]
            near = near[np.isfinite(near)]
            if near.size:
                smooth[i] = near.mean()
    return smooth
