"""Prior terms: formulas (mlcg conventions), geometry against mdtraj, forces against
finite differences, parameter validation and the native-structure priors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import (
    finite_difference_forces,
    perturbed_positions,
    relative_error,
    tiny_system,
)

from workbench.model import (
    CutoffRepulsion,
    FourierDihedrals,
    HarmonicAngles,
    HarmonicBonds,
    Potential,
    Repulsion,
)
from workbench.model.geometry import angle_cosines, bond_lengths, torsions
from workbench.model.native_priors import native_priors
from workbench.model.priors import PRIOR_CLASSES, ContactBarriers, NativeContacts
from workbench.system.topology import nonbonded_pairs


def random_priors(seed: int = 0) -> dict[str, torch.nn.Module]:
    """One term of every class on CLN025's topology, with random (non-native) parameters."""
    sys = tiny_system()
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape, lo=0.0, hi=1.0):
        return lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=torch.float64)

    nb, na, nd = len(sys.bonds), len(sys.angles), len(sys.dihedrals)
    pairs = nonbonded_pairs(sys)
    return {
        "HarmonicBonds": HarmonicBonds(sys.bonds, x0=rand(nb, lo=1.2, hi=1.6),
                                       k=rand(nb, lo=50, hi=200)),
        "HarmonicAngles": HarmonicAngles(sys.angles, x0=rand(na, lo=-0.8, hi=0.2),
                                         k=rand(na, lo=10, hi=80)),
        "FourierDihedrals": FourierDihedrals(sys.dihedrals, k1s=rand(nd, 3, lo=-1, hi=1),
                                             k2s=rand(nd, 3, lo=-1, hi=1), v0=rand(nd)),
        "Repulsion": Repulsion(pairs, sigma=rand(len(pairs), lo=2.5, hi=3.5)),
        "CutoffRepulsion": CutoffRepulsion(pairs, sigma=rand(len(pairs), lo=2.5, hi=3.5),
                                           cutoff=rand(len(pairs), lo=6.0, hi=9.0)),
        "NativeContacts": NativeContacts(pairs[:40], r0=rand(40, lo=4.0, hi=6.0),
                                         epsilon=rand(40, lo=0.2, hi=1.0)),
        "ContactBarriers": ContactBarriers(pairs[:40], center=rand(40, lo=4.0, hi=7.0),
                                           height=rand(40, lo=0.1, hi=0.5)),
    }


CORE_PRIORS = ("HarmonicBonds", "HarmonicAngles", "FourierDihedrals", "Repulsion",
               "CutoffRepulsion", "NativeContacts", "ContactBarriers")


def test_core_prior_classes_are_registered_for_loading():
    assert set(random_priors()) == set(CORE_PRIORS)
    for name in CORE_PRIORS:
        assert PRIOR_CLASSES[name].__name__ == name


@pytest.mark.parametrize("name", CORE_PRIORS)
def test_prior_forces_match_central_finite_differences(name):
    term = random_priors()[name].double()
    potential = Potential(tiny_system().bead_types, None, {"term": term})
    pos = perturbed_positions(replicas=2, sigma=0.25, seed=3)

    def energy(batch):
        return potential.energy(batch, None)

    _, forces = potential.energy_and_forces(pos, None)
    assert float(forces.abs().max()) > 1e-2
    for r in range(2):
        reference = finite_difference_forces(energy, pos[r])
        assert relative_error(forces[r], reference) < 1e-6


# -- formulas ---------------------------------------------------------------------------
def test_harmonic_bond_has_no_half_factor():
    pos = torch.tensor([[[0.0, 0.0, 0.0], [0.0, 2.0, 0.0]]])
    bonds = HarmonicBonds(torch.tensor([[0, 1]]), x0=torch.tensor([1.5]), k=torch.tensor([3.0]))
    torch.testing.assert_close(bonds(pos), torch.tensor([3.0 * 0.5**2]))


def test_harmonic_angle_is_harmonic_in_cosine():
    # right angle at the apex (bead 1): cos θ = 0
    pos = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 2.0, 0.0]]])
    angles = HarmonicAngles(
        torch.tensor([[0, 1, 2]]), x0=torch.tensor([math.cos(2.0)]), k=torch.tensor([10.0])
    )
    torch.testing.assert_close(angles(pos), torch.tensor([10.0 * math.cos(2.0) ** 2]))


