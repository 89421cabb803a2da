"""CGEGNN: forces against finite differences, E(3) and permutation invariance, padding and
out-of-cutoff edges, the configuration, and the fused edge kernel against the reference."""

from __future__ import annotations

import pytest
import torch
from helpers import (
    assert_padding_and_far_edges_add_nothing,
    energy_and_forces,
    exact_graph,
    finite_difference_forces,
    interpreter_only,
    node_energies,
    perturbed_positions,
    random_rotation,
    relative_error,
    seeded,
)

from workbench.model.egnn import CGEGNN, EGNNConfig, fused_edge_problem
from workbench.model.options import KernelOptions
from workbench.neighbors import NeighborList

SMALL = {"hidden": 16, "edge_width": 16, "layers": 2, "num_rbf": 8, "cutoff": 6.0,
         "output_widths": [8]}


def small_egnn(seed: int = 0, **overrides) -> CGEGNN:
    """A small CGEGNN with a fixed seed (the global RNG left as it was)."""
    return seeded(lambda: CGEGNN(EGNNConfig(**{**SMALL, **overrides})), seed)


# -- forces ----------------------------------------------------------------------------
@pytest.mark.parametrize("overrides", [{}, {"basis": "exp-normal", "activation": "tanh"},
                                       {"basis_envelope": "identity"}])
def test_forces_match_central_finite_differences(overrides):
    model = small_egnn(**overrides).double()
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=1)
    _, forces = energy_and_forces(model, pos)
    assert float(forces.abs().max()) > 1e-3, "forces too small for a meaningful comparison"
    reference = finite_difference_forces(lambda p: node_energies(model, p).sum(-1), pos[0])
    assert relative_error(forces[0], reference) < 1e-6


def test_envelope_makes_the_energy_smooth_at_the_cutoff():
    """Two beads: E and dE/dd go to their far values as d reaches r_c (no jump)."""
    model = small_egnn(seed=3).double()
    types = torch.tensor([1, 2])
    cutoff = model.cutoff

    def pair(d):
        pos = torch.tensor([[0.0, 0.0, 0.0], [d, 0.0, 0.0]], dtype=torch.float64,
                           requires_grad=True)
        graph = NeighborList(2, cutoff, skin=1.0).update(pos[None].detach(), exact=False)
        e = model(pos, types, graph).sum()
        (grad,) = torch.autograd.grad(e, pos)
        return float(e.detach()), float(grad[1, 0])

    far_e, far_g = pair(cutoff + 0.5)
    assert far_g == 0.0
    near_e, near_g = pair(cutoff - 1e-5)
    assert abs(near_e - far_e) < 1e-9 and abs(near_g) < 1e-5
    _, mid_g = pair(0.8 * cutoff)
    assert abs(mid_g) > 1e-4, "the pair must interact inside the cutoff"


# -- invariance --------------------------------------------------------------------------
def test_energy_invariant_and_forces_equivariant_under_rigid_motions():
    model = small_egnn(seed=2).double()
    pos = perturbed_positions(replicas=3, sigma=0.3, seed=2)
    energy, forces = energy_and_forces(model, pos)
    moved = torch.stack([p @ random_rotation(seed=r).T + torch.tensor([3.0 * r, -1.0, 2.5])
                         for r, p in enumerate(pos)])
    reflected = pos * torch.tensor([-1.0, 1.0, 1.0])
    e_moved, f_moved = energy_and_forces(model, moved)
    torch.testing.assert_close(e_moved, energy, rtol=1e-12, atol=1e-10)
    for r in range(3):
        torch.testing.assert_close(f_moved[r], forces[r] @ random_rotation(seed=r).T,
                                   rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(energy_and_forces(model, reflected)[0], energy,
                               rtol=1e-12, atol=1e-10)
    assert float(forces.sum(1).abs().max()) < 1e-10  # no net force on a replica


def test_energies_follow_a_permutation_of_replicas():
    model = small_egnn(seed=4).double()
    pos = perturbed_positions(replicas=3, sigma=0.4, seed=3)
    with torch.no_grad():
        per_node = node_energies(model, pos)
    order = torch.tensor([2, 0, 1])
    with torch.no_grad():
        torch.testing.assert_close(node_energies(model, pos[order]), per_node[order],
                                   rtol=1e-12, atol=1e-12)
    assert float((per_node[0] - per_node[1]).abs().max()) > 1e-6, "replicas must differ"


# -- padding and out-of-cutoff edges -------------------------------------------------------
def test_padding_slots_and_edges_beyond_the_cutoff_contribute_nothing():
    model = small_egnn(seed=5).double()
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=4)
    assert_padding_and_far_edges_add_nothing(
        lambda p, graph=None: energy_and_forces(model, p, graph), pos, model.cutoff)


