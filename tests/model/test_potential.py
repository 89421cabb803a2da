"""Potential = SchNet + priors: forces are −∂E/∂x (autograd and finite differences),
symmetries (rotation, translation, replica permutation), replica independence."""

from __future__ import annotations

import pytest
import torch
from helpers import (
    autograd_forces,
    energy_function,
    exact_graph,
    finite_difference_forces,
    perturbed_positions,
    prior_potential,
    random_rotation,
    relative_error,
    schnet_potential,
    tiny_system,
)

from workbench.model import Potential


@pytest.fixture(scope="module")
def potential() -> Potential:
    """Small SchNet plus every native prior, in float64."""
    return schnet_potential(seed=1).double()


@pytest.fixture(scope="module")
def positions() -> torch.Tensor:
    return perturbed_positions(replicas=3, sigma=0.3, seed=11)


def evaluate(potential: Potential, pos: torch.Tensor):
    graph = exact_graph(pos, potential.cutoff) if potential.schnet is not None else None
    return potential.energy_and_forces(pos, graph)


def test_energy_and_forces_match_autograd(potential, positions):
    energy, forces = evaluate(potential, positions)
    fn = energy_function(potential)
    torch.testing.assert_close(energy, fn(positions).detach(), rtol=0, atol=0)
    torch.testing.assert_close(forces, autograd_forces(fn, positions), rtol=1e-12, atol=1e-12)
    assert energy.shape == (3,) and forces.shape == positions.shape
    assert not energy.requires_grad and not forces.requires_grad


def test_energy_is_the_sum_of_its_terms(potential, positions):
    graph = exact_graph(positions, potential.cutoff)
    terms = potential.energy_terms(positions, graph)
    assert list(terms) == ["schnet", *potential.priors.keys()]
    total = torch.stack(list(terms.values())).sum(0)
    torch.testing.assert_close(potential.energy(positions, graph), total)


def test_full_potential_forces_match_finite_differences(potential, positions):
    _, forces = evaluate(potential, positions[:1])
    reference = finite_difference_forces(energy_function(potential), positions[0])
    assert relative_error(forces[0], reference) < 1e-6


def test_forces_under_no_grad_and_input_untouched(potential, positions):
    pos = positions.clone()
    with_grad = evaluate(potential, pos)
    with torch.no_grad():
        without = evaluate(potential, pos)
    assert torch.equal(with_grad[1], without[1])
    assert torch.equal(pos, positions) and not pos.requires_grad


