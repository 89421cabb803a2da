"""The free-energy landscape of a run: the surface over RMSD and Q, and the largest
metastable Q (the rightmost peak of the Savitzky–Golay smoothed density of Q)."""

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


def savitzky_golay(y: np.ndarray, window: int, polyorder: int) -> np.ndarray:
    """Savitzky–Golay smoothing by local least-squares polynomial fits.

    Each interior point is replaced by the value at its centre of the polynomial
    of degree ``polyorder`` fitted to the ``window`` points around it. The first
    and last ``window // 2`` points take the values of the polynomial fitted to
    the first and last window (scipy's ``mode="interp"``).

    Parameters
    ----------
    y : array_like, shape (m,), float
        Samples on a uniform grid, ``m >= window``.
    window : int
        Odd window length.
    polyorder : int
        Polynomial degree, ``0 <= polyorder < window``.

    Returns
    -------
    numpy.ndarray, shape (m,), float64
        The smoothed samples.
    """
    y = np.asarray(y, dtype=np.float64)
    if window % 2 != 1 or window < 1:
        raise ValueError(f"window must be a positive odd integer, got {window}")
    if not 0 <= polyorder < window:
        raise ValueError(f"polyorder must be in [0, window), got {polyorder}")
    if y.ndim != 1 or y.shape[0] < window:
        raise ValueError(f"need a 1-D array of at least {window} samples, got shape {y.shape}")
    half = window // 2
    offsets = np.arange(-half, half + 1, dtype=np.float64)
    design = np.vander(offsets, polyorder + 1, increasing=True)
    # Least-squares coefficients of each window, then the fitted values at every
    # window position: projection[k] maps a window of samples to the fit at k.
    coefficients = np.linalg.lstsq(design, np.eye(window), rcond=None)[0]
    projection = design @ coefficients
    windows = np.lib.stride_tricks.sliding_window_view(y, window)
    out = np.empty_like(y)
    out[half : y.shape[0] - half] = windows @ projection[half]
    out[:half] = projection[:half] @ y[:window]
    out[y.shape[0] - half :] = projection[half + 1 :] @ y[-window:]
    return out


def largest_metastable_q(
    q_values: np.ndarray,
    bins: int = 50,
    window: int = 7,
    polyorder: int = 2,
    min_height: float = 0.05,
) -> float:
    """Q of the rightmost local maximum of the smoothed density of Q.

    The density is a histogram of ``q_values`` on [0, 1] smoothed by
    :func:`savitzky_golay`. A bin is a local maximum when it is higher than its
    left neighbour and not lower than its right one (a missing neighbour at
    either end counts as lower), and when it reaches ``min_height`` times the
    highest smoothed density, so that sampling noise in a sparse tail is not
    taken for a state.

    Parameters
    ----------
    q_values : array_like, shape (m,), float
        Q samples over a run (all replicas and frames pooled).
    bins : int, default 50
        Histogram bins on [0, 1].
    window : int, default 7
        Savitzky–Golay window, in bins (odd).
    polyorder : int, default 2
        Savitzky–Golay polynomial degree.
    min_height : float, default 0.05
        Smallest peak height kept, relative to the highest smoothed density.

    Returns
    -------
    float
        Centre of the bin of the rightmost local maximum.
    """
    q = np.asarray(q_values, dtype=np.float64).ravel()
    if not np.any((q >= 0.0) & (q <= 1.0)):
        raise ValueError("largest_metastable_q needs at least one Q value in [0, 1]")
    density, edges = np.histogram(q, bins=bins, range=(0.0, 1.0), density=True)
    smooth = savitzky_golay(density, window, polyorder)
    padded = np.concatenate(([-np.inf], smooth, [-np.inf]))
    is_peak = (smooth > padded[:-2]) & (smooth >= padded[2:])
    is_peak &= smooth >= min_height * smooth.max()
    peak = np.flatnonzero(is_peak)[-1]
    return float(0.5 * (edges[peak] + edges[peak + 1]))
