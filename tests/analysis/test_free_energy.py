import numpy as np
import pytest

from workbench.analysis import free_energy_surface
from workbench.units import KB


def _samples(rng, size=5000):
    rmsd = np.abs(rng.normal(3.0, 1.5, size))
    q = np.clip(1.0 - rmsd / 10.0 + rng.normal(0.0, 0.05, size), 0.0, 1.0)
    return rmsd, q


def test_matches_minus_kt_log_histogram():
    rng = np.random.default_rng(0)
    rmsd, q = _samples(rng)
    f, x_edges, y_edges = free_energy_surface(rmsd, q, 300.0, bins=(25, 30))
    counts, cx, cy = np.histogram2d(rmsd, q, bins=(25, 30))
    np.testing.assert_array_equal(x_edges, cx)
    np.testing.assert_array_equal(y_edges, cy)
    assert f.shape == (25, 30)
    filled = counts > 0
    expected = -KB * 300.0 * np.log(counts[filled] / counts.sum())
    np.testing.assert_allclose(f[filled], expected - expected.min(), rtol=1e-12, atol=1e-12)


def test_minimum_zero_and_inf_where_empty():
    rng = np.random.default_rng(1)
    rmsd, q = _samples(rng)
    f, _, _ = free_energy_surface(rmsd, q, 350.0, ranges=((0.0, 20.0), (0.0, 1.0)))
    assert f.min() == 0.0
    assert np.isposinf(f).any()
    counts, _, _ = np.histogram2d(rmsd, q, bins=(40, 40), range=((0.0, 20.0), (0.0, 1.0)))
    np.testing.assert_array_equal(np.isinf(f), counts == 0)
    assert np.isfinite(f[counts > 0]).all()


def test_hand_values_and_temperature_scaling():
    rmsd = np.array([0.5, 0.5, 0.5, 0.5, 1.5])
    q = np.array([0.9, 0.9, 0.9, 0.9, 0.1])
    f, x_edges, y_edges = free_energy_surface(rmsd, q, 300.0, bins=2, ranges=((0, 2), (0, 1)))
    np.testing.assert_array_equal(x_edges, [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(y_edges, [0.0, 0.5, 1.0])
    assert f[0, 1] == 0.0
    assert f[1, 0] == pytest.approx(KB * 300.0 * np.log(4.0))
    assert np.isinf(f[0, 0]) and np.isinf(f[1, 1])
    f_hot, _, _ = free_energy_surface(rmsd, q, 600.0, bins=2, ranges=((0, 2), (0, 1)))
    assert f_hot[1, 0] == pytest.approx(2.0 * f[1, 0])


def test_rejects_mismatched_or_empty_input():
    with pytest.raises(ValueError):
        free_energy_surface(np.zeros(3), np.zeros(4), 300.0)
    with pytest.raises(ValueError):
        free_energy_surface(np.full(3, 5.0), np.zeros(3), 300.0, ranges=((0, 1), (0, 1)))