# -- symmetries -------------------------------------------------------------------------
def test_rotation_and_translation(potential, positions):
    rot = random_rotation(seed=3)
    shift = torch.tensor([12.0, -7.5, 3.25], dtype=torch.float64)
    moved = positions @ rot.T + shift
    e0, f0 = evaluate(potential, positions)
    e1, f1 = evaluate(potential, moved)
    torch.testing.assert_close(e1, e0, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(f1, f0 @ rot.T, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kind", ["schnet", "priors", "both"])
def test_forces_sum_to_zero(kind, positions):
    if kind == "schnet":
        pot = schnet_potential(seed=4, priors=False).double()
    elif kind == "priors":
        pot = prior_potential().double()
    else:
        pot = schnet_potential(seed=4).double()
    _, forces = evaluate(pot, positions)
    net = forces.sum(1)  # (R, 3): no external field, so no net force
    scale = forces.abs().max()
    assert scale > 1e-3
    assert float(net.abs().max()) < 1e-10 * max(1.0, float(scale))
    # ... and no net torque about the centroid
    centred = positions - positions.mean(1, keepdim=True)
    torque = torch.linalg.cross(centred, forces, dim=-1).sum(1)
    assert float(torque.abs().max()) < 1e-9 * max(1.0, float(scale))


def test_permuting_replicas_permutes_energies_and_forces(potential):
    pos = perturbed_positions(replicas=5, sigma=0.4, seed=12)
    perm = torch.tensor([3, 0, 4, 1, 2])
    e, f = evaluate(potential, pos)
    e_p, f_p = evaluate(potential, pos[perm])
    assert len(set(e.tolist())) == 5, "replicas must differ for the test to mean anything"
    torch.testing.assert_close(e_p, e[perm], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(f_p, f[perm], rtol=1e-12, atol=1e-12)


def test_replicas_do_not_interact(potential):
    """Moving one replica changes nothing for the others (no cross-replica edges)."""
    pos = perturbed_positions(replicas=3, sigma=0.3, seed=13)
    e, f = evaluate(potential, pos)
    other = pos.clone()
    other[1] = pos[1] + 0.5 * torch.randn(pos[1].shape, dtype=torch.float64)
    # put replica 1 right next to replica 0 in space: still no interaction
    other[1] = other[1] - other[1].mean(0) + pos[0].mean(0) + 0.1
    e2, f2 = evaluate(potential, other)
    assert abs(float(e2[1] - e[1])) > 1e-3
    for r in (0, 2):
        torch.testing.assert_close(e2[r], e[r], rtol=0, atol=1e-12)
        torch.testing.assert_close(f2[r], f[r], rtol=0, atol=1e-12)


# -- errors ---------------------------------------------------------------------------
def test_schnet_potential_needs_a_graph(potential, positions):
    with pytest.raises(ValueError, match="needs a neighbour graph"):
        potential.energy(positions, None)


def test_prior_only_potential():
    pot = prior_potential()
    assert pot.cutoff == 0.0 and pot.schnet is None
    assert pot.n_beads == tiny_system().n_beads
    energy, forces = pot.energy_and_forces(perturbed_positions(replicas=2, dtype=torch.float32),
                                           None)
    assert energy.dtype == torch.float32 and bool(torch.isfinite(forces).all())


def test_reference_networks_see_only_the_slots_that_hold_edges(monkeypatch):
    from workbench.model.options import KernelOptions
    from workbench.neighbors import NeighborList

    pot = schnet_potential(priors=False).double()
    pos = perturbed_positions(replicas=2, sigma=0.2, seed=3).double()
    padded = NeighborList(pos.shape[1], pot.cutoff, skin=1.0, capacity=6000).update(pos)
    assert padded.valid is not None and not bool(padded.valid.all())
    seen = []
    forward = pot.network.forward
    monkeypatch.setattr(pot.network, "forward",
                        lambda *a, **kw: seen.append(a[2]) or forward(*a, **kw))
    energy, forces = pot.energy_and_forces(pos, padded, KernelOptions())
    assert seen[-1].valid is None and seen[-1].num_edges == int(padded.valid.sum())
    exact = NeighborList(pos.shape[1], pot.cutoff, skin=0.0).update(pos, exact=True)
    energy_exact, forces_exact = pot.energy_and_forces(pos, exact, KernelOptions())
    torch.testing.assert_close(energy, energy_exact, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(forces, forces_exact, rtol=1e-12, atol=1e-12)
    # kernels that walk the slots and their layouts get the graph as it is; node layers
    # alone (fused_update) read the edge arrays only
    monkeypatch.setattr("workbench.model.force_paths.force_path", lambda *a: "triton")
    monkeypatch.setattr(pot.network, "forward",
                        lambda p, *a, **kw: seen.append(a[1]) or p[:, 0] * 0.0)
    pot.energy(pos, padded, KernelOptions(fused_message_passing=True))
    assert seen[-1] is padded
    pot.energy(pos, padded, KernelOptions(fused_update=True, fused_pair_search=True))
    assert seen[-1].valid is None
    # a backend of the network's own: OpenEquivariance and deepmd-kit take every slot,
    # cuEquivariance gathers by the edge arrays as e3nn does
    for backend, compacted in [("openequivariance", False), ("deepmd", False),
                               ("cuequivariance", True), ("e3nn", True)]:
        monkeypatch.setattr(pot.network, "backend", backend, raising=False)
        pot.energy(pos, padded, KernelOptions(fused_update=True))
        assert (seen[-1].valid is None) == compacted, backend