# -- configuration -----------------------------------------------------------------------
def test_config_round_trip_and_unknown_keys():
    config = EGNNConfig(**SMALL, basis="exp-normal")
    assert EGNNConfig.from_dict(config.to_dict()) == config
    model = CGEGNN(config)
    assert model.cutoff == 6.0 and model.config.embedding_size == 25
    with pytest.raises(ValueError, match="unknown EGNN config keys.*coordinate_update"):
        EGNNConfig.from_dict({**config.to_dict(), "coordinate_update": True})
    with pytest.raises(ValueError, match="activation"):
        CGEGNN(EGNNConfig(activation="relu6"))
    with pytest.raises(ValueError, match="basis"):
        CGEGNN(EGNNConfig(basis="bessel"))


# -- fused edge kernel -------------------------------------------------------------------
@interpreter_only
@pytest.mark.parametrize("graph_kind,saved", [("exact", "activations"), ("capacity", "none"),
                                              ("capacity", "activations")])
def test_fused_edge_kernel_matches_the_reference_path(graph_kind, saved):
    """``capacity``: padding slots and candidate edges beyond the cutoff; ``saved``: the
    edge kernel's backward (`CGEGNN.edge_saved`)."""
    model = small_egnn(seed=6, cutoff=5.0)
    model.edge_saved = saved
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=5, dtype=torch.float32)
    n = pos.shape[1]
    graph = {
        "exact": lambda: exact_graph(pos, model.cutoff),
        "capacity": lambda: NeighborList(n, model.cutoff, skin=1.5, capacity=2000,
                                         exact=False).update(pos),
    }[graph_kind]()
    if graph_kind == "capacity":
        assert not bool(graph.valid.all()), "needs padding slots"
    e_ref, f_ref = energy_and_forces(model, pos, graph)
    e, f = energy_and_forces(model, pos, graph, KernelOptions(fused_message_passing=True))
    assert relative_error(e, e_ref) < 1e-5
    assert relative_error(f, f_ref) < 1e-5


@interpreter_only
@pytest.mark.parametrize("precision,bound", [("fp16", 1e-3), ("bf16", 1e-2)])
def test_fused_16bit_force_error_is_bounded(precision, bound):
    """16-bit operands of the edge GEMMs against the float64 reference path (weights and
    activations rounded, the stored pre-activations too; measured 2.4e-4 for fp16, 4.7e-3
    for bf16 with one layer, 1.8e-4 and 2.4e-3 with the recomputing backward)."""
    model = small_egnn(seed=6, cutoff=5.0, layers=1)
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=5, dtype=torch.float32)
    graph = exact_graph(pos, model.cutoff)
    e64, f64 = energy_and_forces(model.double(), pos.double(), graph)
    options = KernelOptions(fused_message_passing=True, mlp_precision=precision)
    e, f = energy_and_forces(model.float(), pos, graph, options)
    assert relative_error(f.double(), f64) < bound
    assert relative_error(e.double(), e64) < bound


@interpreter_only
def test_fused_path_falls_back_or_ignores_what_it_lacks_with_a_warning():
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=6, dtype=torch.float32)
    odd = small_egnn(seed=7, cutoff=5.0, edge_width=24, layers=1)
    graph = exact_graph(pos, odd.cutoff)
    fused = KernelOptions(fused_message_passing=True)
    assert "edge width" in fused_edge_problem(odd, pos.device, fused)
    assert "float32" in fused_edge_problem(small_egnn().double(), pos.device, fused)
    e_ref, _ = energy_and_forces(odd, pos, graph)
    with pytest.warns(RuntimeWarning, match="edge width"):
        e_odd, _ = energy_and_forces(odd, pos, graph, fused)
    assert torch.equal(e_odd, e_ref)  # the reference path ran
    model = small_egnn(seed=7, cutoff=5.0, layers=1)
    e_ref, _ = energy_and_forces(model, pos, graph)
    with pytest.warns(RuntimeWarning, match="no fused kernels for .*fused_update"):
        e_all, _ = energy_and_forces(model, pos, graph, KernelOptions.all_on())
    assert relative_error(e_all, e_ref) < 1e-5
