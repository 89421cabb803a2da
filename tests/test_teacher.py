"""The structure-based teacher: forces, ε, batched runs, ε calibration (tiny sizes)."""

from __future__ import annotations

import pytest
import torch
from helpers import (
    autograd_forces,
    finite_difference_forces,
    perturbed_positions,
    relative_error,
    tiny_system,
)

from workbench.teacher import (
    TEACHER_BARRIER,
    TEACHER_EPSILON,
    calibrate_epsilon,
    mixed_starts,
    second_half_q,
    teacher_potential,
)
from workbench.training.data import generate_teacher_data


def test_teacher_forces_match_finite_differences():
    teacher = teacher_potential(tiny_system(), 0.7).double()
    pos = perturbed_positions(replicas=1, sigma=0.1)[0]
    exact = finite_difference_forces(lambda p: teacher.energy(p, None), pos)
    assert relative_error(autograd_forces(lambda p: teacher.energy(p, None), pos[None])[0],
                          exact) < 1e-6


def test_epsilon_scales_contacts_and_optionally_dihedrals():
    sys = tiny_system()
    default = teacher_potential(sys)
    assert default.schnet is None
    assert default.metadata["epsilon"] == TEACHER_EPSILON["cln025"]
    scaled = teacher_potential(sys, 0.8, dihedral_ratio=2.0)
    assert torch.allclose(scaled.priors["contacts"].epsilon, torch.tensor(0.8))
    assert torch.allclose(scaled.priors["dihedrals"].v0, torch.tensor(1.6))
    assert scaled.metadata["dihedral_ratio"] == 2.0
    with pytest.raises(ValueError, match="non-negative"):
        teacher_potential(sys, -1.0)


def test_teacher_data_are_teacher_forces_at_the_frames():
    sys = tiny_system()
    teacher = teacher_potential(sys)
    data = generate_teacher_data(sys, teacher, [300.0, 350.0], 2, 40, 20, seed=1)
    assert data["positions"].shape == (8, sys.n_beads, 3)
    assert data["forces"].dtype == data["positions"].dtype == torch.float32
    assert data["temperature"].tolist() == [300.0, 300.0, 350.0, 350.0] * 2
    _, forces = teacher.energy_and_forces(data["positions"], None)
    assert torch.allclose(forces, data["forces"], atol=1e-3)


def test_folded_fraction_grows_with_epsilon_and_calibration_stays_in_bounds():
    sys = tiny_system()
    starts = mixed_starts(sys, 300.0, 6, 3, 300, seed=0)
    assert torch.equal(starts[:3], sys.native_positions.expand(3, -1, -1))
    weak, strong = (
        float((second_half_q(sys, teacher_potential(sys, eps), 300.0, starts, 200, seed=2)
               > 0.8).float().mean())
        for eps in (0.01, 3.0)
    )
    assert weak < strong
    result = calibrate_epsilon(sys, 300.0, 0.5, (0.05, 2.0), iterations=3, replicas=4, steps=60)
    assert 0.05 < result.epsilon < 2.0
    assert len(result.history) == 3
    for (eps, fraction), (next_eps, _) in zip(result.history[:-1], result.history[1:], strict=True):
        assert (next_eps > eps) == (fraction < 0.5)


def test_calibration_from_native_starts_only():
    sys = tiny_system()
    # from the native structure a strong contact well keeps everything folded: the
    # bisection then only moves down, towards weaker wells
    result = calibrate_epsilon(sys, 300.0, 0.999, (0.5, 50.0), iterations=2, replicas=4,
                               steps=40, native_fraction=1.0)
    assert [f for _, f in result.history] == [1.0, 1.0]
    assert result.history[1][0] < result.history[0][0]
    with pytest.raises(ValueError, match="native_fraction"):
        calibrate_epsilon(sys, 300.0, 0.5, native_fraction=1.5)


def test_the_2jof_teacher_has_desolvation_barriers_by_default():
    """`TEACHER_BARRIER` gives 2JOF's teacher its barriers unless the caller sets them;
    proteins without an entry have none."""
    from workbench.system.builder import build_system

    trp_cage = build_system("2jof")
    default = teacher_potential(trp_cage)
    assert default.metadata["contact_barrier"] == TEACHER_BARRIER["2jof"] > 0
    barriers = default.priors["barriers"]
    assert torch.equal(barriers.index, default.priors["contacts"].index)
    assert torch.allclose(barriers.height, torch.tensor(TEACHER_BARRIER["2jof"]
                                                        * TEACHER_EPSILON["2jof"]))
    assert "barriers" not in teacher_potential(trp_cage, contact_barrier=0.0).priors
    assert "barriers" not in teacher_potential(tiny_system()).priors
