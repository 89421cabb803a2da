"""Free-energy surface over RMSD and Q."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workbench.units import KB


def free_energy_surface(
    rmsd: np.ndarray,
    q: np.ndarray,
    temperature: float,
    bins: int | Sequence[int] = (40, 40),
    ranges: Sequence[Sequence[float]] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``F = -k_B T ln p(RMSD, Q)`` on a 2-D histogram, shifted so that its minimum is 0.

    Parameters
    ----------
    rmsd : array_like, shape (m,), float
        RMSD samples (x axis), Å.
    q : array_like, shape (m,), float
        Q samples (y axis), paired with ``rmsd``.
    temperature : float
        Temperature, K.
    bins : int or (int, int), default (40, 40)
        Bins along RMSD and Q.
    ranges : ((float, float), (float, float)), optional
        ``((rmsd_min, rmsd_max), (q_min, q_max))``; the data range when omitted.

    Returns
    -------
    F : numpy.ndarray, shape (bx, by), float64
        Free energy, kcal/mol; 0 at the most populated bin, ``+inf`` in empty bins.
    x_edges : numpy.ndarray, shape (bx + 1,), float64
        RMSD bin edges.
    y_edges : numpy.ndarray, shape (by + 1,), float64
        Q bin edges.
    """
    x = np.asarray(rmsd, dtype=np.float64).ravel()
    y = np.asarray(q, dtype=np.float64).ravel()
    if x.shape != y.shape or x.size == 0:
        raise ValueError("rmsd and q must be non-empty and of the same length")
    counts, x_edges, y_edges = np.histogram2d(x, y, bins=bins, range=ranges)
    if counts.sum() == 0:
        raise ValueError("no sample falls inside the histogram ranges")
    with np.errstate(divide="ignore"):
        free_energy = -KB * temperature * np.log(counts / counts.sum())
    return free_energy - free_energy.min(), x_edges, y_edges
