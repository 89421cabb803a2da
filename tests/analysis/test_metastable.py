import numpy as np
import pytest
from scipy.signal import savgol_filter

from workbench.analysis import largest_metastable_q, savitzky_golay


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
