"""CGSchNet: forces against finite differences, the math against a dense reference,
graph modes (fixed capacity, candidate list) and configuration errors."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import (
    exact_graph,
    finite_difference_forces,
    perturbed_positions,
    relative_error,
    schnet_potential,
    small_config,
    small_schnet,
    tiny_system,
)

from workbench.model import CGSchNet, Potential, SchNetConfig
from workbench.neighbors import NeighborList

# Basis / envelope combinations the engine supports (docs/mlcg-format.md §5.2, §6).
VARIANTS = {
    "gaussian-cosine": {},
    "expnormal-cosine": {"basis": "exp-normal"},
    "gaussian-identity": {"basis_envelope": "identity", "conv_envelope": "identity"},
    "expnormal-identity": {
        "basis": "exp-normal",
        "basis_envelope": "identity",
        "conv_envelope": "identity",
    },
    "expnormal-lower-cutoff": {"basis": "exp-normal", "cutoff_lower": 1.0},
    "silu-filter-bias": {"activation": "silu", "filter_bias": True, "output_widths": [8, 4]},
}


def schnet_only(variant: str, seed: int = 0) -> Potential:
    return schnet_potential(priors=False, seed=seed, **VARIANTS[variant]).double()


def pair_distances(pos: torch.Tensor) -> torch.Tensor:
    """All distinct intra-replica pair distances, flattened."""
    n = pos.shape[1]
    iu = torch.triu_indices(n, n, offset=1)
    return torch.cdist(pos, pos)[:, iu[0], iu[1]].flatten()


# -- forces ----------------------------------------------------------------------------
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_forces_match_central_finite_differences(variant):
    potential = schnet_only(variant)
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=1)
    cutoff = potential.cutoff
    # With identity envelopes the energy jumps where a pair crosses the cutoff: the
    # configuration must keep every pair well clear of it for differences to be meaningful.
    assert (pair_distances(pos) - cutoff).abs().min() > 1e-4  # ten times the FD step

    def energy(batch):
        return potential.energy(batch, exact_graph(batch, cutoff))

    _, forces = potential.energy_and_forces(pos, exact_graph(pos, cutoff))
    assert forces.dtype == torch.float64
    assert float(forces.abs().max()) > 1e-3, "forces too small for a meaningful comparison"
    reference = finite_difference_forces(energy, pos[0])
    assert relative_error(forces[0], reference) < 1e-6


def test_envelope_derivative_is_in_the_forces():
    """A pair just inside the cutoff feels the slope of the cosine envelope.

    Two beads at distance d < r_c: E(d) is smooth and the force must equal −dE/dd,
    including the C'(d) term (a published implementation drops it).
    """
    model = small_schnet(seed=3).double()
    potential = Potential(torch.tensor([1, 2]), model)
    cutoff = model.cutoff
    for d in (0.5 * cutoff, 0.8 * cutoff, 0.97 * cutoff):
        pos = torch.tensor([[[0.0, 0.0, 0.0], [d, 0.0, 0.0]]], dtype=torch.float64)

        def energy(batch):
            return potential.energy(batch, exact_graph(batch, cutoff))

        _, forces = potential.energy_and_forces(pos, exact_graph(pos, cutoff))
        reference = finite_difference_forces(energy, pos[0], h=1e-6)
        assert relative_error(forces[0], reference) < 1e-6
        # Newton's third law for a pair: equal and opposite, along the bond.
        torch.testing.assert_close(forces[0, 0], -forces[0, 1], rtol=0, atol=1e-12)
        assert forces[0, :, 1:].abs().max() < 1e-12


@pytest.mark.parametrize("variant", ["gaussian-cosine", "gaussian-identity", "expnormal-identity"])
def test_pair_beyond_cutoff_contributes_nothing(variant):
    model = small_schnet(seed=3, **VARIANTS[variant]).double()
    potential = Potential(torch.tensor([1, 2]), model)
    far = torch.tensor([[[0.0, 0.0, 0.0], [model.cutoff + 0.01, 0.0, 0.0]]], dtype=torch.float64)
    farther = far.clone()
    farther[0, 1, 0] = 3 * model.cutoff
    # Candidate graph (exact=False) still holds the pair: the envelope must zero it.
    graph = NeighborList(2, model.cutoff, skin=1.0, exact=False).update(far)
    assert graph.num_edges == 2
    e_far, f_far = potential.energy_and_forces(far, graph)
    e_none, _ = potential.energy_and_forces(farther, exact_graph(farther, model.cutoff))
    torch.testing.assert_close(e_far, e_none, rtol=0, atol=1e-12)
    assert float(f_far.abs().max()) == 0.0


# -- the math, against an independent dense implementation ----------------------------
def _cosine(d, lower, upper):
    if lower > 0:
        x = 2 * (d - lower) / (upper - lower) + 1
        inside = (d < upper) & (d > lower)
    else:
        x = d / upper
        inside = d < upper
    return torch.where(inside, 0.5 * (torch.cos(math.pi * x) + 1), torch.zeros_like(d))


def dense_reference_energy(model: CGSchNet, pos: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
    """Energy of one replica, written from ARCHITECTURE.md with all pairs (no graph)."""
    cfg = model.config
    n = pos.shape[0]
    d = torch.cdist(pos, pos)
    pair = (d < cfg.cutoff) & ~torch.eye(n, dtype=torch.bool)
    rbf = model.rbf_layer
    if cfg.basis == "gaussian":
        phi = torch.exp(rbf.coeff * (d[..., None] - rbf.offset) ** 2)
    else:
        z = torch.exp(rbf.alpha * (cfg.cutoff_lower - d))[..., None] - rbf.means
        phi = torch.exp(-rbf.betas * z**2)
    if cfg.basis_envelope == "cosine":
        phi = phi * _cosine(d, cfg.cutoff_lower, cfg.cutoff)[..., None]
    if cfg.conv_envelope == "cosine":
        envelope = _cosine(d, cfg.cutoff_lower, cfg.cutoff)
    else:
        envelope = torch.ones_like(d)
    envelope = envelope * pair
    act = torch.tanh
    h = model.embedding_layer.weight[types]
    for block in model.interaction_blocks:
        conv = block.conv
        first, last = conv.filter_network.layers[0], conv.filter_network.layers[2]
        w = act(phi @ first.weight.T + first.bias) @ last.weight.T
        w = w * envelope[..., None]  # [i, j, F]: filter of the message j -> i
        x = h @ conv.lin1.weight.T  # [j, F]
        u = (w * x[None, :, :]).sum(1)
        v = u @ conv.lin2.weight.T + conv.lin2.bias
        h = h + act(v) @ block.lin.weight.T + block.lin.bias
    layers = model.output_network.layers
    out = act(h @ layers[0].weight.T + layers[0].bias) @ layers[2].weight.T
    assert layers[2].bias is None and len(layers) == 3
    return out.sum()


@pytest.mark.parametrize("variant", ["gaussian-cosine", "expnormal-lower-cutoff",
                                     "gaussian-identity"])
def test_energy_matches_dense_reference(variant):
    potential = schnet_only(variant, seed=5)
    pos = perturbed_positions(replicas=2, sigma=0.5, seed=2)
    energy = potential.energy(pos, exact_graph(pos, potential.cutoff))
    for r in range(2):
        expected = dense_reference_energy(potential.schnet, pos[r], potential.bead_types)
        torch.testing.assert_close(energy[r], expected, rtol=1e-10, atol=1e-10)


def test_default_basis_parameters_follow_mlcg():
    """Gaussian: μ = linspace(r_l, r_c, K), γ = −½/Δμ²; exp-normal: mlcg's defaults."""
    g = CGSchNet(small_config(cutoff=6.0, num_rbf=8)).rbf_layer
    torch.testing.assert_close(g.offset, torch.linspace(0.0, 6.0, 8))
    torch.testing.assert_close(g.coeff, torch.tensor(-0.5 / (6.0 / 7) ** 2))
    e = CGSchNet(small_config(basis="exp-normal", cutoff=6.0, cutoff_lower=1.0, num_rbf=8))
    e = e.rbf_layer
    span = 5.0
    torch.testing.assert_close(e.means, torch.linspace(math.exp(-span), 1.0, 8))
    torch.testing.assert_close(e.betas, torch.full((8,), (2 / 8 * (1 - math.exp(-span))) ** -2))
    assert e.alpha == pytest.approx(5.0 / span)