def test_fourier_dihedral_formula():
    pos = perturbed_positions(replicas=3, sigma=0.5, seed=8)
    index = torch.tensor([[0, 1, 3, 4], [5, 6, 8, 9]])
    k1s, k2s, v0 = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2)
    term = FourierDihedrals(index, k1s=k1s, k2s=k2s, v0=v0).double()
    phi = torsions(pos, index)
    n = torch.arange(1, 4, dtype=torch.float64)
    expected = (
        v0.double()
        + (k1s.double() * torch.sin(phi[..., None] * n)).sum(-1)
        + (k2s.double() * torch.cos(phi[..., None] * n)).sum(-1)
    ).sum(-1)
    torch.testing.assert_close(term(pos), expected)


def test_repulsion_is_inverse_sixth_power():
    pos = torch.tensor([[[0.0, 0.0, 0.0], [3.0, 0.0, 0.0], [0.0, 0.0, 6.0]]])
    rep = Repulsion(torch.tensor([[0, 1], [0, 2]]), sigma=torch.tensor([1.5, 3.0]))
    torch.testing.assert_close(rep(pos), torch.tensor([0.5**6 + 0.5**6]))


def test_cutoff_repulsion_is_shifted_to_zero_at_its_cutoff():
    sigma, cutoff = 3.0, 4.0
    rep = CutoffRepulsion(torch.tensor([[0, 1]]), sigma=torch.tensor([sigma]),
                          cutoff=torch.tensor([cutoff])).double()

    def energy(r):
        pos = torch.zeros(1, 2, 3, dtype=torch.float64)
        pos[0, 1, 0] = r
        return float(rep(pos)[0])

    edge = (sigma / cutoff) ** 6
    assert energy(2.5) == pytest.approx(
        (sigma / 2.5) ** 6 - edge + 6 * edge * (2.5 - cutoff) / cutoff, rel=1e-12
    )
    assert energy(cutoff + 1e-9) == 0.0 and energy(7.0) == 0.0
    h = 1e-6  # energy and slope continuous at the cutoff
    assert abs(energy(cutoff - h)) < 1e-9
    assert abs(energy(cutoff - h) - energy(cutoff - 2 * h)) < 1e-10
    assert energy(sigma) > 0.0 and energy(2.0) > energy(sigma)


def energy_curve(term, lo, hi, points):
    """A one-pair term's energy at ``points`` distances from ``lo`` to ``hi`` (float64)."""
    d = torch.linspace(lo, hi, points, dtype=torch.float64)
    pos = torch.zeros(len(d), 2, 3, dtype=torch.float64)
    pos[:, 1, 0] = d
    return d, term.double()(pos)


def test_native_contact_well_minimum():
    r0, eps = 5.0, 0.7
    term = NativeContacts(torch.tensor([[0, 1]]), r0=torch.tensor([r0]),
                          epsilon=torch.tensor([eps]))
    d, energy = energy_curve(term, 4.0, 8.0, 401)
    assert float(d[energy.argmin()]) == pytest.approx(r0)
    assert float(energy.min()) == pytest.approx(-eps)
    assert float(energy[-1]) < 0 and float(energy[-1]) > -0.2 * eps  # decays to zero outside


def test_contact_barrier_peaks_at_its_center():
    center, height = 6.5, 0.3
    term = ContactBarriers(torch.tensor([[0, 1]]), center=torch.tensor([center]),
                           height=torch.tensor([height]))
    d, energy = energy_curve(term, 4.0, 9.0, 501)
    assert float(d[energy.argmax()]) == pytest.approx(center)
    assert float(energy.max()) == pytest.approx(height)
    half = float(energy[(d - (center + 0.5)).abs().argmin()])  # one width out: e^-1/2
    assert half == pytest.approx(height * math.exp(-0.5), rel=1e-3)


