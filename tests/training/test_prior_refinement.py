"""Bonded priors refitted to the teacher's forces by linear least squares."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_system

from workbench.model.potential import Potential
from workbench.teacher import teacher_potential
from workbench.training.boltzmann_inversion import fit_priors
from workbench.training.data import generate_teacher_data
from workbench.training.force_matching import potential_labels
from workbench.training.prior_refinement import refine_priors


@pytest.fixture(scope="module")
def chain():
    """A CLN025 teacher without contacts (bonded terms and repulsion alone), its frames
    at 300 and 400 K, and priors Boltzmann-inverted from the 300-K frames."""
    sys = tiny_system()
    teacher = teacher_potential(sys, epsilon=0.0)
    data = generate_teacher_data(sys, teacher, [300.0, 400.0], 4, 300, 10, seed=0)
    priors = fit_priors(sys, data["positions"][data["temperature"] == 300.0], 300.0,
                        dihedral_degree=1)
    return sys, teacher, data, priors


def _forces(sys, terms, positions):
    return potential_labels(Potential(sys.bead_types, None, terms), positions)[1]


def test_the_teachers_bonded_terms_are_recovered(chain):
    sys, teacher, data, priors = chain
    # the teacher's own repulsion is the term kept: what is left to fit is exactly the
    # teacher's bonds, angles and one-cosine dihedrals, which the basis holds
    priors = {**priors, "repulsion": teacher.priors["repulsion"]}
    refined, report = refine_priors(priors, data["positions"], data["forces"], ridge=1e-9)
    assert report.terms == ["bonds", "angles", "dihedrals"] and report.kept == 0
    assert report.residual_after < 1e-3 * report.force_rms_target
    assert report.residual_before > 100 * report.residual_after  # the inversion is off
    for name, atol in (("bonds", 1e-3), ("angles", 1e-3), ("dihedrals", 1e-3)):
        for key, value in teacher.priors[name].state_dict().items():
            if key != "index":
                assert torch.allclose(refined[name].state_dict()[key], value, atol=atol,
                                      rtol=1e-4), (name, key)
    assert refined["repulsion"] is priors["repulsion"]
    assert refined["bonds"] is not priors["bonds"]  # new terms; the inverted ones unchanged
    assert list(refined) == list(priors)
    # the refitted dihedrals' minimum is zero, as the inverted ones'
    phi = torch.linspace(-torch.pi, torch.pi, 721, dtype=torch.float64)
    d = refined["dihedrals"]
    energy = d.v0[:, None] + d.k1s * torch.sin(phi) + d.k2s * torch.cos(phi)
    assert energy.amin(1).abs().max() < 1e-3


def test_the_residuals_are_those_of_the_forces(chain):
    sys, teacher, data, priors = chain
    positions, forces = data["positions"], data["forces"]
    before = {name: {key: value.clone() for key, value in term.state_dict().items()}
              for name, term in priors.items()}
    refined, report = refine_priors(priors, positions, forces, frames=10_000)
    assert report.frames == positions.shape[0]
    for name, term in priors.items():  # the inverted priors are left as they were
        for key, value in term.state_dict().items():
            assert torch.equal(value, before[name][key])

    def rms(terms):
        return float((forces - _forces(sys, terms, positions)).double().square().mean().sqrt())

    assert report.force_rms_target == pytest.approx(
        rms({"repulsion": priors["repulsion"]}), rel=1e-4)
    assert report.residual_before == pytest.approx(rms(priors), rel=1e-3)
    assert report.residual_after == pytest.approx(rms(refined), rel=1e-3)
    assert report.residual_after < report.residual_before
    assert report.card()["residual_force_rms_refined"] == report.residual_after


def test_a_term_without_a_well_keeps_its_inverted_parameters(chain):
    sys, _, data, priors = chain
    # forces of bonds that push their beads away from x0: no well to fit
    pushing = type(priors["bonds"])(priors["bonds"].index, x0=priors["bonds"].x0,
                                    k=-priors["bonds"].k)
    forces = _forces(sys, {"bonds": pushing}, data["positions"])
    refined, report = refine_priors({"bonds": priors["bonds"]}, data["positions"], forces)
    assert report.kept == priors["bonds"].num_terms
    assert torch.equal(refined["bonds"].k, priors["bonds"].k)
    assert torch.equal(refined["bonds"].x0, priors["bonds"].x0)


def test_bad_input_is_refused(chain):
    _, teacher, data, priors = chain
    positions, forces = data["positions"], data["forces"]
    with pytest.raises(ValueError, match="both be"):
        refine_priors(priors, positions, forces[:, :-1])
    with pytest.raises(ValueError, match="ridge must be positive"):
        refine_priors(priors, positions, forces, ridge=0.0)
    with pytest.raises(ValueError, match="no bonded priors"):
        refine_priors({"repulsion": priors["repulsion"]}, positions, forces)
    with pytest.raises(TypeError, match="NativeContacts"):
        refine_priors({"bonds": teacher_potential(tiny_system()).priors["contacts"]},
                      positions, forces)
