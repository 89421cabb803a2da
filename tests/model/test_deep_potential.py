"""CGDeepPotential (workbench.model.deep_potential): the switching function, forces against
finite differences, E(3) invariance and permutation equivariance, padding and out-of-cutoff
edges, the descriptor against a dense evaluation, the configuration, the potential and its
files, and a short simulation."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers import (
    assert_padding_and_far_edges_add_nothing,
    assert_smooth_at_the_cutoff,
    exact_graph,
    finite_difference_forces,
    interpreter_only,
    perturbed_positions,
    random_rotation,
    relative_error,
    seeded,
    tiny_system,
)

from workbench.md import LangevinIntegrator, Simulation
from workbench.model import Potential, fused_schnet, load_potential, save_potential
from workbench.model.architectures import ARCHITECTURES, architecture_of, build_network
from workbench.model.deep_potential import (
    CGDeepPotential,
    DeepPotentialConfig,
    fused_descriptor_problem,
    smooth_switch,
    structure_sel,
)
from workbench.model.native_priors import demo_potential, native_priors
from workbench.model.options import KernelOptions
from workbench.neighbors import Graph, NeighborList

SMALL = {"cutoff": 6.0, "cutoff_smooth": 4.0, "embedding_widths": [4, 8, 16],
         "axis_neurons": 4, "fitting_widths": [16, 16], "num_neighbors": 8.0}


def small_dp(seed: int = 0, dtype=torch.float64, **overrides) -> CGDeepPotential:
    """A small CGDeepPotential with a fixed seed (the global RNG left as it was)."""
    config = DeepPotentialConfig(**{**SMALL, **overrides})
    return seeded(lambda: CGDeepPotential(config).to(dtype), seed)


def node_energies(model, pos, graph=None, options=None, types=None):
    """Per-node energies ``(R, n)`` of positions ``(R, n, 3)`` (exact graph unless given)."""
    replicas, n, _ = pos.shape
    types = tiny_system().bead_types.repeat(replicas) if types is None else types
    graph = exact_graph(pos, model.cutoff) if graph is None else graph
    return model(pos.reshape(-1, 3), types, graph, options).reshape(replicas, n)


def energy_and_forces(model, pos, graph=None, types=None):
    pos = pos.detach().clone().requires_grad_()
    energy = node_energies(model, pos, graph, types=types).sum(-1)
    (grad,) = torch.autograd.grad(energy.sum(), pos)
    return energy.detach(), -grad


# -- the switching function ------------------------------------------------------------------
def test_switch_is_smooth_at_both_ends_and_zero_beyond_the_cutoff():
    rs, rc = 4.0, 6.0
    r = torch.tensor([1.0, rs - 1e-7, rs, rs + 1e-7, 5.0, rc - 1e-7, rc, rc + 1e-7, 9.0],
                     dtype=torch.float64, requires_grad=True)
    sw = smooth_switch(r, rs, rc)
    (d1,) = torch.autograd.grad(sw.sum(), r, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), r)
    values, d1, d2 = sw.detach(), d1.detach(), d2.detach()
    assert torch.equal(values[[0, 2]], torch.ones(2, dtype=torch.float64))
    assert torch.equal(values[[6, 7, 8]], torch.zeros(3, dtype=torch.float64))
    assert abs(float(values[1] - values[3])) < 1e-12 and abs(float(values[5])) < 1e-12
    assert float(d1.abs()[[0, 1, 2, 3, 5, 6, 7, 8]].max()) < 1e-12  # s' = 0 at both ends
    assert float(d2.abs()[[1, 3, 5, 7]].max()) < 1e-5  # s'' continuous (zero) there too
    assert float(d1[4]) < -0.1  # it falls in between
    # s(r) = sw / r: 1/r below r_s, matching the central difference of the switch in between
    mid = torch.linspace(rs, rc, 41, dtype=torch.float64)[1:-1]
    h = 1e-6
    numeric = (smooth_switch(mid + h, rs, rc) - smooth_switch(mid - h, rs, rc)) / (2 * h)
    u = (mid - rs) / (rc - rs)
    torch.testing.assert_close(numeric, -30 * u**2 * (1 - u) ** 2 / (rc - rs),
                               rtol=1e-7, atol=1e-9)


def test_a_pair_enters_the_cutoff_smoothly():
    """Two beads: E and dE/dd go to their far values as d reaches r_c (no jump)."""
    assert_smooth_at_the_cutoff(small_dp(seed=3), gradient_tol=1e-6)


# -- forces ----------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides", [{}, {"type_one_side": True, "activation": "silu"},
                                       {"embedding_widths": [8, 8], "fitting_widths": []}])
def test_forces_match_central_finite_differences(overrides):
    model = small_dp(seed=1, **overrides)
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=1)
    _, forces = energy_and_forces(model, pos)
    assert float(forces.abs().max()) > 1e-3, "forces too small for a meaningful comparison"
    reference = finite_difference_forces(lambda p: node_energies(model, p).sum(-1), pos[0])
    assert relative_error(forces[0], reference) < 1e-6


# -- invariance and equivariance ---------------------------------------------------------------
def test_energy_invariant_and_forces_equivariant_under_rigid_motions():
    model = small_dp(seed=2)
    pos = perturbed_positions(replicas=3, sigma=0.3, seed=2)
    energy, forces = energy_and_forces(model, pos)
    moved = torch.stack([p @ random_rotation(seed=r).T + torch.tensor([3.0 * r, -1.0, 2.5])
                         for r, p in enumerate(pos)])
    e_moved, f_moved = energy_and_forces(model, moved)
    torch.testing.assert_close(e_moved, energy, rtol=1e-12, atol=1e-10)
    for r in range(3):
        torch.testing.assert_close(f_moved[r], forces[r] @ random_rotation(seed=r).T,
                                   rtol=1e-10, atol=1e-10)
    reflected = pos * torch.tensor([-1.0, 1.0, 1.0])
    torch.testing.assert_close(energy_and_forces(model, reflected)[0], energy,
                               rtol=1e-12, atol=1e-10)
    assert float(forces.sum(1).abs().max()) < 1e-10  # no net force on a replica


def test_energies_follow_a_permutation_of_beads():
    """Relabelling the beads (positions and types alike) permutes the atomic energies."""
    model = small_dp(seed=4)
    pos = perturbed_positions(replicas=2, sigma=0.4, seed=3)
    types = tiny_system().bead_types
    n = types.shape[0]
    with torch.no_grad():
        per_node = node_energies(model, pos)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        permuted = node_energies(model, pos[:, perm], types=types[perm].repeat(2))
    torch.testing.assert_close(permuted, per_node[:, perm], rtol=1e-12, atol=1e-12)
    order = torch.tensor([1, 0])
    with torch.no_grad():
        torch.testing.assert_close(node_energies(model, pos[order]), per_node[order],
                                   rtol=1e-12, atol=1e-12)
    assert float((per_node[0] - per_node[1]).abs().max()) > 1e-6, "replicas must differ"


def test_type_pairs_have_their_own_embedding_networks():
    """Swapping the types of two beads changes the energy (pair networks are distinct), and
    the one-side variant has one network per neighbour type."""
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=5)
    types = tiny_system().bead_types.clone()
    swapped = types.clone()
    swapped[[0, 1]] = types[[1, 0]]
    for one_side, nets in ((False, 25 * 25), (True, 25)):
        model = small_dp(seed=5, type_one_side=one_side)
        assert model.embedding_weights[0].shape[0] == nets
        with torch.no_grad():
            e = node_energies(model, pos, types=types).sum()
            e_swapped = node_energies(model, pos, types=swapped).sum()
        assert abs(float(e - e_swapped)) > 1e-6


# -- padding and out-of-cutoff edges --------------------------------------------------------------
def test_padding_slots_and_edges_beyond_the_cutoff_contribute_nothing():
    model = small_dp(seed=5)
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=4)
    assert_padding_and_far_edges_add_nothing(
        lambda p, graph=None: energy_and_forces(model, p, graph), pos, model.cutoff)


def test_descriptor_matches_a_dense_evaluation():
    """D_i from edge arrays equals (1/N_c²)(G^T R̃)(R̃^T G^<) over all pairs, written out."""
    model = small_dp(seed=6)
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=6)[0]
    types = tiny_system().bead_types
    config = model.config
    with torch.no_grad():
        d = model.descriptor(pos, types, exact_graph(pos[None], model.cutoff))
        n = pos.shape[0]
        dense = torch.zeros(n, config.embedding_widths[-1], config.axis_neurons,
                            dtype=torch.float64)
        for i in range(n):
            rows, gs = [], []
            for j in range(n):
                r_ij = pos[j] - pos[i]
                r = float(r_ij.norm())
                if j == i or r >= config.cutoff:
                    continue
                s = smooth_switch(torch.tensor(r, dtype=torch.float64), config.cutoff_smooth,
                                  config.cutoff) / r
                rows.append(torch.cat([s[None], s * r_ij / r]))
                net = int(types[i]) * config.embedding_size + int(types[j])
                gs.append(model.embedding(s[None], torch.tensor([net]))[0])
            env, g = torch.stack(rows), torch.stack(gs)
            a = g.T @ env / config.num_neighbors
            dense[i] = a @ a[: config.axis_neurons].T
    torch.testing.assert_close(d, dense.reshape(n, -1), rtol=1e-12, atol=1e-14)


# -- configuration -----------------------------------------------------------------------------
def test_config_round_trip_and_refusals():
    config = DeepPotentialConfig(**SMALL, type_one_side=True)
    assert DeepPotentialConfig.from_dict(config.to_dict()) == config
    model = CGDeepPotential(config)
    assert model.cutoff == 6.0 and model.config.embedding_size == 25
    default = DeepPotentialConfig()
    assert (default.cutoff, default.cutoff_smooth, default.activation) == (10.0, 8.0, "tanh")
    with pytest.raises(ValueError, match="unknown Deep Potential config keys.*'rcut'"):
        DeepPotentialConfig.from_dict({**config.to_dict(), "rcut": 6.0})
    with pytest.raises(ValueError, match="sel must give a count >= 0 for each of the 25"):
        DeepPotentialConfig(sel=[46])
    with pytest.raises(ValueError, match=r"num_neighbors must be the sum of sel \(25\)"):
        DeepPotentialConfig(sel=[1] * 25, num_neighbors=32.0)
    with pytest.raises(ValueError, match="activation"):
        DeepPotentialConfig(activation="relu6")
    with pytest.raises(ValueError, match="cutoff_smooth"):
        DeepPotentialConfig(cutoff=6.0, cutoff_smooth=6.0)
    with pytest.raises(ValueError, match="axis_neurons"):
        DeepPotentialConfig(embedding_widths=[4, 8], axis_neurons=9)


def test_kernel_options_fall_back_to_the_reference_path_with_a_warning(monkeypatch):
    monkeypatch.setattr(fused_schnet, "_WARNED", set(), raising=False)
    model = small_dp(seed=7)
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=7)
    with torch.no_grad():
        plain = node_energies(model, pos)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fused = node_energies(model, pos, options=KernelOptions(fused_update=True))
    torch.testing.assert_close(fused, plain, rtol=0, atol=0)
    assert any("CGDeepPotential has no fused kernels for fused_update"
               in str(w.message) for w in caught)


@interpreter_only
def test_fused_descriptor_matches_the_tables_path_and_reads_them(monkeypatch):
    """The kernel's descriptor (`kernels.dp_descriptor`) against the PyTorch tables path, on
    a fixed-capacity graph with padding slots."""
    monkeypatch.setattr(fused_schnet, "_WARNED", set(), raising=False)
    model = small_dp(seed=10, dtype=torch.float32, embedding_widths=[8, 16])
    pos = perturbed_positions(replicas=1, sigma=0.1, seed=10).float()
    graph, needed = NeighborList(pos.shape[1], model.cutoff).static_graph(pos, 1200)
    assert int(needed) < 1200  # every edge has a slot, some slots are padding
    types = tiny_system().bead_types

    def energy_and_grad(options):
        p = pos.reshape(-1, 3).clone().requires_grad_()
        energy = model(p, types, graph, options)
        return energy.detach(), torch.autograd.grad(energy.sum(), p)[0]

    fused = KernelOptions(fused_message_passing=True, tabulated_filter=True)
    for got, want in zip(energy_and_grad(fused), energy_and_grad(KernelOptions(
            tabulated_filter=True)), strict=True):
        assert relative_error(got, want) < 1e-5
    for got, want in zip(energy_and_grad(KernelOptions(fused_message_passing=True)),
                         energy_and_grad(fused), strict=True):
        assert torch.equal(got, want)  # the kernel reads the tables, asked for or not
    narrow = small_dp(seed=10, dtype=torch.float32)  # M1 = 16 of [4, 8, 16]: fine
    assert fused_descriptor_problem(narrow, pos.device, fused) is None
    odd = small_dp(seed=10, dtype=torch.float32, embedding_widths=[8, 24])
    assert "power-of-two last embedding width" in fused_descriptor_problem(odd, pos.device,
                                                                          fused)


@pytest.mark.parametrize("lists", [False, True], ids=["plain", "sel"])
def test_the_captured_paths_read_nothing_on_the_host(lists):
    """Under ``cuda_graph`` (exact networks or tables) the forward and backward passes run
    on fake tensors, which refuse any data-dependent host read; energies and forces equal
    those of the eager grouping's. With ``sel``, statistics and timesteps, the empty slots
    are grouped in the same way."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    deepmd = {"sel": [2] * 4 + [0] * 21, "embedding_resnet_dt": True} if lists else {}
    model = small_dp(seed=9, dtype=torch.float32, **deepmd)
    if lists:
        with torch.no_grad():
            model.env_mean[:, 0] = 0.05
            model.env_std.mul_(0.5)
    pos = perturbed_positions(replicas=2, sigma=0.1, seed=9).float()
    graph, needed = NeighborList(pos.shape[1], model.cutoff).static_graph(pos, 1200)
    assert int(needed) < 1200  # every edge has a slot, some slots are padding
    types = tiny_system().bead_types.repeat(2)

    def energy_and_grad(options):
        p = pos.reshape(-1, 3).clone().requires_grad_()
        energy = model(p, types, graph, options).sum()
        return energy, torch.autograd.grad(energy, p)[0]

    for tables in (False, True):
        captured = KernelOptions(cuda_graph=True, tabulated_filter=tables)
        eager = KernelOptions(tabulated_filter=tables)
        for got, want in zip(energy_and_grad(captured), energy_and_grad(eager), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        with FakeTensorMode(allow_non_fake_inputs=True):
            energy_and_grad(captured)
    with pytest.raises(Exception, match="local_scalar_dense"), \
            FakeTensorMode(allow_non_fake_inputs=True):
        energy_and_grad(KernelOptions())  # the eager grouping reads a count


@pytest.mark.parametrize("tables", [False, True], ids=["exact", "tables"])
@pytest.mark.parametrize("precision,bound", [("fp16", 1e-3), ("bf16", 1e-2)])
def test_16bit_networks_error_against_float64_is_bounded(precision, bound, tables):
    """16-bit operands of the fitting (and exact embedding) networks' products, FP32
    accumulation and FP32 energies and forces, against the float64 reference (measured
    4e-4 for fp16, 4e-3 for bf16, forces relative RMS)."""
    pos = perturbed_positions(replicas=1, sigma=0.15, seed=6)
    e64, f64 = energy_and_forces(small_dp(seed=6), pos)
    model = small_dp(seed=6, dtype=torch.float32)
    options = KernelOptions(mlp_precision=precision, tabulated_filter=tables)
    p = pos.float().requires_grad_()
    energy = node_energies(model, p, options=options).sum(-1)
    (grad,) = torch.autograd.grad(energy.sum(), p)
    assert energy.dtype == grad.dtype == torch.float32
    assert 1e-5 < relative_error(-grad.double(), f64) < bound  # 16-bit did run
    assert relative_error(energy.detach().double(), e64) < bound


def test_an_empty_graph_leaves_the_energy_bias_alone():
    model = small_dp(seed=8)
    with torch.no_grad():
        model.energy_bias.copy_(torch.arange(25, dtype=torch.float64))
    types = torch.tensor([3, 5])
    pos = torch.zeros(2, 3, dtype=torch.float64)
    empty = Graph(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 2)
    with torch.no_grad():
        e = model(pos, types, empty)
        alone = model.fitting(pos.new_zeros(2, 16 * 4), types)
    torch.testing.assert_close(e, alone, rtol=0, atol=0)
    assert torch.isfinite(e).all()


# -- the potential, its files and the registry ---------------------------------------------------
def dp_potential(seed: int = 11) -> Potential:
    sys = tiny_system()
    return Potential(sys.bead_types, small_dp(seed, dtype=torch.float32), native_priors(sys))


def test_registry_and_potential():
    assert "dp" in ARCHITECTURES and ARCHITECTURES["dp"].fused == (
        "fused_message_passing", "tabulated_filter", "cuda_graph")
    assert architecture_of(small_dp()) == "dp"
    built = build_network("dp", DeepPotentialConfig(**SMALL).to_dict())
    assert isinstance(built, CGDeepPotential) and built.config == DeepPotentialConfig(**SMALL)
    potential = dp_potential()
    assert potential.architecture == "dp" and potential.network is potential.dp
    assert all(k.startswith(("bead_types", "dp.", "priors.")) for k in potential.state_dict())


def test_saved_potential_loads_identically(tmp_path):
    potential = dp_potential()
    pos = tiny_system().native_positions[None].repeat(2, 1, 1)
    graph = exact_graph(pos, potential.cutoff)
    loaded = load_potential(save_potential(potential, tmp_path / "dp.pt"))
    assert loaded.architecture == "dp" and loaded.dp.config == potential.dp.config
    before = potential.energy_and_forces(pos, graph)
    torch.testing.assert_close(loaded.energy_and_forces(pos, graph), before, rtol=0, atol=0)


def test_potential_simulates():
    sim = Simulation(tiny_system(), dp_potential(), LangevinIntegrator(0.002, 1.0, 300.0),
                     replicas=2, seed=1)
    sim.step(3)
    assert torch.isfinite(sim.positions).all() and not sim.frozen.any()


def test_the_network_term_scales_linearly():
    """`scale_terms` multiplies the fitting networks' last weights and the energy bias: the
    network's energy is multiplied, nothing else changes."""
    from workbench.training.energy_scales import scalable_terms, scale_terms

    potential = dp_potential()
    with torch.no_grad():
        potential.dp.energy_bias.normal_()
    pos = tiny_system().native_positions[None].repeat(2, 1, 1)
    graph = exact_graph(pos, potential.cutoff)
    assert scalable_terms(potential)[0] == "dp"
    before = potential.energy_terms(pos, graph)
    after = scale_terms(potential, {"dp": 2.5}).energy_terms(pos, graph)
    torch.testing.assert_close(after["dp"], 2.5 * before["dp"])
    for name in potential.priors:
        torch.testing.assert_close(after[name], before[name])


# -- deepmd-kit's neighbour slots of a structure, and the demo model -----------------------------
def test_structure_sel_holds_each_types_most_neighbours_with_headroom():
    sys = tiny_system()
    pos, types = sys.native_positions, sys.bead_types
    within = (torch.cdist(pos.double(), pos.double()) < 6.0).fill_diagonal_(False)
    most = torch.stack([(within & (types == t)[None]).sum(1).max() for t in range(25)])
    assert structure_sel(pos, types, 6.0, 25, headroom=1.0) == [
        max(int(n), int(t in types.tolist())) for t, n in enumerate(most)]
    sel = structure_sel(pos, types, 6.0, 25)  # x 1.5, rounded up
    assert sel == [-(-3 * n // 2) if n else int(t in types.tolist())
                   for t, n in enumerate(most.tolist())]
    assert all(sel[t] >= 1 for t in types.tolist()) and sel[0] == 0  # no type 0 in CLN025
    with pytest.raises(ValueError, match="headroom must be at least 1"):
        structure_sel(pos, types, 6.0, 25, headroom=0.5)


def test_the_demo_network_has_slots_that_change_nothing_on_the_engines_paths():
    sys = tiny_system()
    network = demo_potential(sys, architecture="dp").network.double()
    config = network.config
    assert config.sel == structure_sel(sys.native_positions, sys.bead_types, config.cutoff,
                                       config.embedding_size)
    assert config.num_neighbors == sum(config.sel)
    plain = CGDeepPotential(DeepPotentialConfig(**{**config.to_dict(), "sel": None})).double()
    _, unexpected = plain.load_state_dict(network.state_dict(), strict=False)
    assert sorted(unexpected) == ["env_mean", "env_std"]  # the identity statistics
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=3)
    e_plain, f_plain = energy_and_forces(plain, pos)
    e_sel, f_sel = energy_and_forces(network, pos)
    torch.testing.assert_close(e_sel, e_plain, rtol=1e-13, atol=0)
    torch.testing.assert_close(f_sel, f_plain, rtol=1e-12, atol=1e-13)
    tables = KernelOptions(tabulated_filter=True)
    graph = exact_graph(pos, network.cutoff)
    torch.testing.assert_close(node_energies(network, pos, graph, tables),
                               node_energies(plain, pos, graph, tables), rtol=1e-12,
                               atol=1e-13)


def test_empty_slots_are_skipped_where_they_add_nothing(monkeypatch):
    """Identity statistics (or any with a zero mean) make every empty slot a zero row: the
    paths skip their work and give what counting them gives; a mean set later counts."""
    sys = tiny_system()
    network = demo_potential(sys, architecture="dp").network.double()
    assert not network.empty_slots_add()
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=4)
    graph = exact_graph(pos, network.cutoff)
    tables = KernelOptions(tabulated_filter=True)
    with torch.no_grad():
        network.env_std.uniform_(0.5, 1.5)  # σ still normalises
    skipped = [node_energies(network, pos, graph, options) for options in (None, tables)]
    monkeypatch.setattr(type(network), "empty_slots_add", lambda self: True)
    counted = [node_energies(network, pos, graph, options) for options in (None, tables)]
    monkeypatch.undo()
    for a, b in zip(skipped, counted, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)
    with torch.no_grad():
        network.env_mean[:, 0] = 0.05  # the cached answer follows the buffer
    assert network.empty_slots_add()
    shifted = node_energies(network, pos, graph)
    assert not torch.allclose(shifted, skipped[0])
