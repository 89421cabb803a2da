"""Energy gaps and force errors of models against their teacher at sets of structures."""

import pytest
from helpers import perturbed_positions, prior_potential, tiny_system

from workbench.analysis.energy_gaps import energy_gaps


def test_the_teacher_against_itself_has_no_gap_and_a_shifted_one_keeps_none():
    system = tiny_system()
    teacher = prior_potential(system)
    bonds = prior_potential(system, terms=("bonds",))
    sets = {"a": perturbed_positions(system, 3, seed=1).float(),
            "b": perturbed_positions(system, 2, sigma=0.5, seed=2).float()}
    reference = perturbed_positions(system, 4, seed=3).float()
    table = energy_gaps({"self": teacher, "bonds": bonds}, teacher, reference, sets)
    for cell in table["self"].values():
        assert cell["energy_gap"] == pytest.approx(0.0, abs=1e-3)
        assert cell["force_rmse"] == pytest.approx(0.0, abs=1e-4)
    assert set(table["bonds"]) == {"a", "b"} and table["bonds"]["a"]["force_rmse"] > 0
    same = energy_gaps({"bonds": bonds}, teacher, reference, {"ref": reference})
    assert same["bonds"]["ref"]["energy_gap"] == pytest.approx(0.0, abs=1e-3)