def test_cosine_envelope_values():
    model = CGSchNet(small_config(cutoff=6.0))
    env = model.interaction_blocks[0].conv.cutoff
    d = torch.tensor([0.0, 3.0, 6.0, 7.0])
    torch.testing.assert_close(env(d), torch.tensor([1.0, 0.5, 0.0, 0.0]))
    bump = CGSchNet(small_config(cutoff=6.0, cutoff_lower=2.0)).interaction_blocks[0].conv.cutoff
    torch.testing.assert_close(
        bump(torch.tensor([1.0, 2.0, 4.0, 6.0])), torch.tensor([0.0, 0.0, 1.0, 0.0])
    )


# -- graph modes -------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["gaussian-cosine", "gaussian-identity", "expnormal-cosine"])
def test_fixed_capacity_graph_gives_exact_results(variant):
    potential = schnet_only(variant)
    pos = perturbed_positions(replicas=3, sigma=0.3, seed=4)
    n = pos.shape[1]
    e_exact, f_exact = potential.energy_and_forces(pos, exact_graph(pos, potential.cutoff))

    lst = NeighborList(n, potential.cutoff, skin=1.5, capacity=20000)
    graph = lst.update(pos)
    assert graph.num_edges == 20000 and graph.valid is not None
    padding = int((~graph.valid).sum())
    assert padding > 0, "the test needs padded slots"
    assert bool((graph.src[~graph.valid] == graph.num_nodes).all())
    e_cap, f_cap = potential.energy_and_forces(pos, graph)
    torch.testing.assert_close(e_cap, e_exact, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(f_cap, f_exact, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("variant", ["gaussian-cosine", "gaussian-identity", "expnormal-identity"])
def test_candidate_graph_with_skin_gives_exact_results(variant):
    potential = schnet_only(variant)
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=6)
    cutoff = potential.cutoff
    exact = exact_graph(pos, cutoff)
    candidates = NeighborList(pos.shape[1], cutoff, skin=2.0, exact=False).update(pos)
    flat = pos.reshape(-1, 3)
    d = torch.linalg.vector_norm(flat[candidates.dst] - flat[candidates.src], dim=-1)
    beyond = int((d >= cutoff).sum())
    assert beyond > 100, "the candidate list must hold edges beyond the cutoff"
    assert candidates.num_edges == exact.num_edges + beyond
    e_exact, f_exact = potential.energy_and_forces(pos, exact)
    e_cand, f_cand = potential.energy_and_forces(pos, candidates)
    torch.testing.assert_close(e_cand, e_exact, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(f_cand, f_exact, rtol=1e-12, atol=1e-12)


def test_float32_matches_float64():
    potential = schnet_potential(seed=2)
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=7, dtype=torch.float32)
    e32, f32 = potential.energy_and_forces(pos, exact_graph(pos, potential.cutoff))
    assert e32.dtype == torch.float32 and f32.dtype == torch.float32
    potential = potential.double()
    pos64 = pos.double()
    e64, f64 = potential.energy_and_forces(pos64, exact_graph(pos64, potential.cutoff))
    torch.testing.assert_close(e32.double(), e64, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(f32.double(), f64, rtol=1e-4, atol=1e-4)


# -- configuration --------------------------------------------------------------------
def test_config_round_trip_and_unknown_keys():
    config = SchNetConfig(hidden=8, basis="exp-normal", output_widths=[4, 2])
    assert SchNetConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown SchNet config keys.*bogus"):
        SchNetConfig.from_dict({**config.to_dict(), "bogus": 1})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"basis": "bessel"}, "unknown basis 'bessel'"),
        ({"activation": "relu6"}, "unknown activation 'relu6'"),
        ({"conv_envelope": "smooth"}, "unknown cutoff kind 'smooth'"),
        ({"cutoff_lower": 7.0}, "0 <= lower < upper"),
    ],
)
def test_bad_config_is_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        CGSchNet(small_config(**overrides))


def test_bead_type_outside_embedding_is_refused():
    types = tiny_system().bead_types.clone()
    types[0] = 25
    with pytest.raises(ValueError, match="outside the embedding of size 25"):
        Potential(types, small_schnet())
