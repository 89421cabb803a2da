"""Independent numpy references shared by the analysis tests."""

import numpy as np
import pytest


def _numpy_superpose(mobile: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Kabsch by SVD of the 3x3 covariance, one structure at a time (float64)."""
    x = mobile - mobile.mean(axis=0)
    y = ref - ref.mean(axis=0)
    u, _, vt = np.linalg.svd(x.T @ y)
    if np.linalg.det(u @ vt) < 0:
        u[:, -1] *= -1
    return x @ (u @ vt) + ref.mean(axis=0)


@pytest.fixture
def numpy_superpose():
    """``f(mobile [n, 3], ref [n, 3]) -> superposed mobile [n, 3]``."""
    return _numpy_superpose


@pytest.fixture
def numpy_rmsd():
    """``f(mobile [n, 3], ref [n, 3]) -> float``: RMSD after Kabsch."""

    def rmsd(mobile: np.ndarray, ref: np.ndarray) -> float:
        moved = _numpy_superpose(mobile, ref)
        return float(np.sqrt(((moved - ref) ** 2).sum(axis=1).mean()))

    return rmsd


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    """Uniform proper rotation matrix [3, 3] (QR of a Gaussian matrix)."""
    q, r = np.linalg.qr(rng.standard_normal((3, 3)))
    q *= np.sign(np.diag(r))
    if np.linalg.det(q) < 0:
        q[:, 0] *= -1
    return q


@pytest.fixture
def rotation():
    """``f(rng) -> [3, 3]`` random proper rotation."""
    return random_rotation