def test_geometry_matches_mdtraj():
    md = pytest.importorskip("mdtraj")
    sys = tiny_system()
    pos = perturbed_positions(replicas=3, sigma=0.4, seed=9)
    traj = md.Trajectory((pos / 10.0).numpy().astype(np.float64), None)
    torch.testing.assert_close(
        bond_lengths(pos, sys.bonds),
        torch.from_numpy(md.compute_distances(traj, sys.bonds.numpy()) * 10.0).double(),
        rtol=1e-5, atol=1e-5,
    )
    torch.testing.assert_close(
        angle_cosines(pos, sys.angles),
        torch.from_numpy(np.cos(md.compute_angles(traj, sys.angles.numpy()))).double(),
        rtol=1e-5, atol=1e-5,
    )
    # IUPAC sign convention, trans = ±π (docs/mlcg-format.md §7.2); compare on the circle.
    phi = torsions(pos, sys.dihedrals)
    ref = torch.from_numpy(md.compute_dihedrals(traj, sys.dihedrals.numpy())).double()
    diff = torch.remainder(phi - ref + math.pi, 2 * math.pi) - math.pi
    assert float(diff.abs().max()) < 1e-5
    assert float(phi.abs().max()) <= math.pi


def test_terms_broadcast_over_replicas():
    priors = random_priors(seed=2)
    pos = perturbed_positions(replicas=4, sigma=0.3, seed=10)
    for term in priors.values():
        term = term.double()
        together = term(pos)
        assert together.shape == (4,)
        alone = torch.cat([term(pos[r : r + 1]) for r in range(4)])
        torch.testing.assert_close(together, alone, rtol=1e-12, atol=1e-12)


# -- validation ---------------------------------------------------------------------------
def test_missing_or_extra_parameters_are_refused():
    with pytest.raises(ValueError, match=r"missing \['k'\]"):
        HarmonicBonds(torch.tensor([[0, 1]]), x0=torch.tensor([1.0]))
    with pytest.raises(ValueError, match=r"unexpected \['epsilon'\]"):
        Repulsion(torch.tensor([[0, 1]]), sigma=torch.tensor([1.0]), epsilon=torch.tensor([1.0]))


def test_parameter_count_must_match_terms():
    with pytest.raises(ValueError, match=r"HarmonicAngles.k has leading size \(2,\), expected 1"):
        HarmonicAngles(torch.tensor([[0, 1, 2]]), x0=torch.tensor([0.0]), k=torch.ones(2))


def test_empty_term_gives_zero_energy():
    term = HarmonicBonds(torch.zeros(0, 2, dtype=torch.long), x0=torch.zeros(0), k=torch.zeros(0))
    assert term.num_terms == 0
    torch.testing.assert_close(term(torch.randn(3, 5, 3)), torch.zeros(3))


# -- native priors --------------------------------------------------------------------
def test_native_priors_have_their_minimum_at_the_native_structure():
    sys = tiny_system()
    priors = {k: v.double() for k, v in native_priors(sys).items()}
    assert {"bonds", "angles", "dihedrals", "repulsion", "contacts"} <= set(priors)
    native = sys.native_positions.double()[None]
    for name in ("bonds", "angles", "dihedrals"):
        potential = Potential(sys.bead_types, None, {name: priors[name]})
        energy, forces = potential.energy_and_forces(native, None)
        # parameters are stored in float32: zero up to their rounding (k·1e-7 Å)
        assert float(energy.abs().max()) < 1e-6, name
        assert float(forces.abs().max()) < 1e-4, name
    # every well sits at its native distance: energy −ε per contact
    contacts = priors["contacts"]
    torch.testing.assert_close(contacts(native), -contacts.epsilon.sum()[None])
    # repulsion never exceeds 90 % of the native distance nor the cap
    rep = priors["repulsion"]
    native_d = bond_lengths(native, rep.index)[0]
    assert bool((rep.sigma <= 0.9 * native_d + 1e-6).all())
    assert float(rep.sigma.max()) <= 3.5 + 1e-6
    # contacts and repulsion partition the non-bonded pairs
    pairs = {tuple(p) for p in nonbonded_pairs(sys).tolist()}
    rep_pairs = {tuple(p) for p in rep.index.tolist()}
    contact_pairs = {tuple(p) for p in contacts.index.tolist()}
    assert rep_pairs | contact_pairs == pairs and not rep_pairs & contact_pairs


def test_native_priors_without_contacts():
    priors = native_priors(tiny_system(), contact_epsilon=0.0)
    assert "contacts" not in priors
    assert priors["repulsion"].num_terms == len(nonbonded_pairs(tiny_system()))
