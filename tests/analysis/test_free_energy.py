import numpy as np
import pytest
from scipy.signal import savgol_filter

from workbench.analysis import free_energy_surface, largest_metastable_q, savitzky_golay
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


@pytest.mark.parametrize(("window", "polyorder"), [(5, 2), (7, 2), (9, 3), (11, 4), (3, 0)])
def test_savitzky_golay_matches_scipy(window, polyorder):
    y = np.random.default_rng(window).standard_normal(50).cumsum()
    np.testing.assert_allclose(
        savitzky_golay(y, window, polyorder),
        savgol_filter(y, window, polyorder, mode="interp"),
        atol=1e-10,
    )


def test_savitzky_golay_keeps_polynomials():
    x = np.linspace(-2.0, 3.0, 30)
    cubic = 0.5 * x**3 - x**2 + 2.0 * x - 1.0
    np.testing.assert_allclose(savitzky_golay(cubic, 9, 3), cubic, atol=1e-10)


def test_savitzky_golay_rejects_bad_arguments():
    y = np.zeros(20)
    with pytest.raises(ValueError):
        savitzky_golay(y, 6, 2)
    with pytest.raises(ValueError):
        savitzky_golay(y, 5, 5)
    with pytest.raises(ValueError):
        savitzky_golay(np.zeros(4), 5, 2)


def _bimodal(rng, left, right, left_weight, size=40_000):
    n_left = int(size * left_weight)
    q = np.concatenate([rng.normal(left, 0.05, n_left), rng.normal(right, 0.03, size - n_left)])
    return np.clip(q, 0.0, 1.0)


@pytest.mark.parametrize("left_weight", [0.3, 0.5, 0.8])
def test_rightmost_mode_of_bimodal_samples(left_weight):
    rng = np.random.default_rng(0)
    q = _bimodal(rng, 0.3, 0.83, left_weight)
    # bin centres are 0.01, 0.03, ...: the mode at 0.83 falls in the bin centred on it
    assert largest_metastable_q(q) == pytest.approx(0.83, abs=0.021)


def test_mode_next_to_one_and_bin_centres():
    rng = np.random.default_rng(1)
    q = _bimodal(rng, 0.2, 0.985, 0.5)
    value = largest_metastable_q(q, bins=20, window=5, polyorder=2)
    assert value == pytest.approx(0.975)


def test_sparse_tail_is_not_a_state():
    rng = np.random.default_rng(2)
    q = np.concatenate([_bimodal(rng, 0.3, 0.7, 0.5), np.full(5, 0.97)])
    assert largest_metastable_q(q) == pytest.approx(0.7, abs=0.021)
    assert largest_metastable_q(q, min_height=0.0) > 0.9


def test_needs_samples_in_range():
    with pytest.raises(ValueError):
        largest_metastable_q(np.array([]))
    with pytest.raises(ValueError):
        largest_metastable_q(np.array([1.5, -0.2]))
