"""Boltzmann inversion recovers known parameters from synthetic samples."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import tiny_system

from workbench.model.geometry import bond_lengths
from workbench.model.priors import FourierDihedrals
from workbench.system.topology import graph_distances
from workbench.teacher import teacher_potential
from workbench.training.boltzmann_inversion import (
    REPULSION_RANGE,
    TOUCH_RANGE,
    closest_approach,
    fit_fourier,
    fit_harmonic,
    fit_priors,
    non_native_minima,
    repulsion_sigma,
    term_groups,
)
from workbench.training.data import generate_teacher_data
from workbench.units import KB

KT = KB * 300.0


def test_harmonic_fit_recovers_k_and_x0():
    gen = torch.Generator().manual_seed(0)
    k, x0 = torch.tensor([100.0, 20.0]), torch.tensor([3.8, -0.3])
    samples = x0 + torch.sqrt(KT / (2 * k)) * torch.randn(50_000, 2, generator=gen)
    fit_x0, fit_k = fit_harmonic(samples, KT)
    assert torch.allclose(fit_x0, x0.double(), atol=2e-3)
    assert torch.allclose(fit_k, k.double(), rtol=0.05)
    _, pooled_k = fit_harmonic(samples[:, [0, 0]], KT, torch.tensor([0, 0]))
    assert torch.allclose(pooled_k, fit_k[0].expand(2), rtol=0.02)


def _cosine_well_samples(k, phi0, count, seed):
    """``count`` torsions (count, 1) from ``exp(−k (1 − cos(φ − φ0)) / kT)``."""
    grid = torch.linspace(-math.pi, math.pi, 20_001, dtype=torch.float64)
    cdf = torch.cumsum(torch.exp(-k * (1 - torch.cos(grid - phi0)) / KT), 0)
    u = torch.rand(count, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return grid[torch.searchsorted(cdf / cdf[-1], u).clamp(max=grid.numel() - 1)][:, None]


def test_fourier_fit_recovers_a_cosine_well():
    k, phi0 = 1.0, 1.0
    phi = _cosine_well_samples(k, phi0, 100_000, seed=1)
    k1s, k2s, v0 = fit_fourier(phi, KT, degree=3)
    assert abs(float(k1s[0, 0]) + k * math.sin(phi0)) < 0.05
    assert abs(float(k2s[0, 0]) + k * math.cos(phi0)) < 0.05
    assert k1s[0, 1:].abs().max() < 0.05 and k2s[0, 1:].abs().max() < 0.05


def test_a_narrow_well_rings_at_degree_three_and_not_at_degree_one():
    # a stiff native dihedral: the angles it never visits share one flat free energy, and
    # a three-harmonic fit to well and plateau has a second minimum on the plateau
    phi0 = 1.0
    phi = _cosine_well_samples(10.0, phi0, 20_000, seed=2)
    native = torch.tensor([phi0])
    index = torch.tensor([[0, 1, 2, 3]])
    three, one = (FourierDihedrals(index, **dict(zip(("k1s", "k2s", "v0"),
                                                     fit_fourier(phi, KT, degree=d),
                                                     strict=True)))
                  for d in (3, 1))
    assert non_native_minima(three, native).tolist() == [True]
    assert non_native_minima(one, native).tolist() == [False]
    # degree 1 is a single cosine: its minimum sits at the native angle
    assert abs(math.atan2(-float(one.k1s[0, 0]), -float(one.k2s[0, 0])) - phi0) < 0.02
    with pytest.raises(ValueError, match="degree >= 1"):
        fit_fourier(phi, KT, degree=0)


def test_type_grouping_ignores_direction():
    types = torch.tensor([1, 2, 3, 1])
    groups = term_groups(types, torch.tensor([[0, 1], [1, 0], [1, 2], [3, 1]]), "type")
    assert groups[0] == groups[1] == groups[3] != groups[2]
    assert term_groups(types, torch.tensor([[0, 1], [1, 0]]), "term").tolist() == [0, 1]


def test_priors_fitted_to_teacher_frames():
    sys = tiny_system()
    data = generate_teacher_data(sys, teacher_potential(sys), [300.0], 8, 300, 10, seed=0)
    priors = fit_priors(sys, data["positions"], 300.0, grouping="type")
    native = teacher_potential(sys).priors["bonds"].x0
    assert torch.allclose(priors["bonds"].x0, native, atol=0.1)
    assert (priors["bonds"].k > 10).all()
    sigma = priors["repulsion"].sigma
    closest = closest_approach(data["positions"], priors["repulsion"].index)
    assert torch.equal(sigma, closest.float())
    assert (sigma > 2.0).all()


def _repulsion_forms(form):
    """The tiny system, teacher frames of it, and the repulsion fitted to them in the
    default (power) form and in ``form``."""
    sys = tiny_system()
    data = generate_teacher_data(sys, teacher_potential(sys), [300.0], 4, 200, 10, seed=0)
    power = fit_priors(sys, data["positions"], 300.0)["repulsion"]
    return sys, data, power, fit_priors(sys, data["positions"], 300.0, repulsion=form)["repulsion"]


def test_cutoff_repulsion_form_adds_little_at_the_data():
    sys, data, power, cutoff = _repulsion_forms("cutoff")
    assert type(cutoff).__name__ == "CutoffRepulsion"
    assert torch.equal(cutoff.sigma, power.sigma)
    torch.testing.assert_close(cutoff.cutoff, REPULSION_RANGE * power.sigma)
    # pairs beyond 1.25 σ add nothing, and no pair adds more than under the power form
    terms, distances = cutoff.term_energies(data["positions"]), bond_lengths(
        data["positions"], cutoff.index
    )
    far = distances >= cutoff.cutoff
    assert far.any() and bool((terms[far] == 0).all())
    assert bool((terms <= power.term_energies(data["positions"]) + 1e-6).all())
    with pytest.raises(ValueError, match="repulsion must be one of"):
        fit_priors(sys, data["positions"], 300.0, repulsion="soft")


def test_edge_repulsion_form_is_zero_on_the_data_and_a_wall_below_it():
    sys, data, power, edge = _repulsion_forms("edge")
    assert type(edge).__name__ == "CutoffRepulsion"
    assert torch.equal(edge.sigma, power.sigma) and torch.equal(edge.cutoff, edge.sigma)
    # no energy and no force on any frame it was fitted to: every pair is at or beyond σ
    # (up to the float32 rounding of σ, for the pair that set it)
    positions = data["positions"].clone().requires_grad_(True)
    energy = edge.term_energies(positions)
    assert float(energy.detach().abs().max()) < 1e-5
    assert float(torch.autograd.grad(energy.sum(), positions)[0].abs().max()) < 1e-3
    # below its closest approach a pair is pushed apart, harder the closer it comes
    pair = edge.index[:1]
    sigma = float(edge.sigma[0])
    walls = []
    for fraction in (0.8, 0.7, 0.6):
        pos = sys.native_positions[None].clone().float()
        direction = pos[0, pair[0, 1]] - pos[0, pair[0, 0]]
        pos[0, pair[0, 1]] = pos[0, pair[0, 0]] + direction / direction.norm() * fraction * sigma
        walls.append(float(edge.term_energies(pos)[0, 0]))
    expected = [(1 / f) ** 6 - 1 + 6 * (f - 1) for f in (0.8, 0.7, 0.6)]
    assert walls == pytest.approx(expected, rel=1e-4)
    assert walls[0] > 1.5 and walls[2] > 17.0


def test_repulsion_separation_adds_the_one_five_pairs():
    sys = tiny_system()
    data = generate_teacher_data(sys, teacher_potential(sys), [300.0], 4, 200, 10, seed=0)
    default = fit_priors(sys, data["positions"], 300.0)["repulsion"]
    wider = fit_priors(sys, data["positions"], 300.0, repulsion_separation=4)["repulsion"]
    separation = graph_distances(sys.n_beads, sys.bonds)
    kept = {tuple(p) for p in default.index.tolist()}
    added = [p for p in wider.index.tolist() if tuple(p) not in kept]
    assert kept <= {tuple(p) for p in wider.index.tolist()}
    assert added and all(int(separation[i, j]) == 4 for i, j in added)
    assert all(int(separation[i, j]) >= 5 for i, j in kept)
    # each added pair is fitted as the others: σ is its closest approach in the data
    closest = closest_approach(data["positions"], wider.index)
    torch.testing.assert_close(wider.sigma, closest.float())
    with pytest.raises(ValueError, match="at least 4 bonds"):
        fit_priors(sys, data["positions"], 300.0, repulsion_separation=3)


@pytest.mark.parametrize("grouping", ["type", "name", "sequence"])
def test_grouped_repulsion_shares_the_smallest_closest_approach_of_a_class(grouping):
    sys = tiny_system()
    data = generate_teacher_data(sys, teacher_potential(sys), [300.0], 4, 200, 10, seed=0)
    prior = fit_priors(sys, data["positions"], 300.0, repulsion_separation=4,
                       repulsion_grouping=grouping)["repulsion"]
    pairs = prior.index
    closest = closest_approach(data["positions"], pairs)
    separation = graph_distances(sys.n_beads, sys.bonds)
    labels = list(sys.bead_names) if grouping == "name" else sys.bead_types.tolist()
    residue = sys.bead_residue.tolist()

    def key(i, j):  # unordered labels, 1-5 pairs apart from the rest, and with "sequence"
        # each residue separation up to 5 apart from the others
        apart = min(abs(residue[i] - residue[j]), 5) if grouping == "sequence" else 0
        return frozenset((labels[i], labels[j])), min(int(separation[i, j]), 5), apart

    smallest = {}
    for (i, j), r in zip(pairs.tolist(), closest.tolist(), strict=True):
        smallest[key(i, j)] = min(r, smallest.get(key(i, j), math.inf))
    expected = torch.tensor([smallest[key(i, j)] for i, j in pairs.tolist()])
    torch.testing.assert_close(prior.sigma, expected.float())
    # a hard core: no pair's σ exceeds its own closest approach, and pairs across the
    # fold no longer repel at their own (most of them share a smaller σ)
    assert bool((prior.sigma <= closest.float() + 1e-6).all())
    assert float((prior.sigma < closest.float() - 0.5).float().mean()) > 0.5
    if grouping == "sequence":  # finer than "type": never a softer wall, and some harder
        by_type = fit_priors(sys, data["positions"], 300.0, repulsion_separation=4,
                             repulsion_grouping="type")["repulsion"].sigma
        assert bool((prior.sigma >= by_type - 1e-6).all())
        assert bool((prior.sigma > by_type + 0.5).any())
    # the 1-5 pairs' classes are their own: adding them leaves the others' σ unchanged
    without = fit_priors(sys, data["positions"], 300.0, repulsion_grouping=grouping)["repulsion"]
    wider = {tuple(p): s for p, s in zip(pairs.tolist(), prior.sigma.tolist(), strict=True)}
    assert all(abs(wider[tuple(p)] - s) < 1e-6
               for p, s in zip(without.index.tolist(), without.sigma.tolist(), strict=True))


def test_touching_repulsion_keeps_the_own_wall_of_pairs_that_came_close():
    sys = tiny_system()
    data = generate_teacher_data(sys, teacher_potential(sys), [300.0], 4, 200, 10, seed=0)

    def sigma(grouping):
        return fit_priors(sys, data["positions"], 300.0, repulsion_separation=4,
                          repulsion_grouping=grouping)["repulsion"]

    touching, by_sequence = sigma("touching"), sigma("sequence")
    closest = closest_approach(data["positions"], touching.index).float()
    near = closest < TOUCH_RANGE
    assert bool(near.any()) and bool((~near).any())
    torch.testing.assert_close(touching.sigma[near], closest[near])
    torch.testing.assert_close(touching.sigma[~near], by_sequence.sigma[~near])
    # pairs in contact that their class would wall off closer are held at their own wall
    assert bool((touching.sigma[near] > by_sequence.sigma[near] + 0.5).any())


def test_repulsion_groupings_refused_by_name():
    sys = tiny_system()
    positions = sys.native_positions[None]
    pairs = torch.tensor([[0, 10]])
    torch.testing.assert_close(repulsion_sigma(sys, positions, pairs),
                               closest_approach(positions, pairs))
    with pytest.raises(ValueError, match="unknown repulsion grouping 'atom'"):
        repulsion_sigma(sys, positions, pairs, "atom")
    with pytest.raises(ValueError, match="unknown repulsion grouping 'atom'"):
        fit_priors(sys, positions, 300.0, repulsion_grouping="atom")
