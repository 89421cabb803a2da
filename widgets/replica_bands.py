"""Summaries over replicas for the RMSD and Q plots: a mean line inside a band."""

from __future__ import annotations

import numpy as np

BANDS = ("min–max", "±std")


def replica_band(values: np.ndarray, band: str = "min–max") -> tuple[np.ndarray, ...]:
    """Mean over replicas and the lower and upper edge of a band around it.

    Parameters
    ----------
    values : numpy.ndarray, shape (points, replicas)
    band : {"min–max", "±std"}

    Returns
    -------
    mean, lower, upper : numpy.ndarray, each shape (points,)
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"expected (points, replicas), got shape {values.shape}")
    if values.shape[0] == 0:
        empty = np.empty(0)
        return empty, empty, empty
    mean = values.mean(axis=1)
    if band == "min–max":
        return mean, values.min(axis=1), values.max(axis=1)
    if band == "±std":
        std = values.std(axis=1)
        return mean, mean - std, mean + std
    raise ValueError(f"band must be one of {BANDS}, got {band!r}")
