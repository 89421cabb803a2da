"""CGPaiNN (workbench.model.painn) and the architecture plumbing that lets a Potential
hold it.

Energies and forces are checked against :func:`dense_reference`, a from-first-principles
evaluation of PaiNN written here over dense all-pairs arrays (no graph, no scatter), from
the tensors of the state dict by their mlcg names.
"""

from __future__ import annotations

import copy
import json
import math
import warnings
from dataclasses import asdict, dataclass

import pytest
import torch
from helpers import (
    autograd_forces,
    exact_graph,
    finite_difference_forces,
    interpreter_only,
    perturbed_positions,
    random_cloud,
    random_rotation,
    relative_error,
    seeded,
    tiny_system,
)
from mlcg_standins import builders, install_standins

from workbench.md import LangevinIntegrator, Simulation
from workbench.model import Potential, fused_schnet, load_potential, save_potential
from workbench.model.architectures import (
    ARCHITECTURES,
    Architecture,
    architecture_of,
    build_network,
    config_from_dict,
)
from workbench.model.io import ModelFormatError
from workbench.model.native_priors import demo_potential, native_priors
from workbench.model.options import KernelOptions
from workbench.model.painn import CGPaiNN, PaiNNConfig, fused_message_problem
from workbench.model.schnet import CGSchNet, SchNetConfig
from workbench.neighbors import Graph, NeighborList

SMALL = {"embedding_size": 6, "hidden": 8, "blocks": 2, "num_rbf": 7, "cutoff": 5.0,
         "output_widths": [6, 4]}
N_BEADS = 9
TYPES = torch.tensor([1, 2, 3, 4, 5, 1, 2, 3, 0])


def small_painn(seed: int = 0, dtype=torch.float64, **overrides) -> CGPaiNN:
    """A small CGPaiNN whose weights are large enough for the vector features to matter."""
    def build():
        model = CGPaiNN(PaiNNConfig(**{**SMALL, **overrides}))
        with torch.no_grad():
            for name, tensor in model.named_parameters():
                tensor.copy_(torch.randn_like(tensor) / math.sqrt(max(tensor.shape[-1], 1)))
                if name.endswith("bias"):
                    tensor.mul_(0.3)
        return model.to(dtype)

    return seeded(build, seed)


def positions(replicas: int = 2, dtype=torch.float64, seed: int = 3) -> torch.Tensor:
    """Random clouds of N_BEADS beads in a 8 Å box: pairs on both sides of the 5 Å cutoff."""
    return random_cloud(replicas, N_BEADS, box=8.0, seed=seed, dtype=dtype)


def node_energies(model, pos: torch.Tensor, graph: Graph | None = None) -> torch.Tensor:
    """CGPaiNN per-bead energies (R, n) over the exact graph (or ``graph``)."""
    graph = graph if graph is not None else exact_graph(pos, model.cutoff)
    types = TYPES.repeat(pos.shape[0])
    return model(pos.reshape(-1, 3), types, graph).reshape(pos.shape[:2])


# -- the independent reference ------------------------------------------------------------


def _envelope(kind: str, d: torch.Tensor, lower: float, upper: float) -> torch.Tensor:
    if kind == "identity":
        return torch.ones_like(d)
    if lower > 0:
        value = 0.5 * (torch.cos(math.pi * (2 * (d - lower) / (upper - lower) + 1)) + 1)
        return value * (d > lower) * (d < upper)
    return 0.5 * (torch.cos(math.pi * d / upper) + 1) * (d < upper)


def _mlp3(state: dict, prefix: str, x: torch.Tensor) -> torch.Tensor:
    """``W2 tanh(W0 x + b0) + b2`` of a Sequential(Linear, Tanh, Linear)."""
    hidden = torch.tanh(x @ state[f"{prefix}.0.weight"].T + state[f"{prefix}.0.bias"])
    return hidden @ state[f"{prefix}.2.weight"].T + state[f"{prefix}.2.bias"]


def dense_reference(model: CGPaiNN, pos: torch.Tensor) -> torch.Tensor:
    """Per-bead PaiNN energies (R, n) from dense pair arrays, float64, tanh only.

    For bead i receiving from bead j: r_ij = x_i − x_j, ρ = sqrt(|r|² + 1e-16) − 1e-8,
    n_ij = r_ij / ρ; pairs with |r| < r_c and i ≠ j take part.
    """
    config = model.config
    assert config.activation == "tanh"
    state = {k: v.double() for k, v in model.state_dict().items()}
    h, rc, rl = config.hidden, config.cutoff, config.cutoff_lower
    out = []
    for x in pos.double():
        n = x.shape[0]
        r = x[:, None, :] - x[None, :, :]  # (n, n, 3): r[i, j] = x_i − x_j
        exact = torch.sqrt((r * r).sum(-1) + (torch.eye(n, dtype=x.dtype)))
        pair = (exact < rc) & ~torch.eye(n, dtype=torch.bool)
        rho = torch.sqrt((r * r).sum(-1) + 1e-16) - 1e-8
        unit = r / torch.where(rho > 0, rho, 1.0)[..., None]
        if config.basis == "exp-normal":
            alpha = 5.0 / (rc - rl)
            z = torch.exp(alpha * (rl - rho))[..., None] - state["rbf_layer.means"]
            rbf = torch.exp(-state["rbf_layer.betas"] * z * z)
        else:
            z = rho[..., None] - state["rbf_layer.offset"]
            rbf = torch.exp(state["rbf_layer.coeff"] * z * z)
        rbf = rbf * _envelope(config.basis_envelope, rho, rl, rc)[..., None]
        conv = _envelope(config.conv_envelope, rho, rl, rc) * pair
        q = state["embedding_layer.weight"][TYPES]
        mu = torch.zeros(n, 3, h, dtype=x.dtype)
        for b in range(config.blocks):
            p = f"interaction_blocks.{b}"
            phi = (rbf @ state[f"{p}.filter_network.weight"].T
                   + state[f"{p}.filter_network.bias"]) * conv[..., None]  # (n, n, 3H)
            ctx = _mlp3(state, f"{p}.interatomic_context_net", q)  # (n, 3H)
            m = phi * ctx[None, :, :]
            q = q + m[..., :h].sum(1)
            mu = (mu + torch.einsum("ijh,ijc->ich", m[..., h : 2 * h], unit)
                  + torch.einsum("ijh,jch->ich", m[..., 2 * h :], mu))
            p = f"mixing_blocks.{b}"
            mix = torch.einsum("ich,gh->icg", mu, state[f"{p}.mu_channel_mix.weight"])
            v, u = mix[..., :h], mix[..., h:]
            norm = torch.sqrt((v * v).sum(1) + config.epsilon)
            a = _mlp3(state, f"{p}.intraatomic_context_net", torch.cat([q, norm], -1))
            q = q + a[:, :h] + a[:, 2 * h :] * (v * u).sum(1)
            mu = mu + a[:, None, h : 2 * h] * u
        layers = sorted({int(k.split(".")[2]) for k in state if k.startswith("output_network")})
        for i in layers:
            q = q @ state[f"output_network.layers.{i}.weight"].T
            if f"output_network.layers.{i}.bias" in state:
                q = q + state[f"output_network.layers.{i}.bias"]
            if i != layers[-1]:
                q = torch.tanh(q)
        out.append(q.squeeze(-1))
    return torch.stack(out)


VARIANTS = {
    "exp-normal": {},
    "gaussian-identity": {"basis": "gaussian", "basis_envelope": "identity"},
    "lower-cutoff": {"cutoff_lower": 1.0},
}


# -- layout ---------------------------------------------------------------------------------


def test_state_dict_maps_one_to_one_onto_mlcg_standard_painn():
    ours = CGPaiNN(PaiNNConfig(embedding_size=42, hidden=16, num_rbf=10, blocks=2,
                               cutoff=7.0, output_widths=[12, 8]))
    with install_standins() as ns:
        theirs = builders.painn(ns.mlcg, torch.Generator().manual_seed(0))
        their_shapes = {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == their_shapes
    assert "mixing_blocks.1.mu_channel_mix.weight" in their_shapes
    assert "mixing_blocks.1.mu_channel_mix.bias" not in their_shapes
    assert "output_network.layers.4.bias" not in their_shapes
    assert ours.cutoff == 7.0 and ours.config.embedding_size == 42


# -- energies and forces ------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_float64_energies_and_forces_equal_the_reference(variant):
    model = small_painn(seed=1, **VARIANTS[variant])
    pos = positions()
    graph = exact_graph(pos, model.cutoff)
    assert graph.src.numel() < pos.shape[0] * N_BEADS * (N_BEADS - 1), "some pairs are cut"

    def ours(p):
        return node_energies(model, p).sum(-1)

    def reference(p):
        return dense_reference(model, p).sum(-1)

    torch.testing.assert_close(node_energies(model, pos), dense_reference(model, pos),
                               rtol=1e-12, atol=1e-12)
    forces = autograd_forces(ours, pos)
    torch.testing.assert_close(forces, autograd_forces(reference, pos), rtol=1e-11, atol=1e-11)
    assert forces.abs().max() > 1e-3


def test_vector_features_enter_the_energy():
    model = small_painn(seed=1)
    pos = positions()
    before = node_energies(model, pos)
    with torch.no_grad():
        for block in model.mixing_blocks:
            block.mu_channel_mix.weight.zero_()
    after = node_energies(model, pos)
    assert (before - after).abs().max() > 1e-3
    torch.testing.assert_close(after, dense_reference(model, pos), rtol=1e-12, atol=1e-12)


def test_float32_matches_the_float64_reference():
    model = small_painn(seed=2)
    pos = positions()
    single = small_painn(seed=2, dtype=torch.float32)
    energy = node_energies(single, pos.float()).sum(-1)
    assert energy.dtype == torch.float32
    expected = dense_reference(model, pos).sum(-1)
    scale = float(expected.abs().max())
    torch.testing.assert_close(energy.double(), expected, rtol=1e-5, atol=1e-5 * scale)
    forces = autograd_forces(lambda p: node_energies(single, p).sum(-1), pos.float())
    ref_forces = autograd_forces(lambda p: dense_reference(model, p).sum(-1), pos)
    assert relative_error(forces.double(), ref_forces) < 1e-5


def test_forces_are_minus_the_energy_gradient():
    model = small_painn(seed=4)
    pos = positions(replicas=1, seed=5)

    def energy(p):
        return node_energies(model, p).sum(-1)

    forces = autograd_forces(energy, pos)[0]
    assert relative_error(forces, finite_difference_forces(energy, pos[0])) < 1e-7


def test_energy_is_invariant_and_forces_equivariant():
    model = small_painn(seed=6)
    pos = positions(replicas=1, seed=7)
    rotation = random_rotation(seed=8)
    moved = pos @ rotation.T + torch.tensor([3.0, -7.5, 12.25], dtype=torch.float64)

    def energy(p):
        return node_energies(model, p).sum(-1)

    torch.testing.assert_close(energy(moved), energy(pos), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(autograd_forces(energy, moved),
                               autograd_forces(energy, pos) @ rotation.T, rtol=1e-10, atol=1e-10)


def test_padding_slots_and_edges_beyond_the_cutoff_contribute_nothing():
    model = small_painn(seed=9, basis="gaussian", basis_envelope="identity")
    pos = positions()
    replicas = pos.shape[0]
    nodes = replicas * N_BEADS
    pairs = [(r * N_BEADS + i, r * N_BEADS + j) for r in range(replicas)
             for i in range(N_BEADS) for j in range(N_BEADS) if i != j]
    src, dst = torch.tensor(pairs).T
    pad = torch.full((5,), nodes)
    graph = Graph(torch.cat([src, pad]), torch.cat([dst, pad]), nodes,
                  valid=torch.cat([torch.ones(len(pairs), dtype=torch.bool),
                                   torch.zeros(5, dtype=torch.bool)]))
    exact = exact_graph(pos, model.cutoff)
    assert exact.src.numel() < len(pairs)

    def energy(p, g):
        return node_energies(model, p, g).sum(-1)

    torch.testing.assert_close(energy(pos, graph), energy(pos, exact), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(autograd_forces(lambda p: energy(p, graph), pos),
                               autograd_forces(lambda p: energy(p, exact), pos),
                               rtol=1e-12, atol=1e-12)


def test_options_without_painn_kernels_warn_and_run_the_reference_path(monkeypatch):
    monkeypatch.setattr(fused_schnet, "_WARNED", set())  # the notices are once per process
    model = small_painn(seed=10)
    pos = positions()
    graph = exact_graph(pos, model.cutoff)
    types = TYPES.repeat(pos.shape[0])
    baseline = model(pos.reshape(-1, 3), types, graph, KernelOptions())
    with pytest.warns(RuntimeWarning, match="CGPaiNN has no fused kernels for fused_update"):
        fused = model(pos.reshape(-1, 3), types, graph, KernelOptions(fused_update=True))
    with warnings.catch_warnings():  # the MD step's own techniques concern no network
        warnings.simplefilter("error")
        model(pos.reshape(-1, 3), types, graph, KernelOptions(fused_integrator=True))
    torch.testing.assert_close(fused, baseline, rtol=0, atol=0)


# -- the fused message kernel ---------------------------------------------------------------

#: Power-of-two hidden width for the kernel; weights scaled as `small_painn` does.
FUSED = {"hidden": 16}


def options_energies_and_forces(model, pos, graph=None, options=None):
    """Per-replica energies (R,) and forces (R, n, 3) with ``options``."""
    pos = pos.detach().clone().requires_grad_()
    graph = graph if graph is not None else exact_graph(pos.detach(), model.cutoff)
    types = TYPES.repeat(pos.shape[0])
    energy = model(pos.reshape(-1, 3), types, graph, options).reshape(pos.shape[:2]).sum(-1)
    (grad,) = torch.autograd.grad(energy.sum(), pos)
    return energy.detach(), -grad


def all_pairs_graph(replicas: int) -> Graph:
    """Every ordered pair of each replica (many beyond the cutoff) and 5 padding slots."""
    nodes = replicas * N_BEADS
    pairs = [(r * N_BEADS + i, r * N_BEADS + j) for r in range(replicas)
             for i in range(N_BEADS) for j in range(N_BEADS) if i != j]
    src, dst = torch.tensor(pairs).T
    pad = torch.full((5,), nodes)
    return Graph(torch.cat([src, pad]), torch.cat([dst, pad]), nodes,
                 valid=torch.cat([torch.ones(len(pairs), dtype=torch.bool),
                                  torch.zeros(5, dtype=torch.bool)]))


#: The message kernel computing each block's filter, or reading it from its table (alone:
#: ``tabulated_filter`` brings the kernel), the attribute its packing is cached in, and the
#: bound of its relative force error against the reference path: the tables hold the
#: filter on a 0.01 Å grid, and SchNet's tabulated forces are held to 1e-4
#: (tests/model/test_fused_schnet.py; measured here up to 1.9e-6, computed 9.4e-7).
KERNEL_PATHS = {"computed": (KernelOptions(fused_message_passing=True), "_packed_filters", 1e-5),
                "tabulated": (KernelOptions(tabulated_filter=True), "_filter_tables", 1e-4)}


@interpreter_only
@pytest.mark.parametrize("path", sorted(KERNEL_PATHS))
@pytest.mark.parametrize("variant,graph_kind", [
    ("exp-normal", "exact"), ("exp-normal", "all-pairs"), ("gaussian-identity", "exact"),
    ("lower-cutoff", "all-pairs"), ("identity-filter", "all-pairs")])
def test_fused_message_kernel_matches_the_reference_path(variant, graph_kind, path):
    """``all-pairs``: padding slots and edges beyond the cutoff; ``identity-filter``: the
    filter's envelope is 1 up to the cutoff (mlcg's identity cutoff; the table holds the
    filter's left limit there and the kernel's cutoff test the jump)."""
    options, cached, bound = KERNEL_PATHS[path]
    overrides = VARIANTS.get(variant, {"conv_envelope": "identity"})
    model = small_painn(seed=12, dtype=torch.float32, **FUSED, **overrides)
    pos = positions(dtype=torch.float32, seed=13)
    graph = exact_graph(pos, model.cutoff) if graph_kind == "exact" else all_pairs_graph(2)
    e_ref, f_ref = options_energies_and_forces(model, pos, graph)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the kernel ran: no fallback
        e, f = options_energies_and_forces(model, pos, graph, options)
    assert getattr(model, cached, None) is not None, "the kernel must have run"
    assert relative_error(e, e_ref) < bound
    assert relative_error(f, f_ref) < bound
    assert float(f.abs().max()) > 1e-2, "forces too small for a meaningful comparison"


@interpreter_only
@pytest.mark.parametrize("path", sorted(KERNEL_PATHS))
def test_fused_forces_are_minus_the_energy_gradient(path):
    """Fused forces against central differences of the fused energy (float32: h = 0.01 Å,
    rounding and truncation 4e-4 measured, from the tables 5.9e-4) and of the float64
    reference path (9.6e-7; from the tables 4.5e-6). The kernel's own gradient against
    the float64 reference of the same table is tests/kernels/test_kernels_painn.py's
    finite-difference test."""
    model = small_painn(seed=14, dtype=torch.float32, **FUSED)
    pos = positions(replicas=1, seed=15)
    fused = KERNEL_PATHS[path][0]

    def energy(p, options=None, net=model):
        p = p.to(net.embedding_layer.weight.dtype)
        graph = exact_graph(p, net.cutoff)
        types = TYPES.repeat(p.shape[0])
        return net(p.reshape(-1, 3), types, graph, options).reshape(p.shape[:2]).sum(-1)

    forces = options_energies_and_forces(model, pos.float(), options=fused)[1][0].double()
    fd_fused = finite_difference_forces(lambda p: energy(p, fused).double(), pos[0], h=1e-2)
    assert relative_error(forces, fd_fused) < 2e-3
    exact = small_painn(seed=14, dtype=torch.float64, **FUSED)
    fd_exact = finite_difference_forces(lambda p: energy(p, net=exact), pos[0])
    assert relative_error(forces, fd_exact) < 1e-5


@interpreter_only
def test_tabulated_force_error_on_cln025_is_bounded():
    """The demo PaiNN (H = 128, K = 64 exp-normal functions, three blocks, 10 Å) from its
    tables, in float32, against the model in float64 on CLN025 replicas (native plus 0.4 Å
    of noise): at most SchNet's table bound, 1e-4 of the forces (measured 3.8e-5; the
    computed kernel 1.4e-6). Interpolation dominates it, not the float16 rounding: 2.0e-4 /
    3.8e-5 / 4.3e-6 at h = 0.02 / 0.01 / 0.005 Å, the cubic's slope error (h^3) on the
    exp-normal functions, which narrow at short lengths (0.06 Å wide at 0, 0.4 Å at the
    3.8 Å bonds)."""
    system = tiny_system()
    potential = demo_potential(system, architecture="painn")
    potential.priors.clear()
    pos = perturbed_positions(system, replicas=2, sigma=0.4, dtype=torch.float32)
    nl = NeighborList(system.n_beads, potential.cutoff, skin=1.5)
    _, f64 = copy.deepcopy(potential).double().energy_and_forces(
        pos.double(), nl.update(pos.double(), exact=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a fallback would test nothing
        e, f = potential.energy_and_forces(pos, nl.update(pos, exact=False),
                                           KernelOptions(tabulated_filter=True))
    assert e.dtype == f.dtype == torch.float32
    assert 1e-7 < relative_error(f.double(), f64) < 1e-4


@interpreter_only
def test_filter_tables_are_cached_until_the_weights_change():
    from workbench.model.painn import filter_tables

    model = small_painn(seed=20, dtype=torch.float32, **FUSED)
    cpu = torch.device("cpu")
    tables = filter_tables(model, cpu)
    assert len(tables.layers) == model.config.blocks
    assert all(t.num_features == 3 * FUSED["hidden"] and t.cutoff == model.cutoff
               for t in tables.layers)
    assert filter_tables(model, cpu) is tables
    with torch.no_grad():
        model.interaction_blocks[0].filter_network.bias.add_(0.1)
    assert filter_tables(model, cpu) is not tables


@interpreter_only
@pytest.mark.parametrize("precision,bound", [("fp16", 1e-3), ("bf16", 1e-2)])
def test_fused_16bit_force_error_is_bounded(precision, bound):
    """16-bit operands of the filter GEMMs against the float64 reference path (weights and
    basis rounded; measured with one block 1.7e-4 for fp16, 2.6e-3 for bf16; with two,
    whose mixing amplifies them, 8.9e-4 and 4.9e-3)."""
    model = small_painn(seed=16, dtype=torch.float64, blocks=1, **FUSED)
    pos = positions(replicas=1, seed=17)
    e64, f64 = options_energies_and_forces(model, pos)
    options = KernelOptions(fused_message_passing=True, mlp_precision=precision)
    e, f = options_energies_and_forces(model.float(), pos.float(), options=options)
    assert relative_error(f.double(), f64) < bound
    assert relative_error(e.double(), e64) < bound


@interpreter_only
def test_fused_path_falls_back_with_the_reason(monkeypatch):
    monkeypatch.setattr(fused_schnet, "_WARNED", set())  # the notices are once per process
    pos = positions(replicas=1, seed=18, dtype=torch.float32)
    fused = KernelOptions(fused_message_passing=True)
    narrow = small_painn(seed=19, dtype=torch.float32)  # hidden 8
    assert "hidden width" in fused_message_problem(narrow, pos.device, fused)
    assert "float32" in fused_message_problem(small_painn(**FUSED), pos.device, fused)
    assert fused_message_problem(small_painn(dtype=torch.float32, **FUSED), pos.device,
                                 fused) is None
    e_ref, _ = options_energies_and_forces(narrow, pos)
    with pytest.warns(RuntimeWarning, match="power-of-two hidden width"):
        e, _ = options_energies_and_forces(narrow, pos, options=fused)
    assert torch.equal(e, e_ref)  # the reference path ran
    model = small_painn(seed=19, dtype=torch.float32, **FUSED)
    e_ref, _ = options_energies_and_forces(model, pos)
    with pytest.warns(RuntimeWarning, match="no fused kernels for .*fused_update"):
        e_all, _ = options_energies_and_forces(model, pos, options=KernelOptions.all_on())
    assert relative_error(e_all, e_ref) < 1e-5


# -- the potential, saving and the registry -------------------------------------------------


def painn_potential(seed: int = 11) -> Potential:
    sys = tiny_system()
    model = small_painn(seed, dtype=torch.float32, embedding_size=25, cutoff=6.0)
    return Potential(sys.bead_types, model, native_priors(sys))


def test_potential_holds_painn_under_its_architecture_name():
    potential = painn_potential()
    assert potential.architecture == "painn" and potential.schnet is None
    assert potential.network is potential.painn and potential.cutoff == 6.0
    assert all(k.startswith(("bead_types", "painn.", "priors.")) for k in potential.state_dict())
    pos = tiny_system().native_positions[None].repeat(2, 1, 1)
    terms = potential.energy_terms(pos, exact_graph(pos, potential.cutoff))
    assert list(terms) == ["painn", *potential.priors]
    with pytest.raises(ValueError, match="needs a neighbour graph"):
        potential.energy(pos, None)


def test_saved_painn_potential_loads_identically(tmp_path):
    potential = painn_potential()
    pos = tiny_system().native_positions[None].repeat(2, 1, 1)
    graph = exact_graph(pos, potential.cutoff)
    loaded = load_potential(save_potential(potential, tmp_path / "painn.pt"))
    assert loaded.architecture == "painn" and loaded.painn.config == potential.painn.config
    before = potential.energy_and_forces(pos, graph)
    torch.testing.assert_close(loaded.energy_and_forces(pos, graph), before, rtol=0, atol=0)
    config = json.loads(torch.load(tmp_path / "painn.pt", weights_only=True)["config"])
    assert config["architecture"] == "painn" and "schnet" not in config


def test_files_without_an_architecture_load_as_schnet(tmp_path):
    schnet = CGSchNet(SchNetConfig(embedding_size=25, hidden=8, filters=8, num_rbf=4, blocks=1))
    path = save_potential(Potential(tiny_system().bead_types, schnet), tmp_path / "s.pt")
    payload = torch.load(path, weights_only=True)
    config = json.loads(payload["config"])
    assert config["architecture"] == "schnet"
    del config["architecture"]
    payload["config"] = json.dumps(config)
    torch.save(payload, path)
    loaded = load_potential(path)
    assert loaded.architecture == "schnet" and loaded.schnet.config == schnet.config


def test_unknown_architecture_in_a_file_is_a_format_error(tmp_path):
    path = save_potential(painn_potential(), tmp_path / "p.pt")
    payload = torch.load(path, weights_only=True)
    config = json.loads(payload["config"])
    config["architecture"] = "transformer"
    payload["config"] = json.dumps(config)
    torch.save(payload, path)
    with pytest.raises(ModelFormatError, match="architecture 'transformer'"):
        load_potential(path)


def test_painn_potential_simulates():
    potential = painn_potential()
    sim = Simulation(tiny_system(), potential, LangevinIntegrator(0.002, 1.0, 300.0),
                     replicas=2, seed=1)
    sim.step(5)
    assert torch.isfinite(sim.positions).all() and not sim.frozen.any()


def test_registry():
    assert set(ARCHITECTURES) >= {"schnet", "painn"}
    assert architecture_of(small_painn()) == "painn"
    assert architecture_of(CGSchNet(SchNetConfig(hidden=4, filters=4, num_rbf=2))) == "schnet"
    built = build_network("painn", PaiNNConfig(**SMALL).to_dict())
    assert isinstance(built, CGPaiNN) and built.config == PaiNNConfig(**SMALL)
    with pytest.raises(TypeError, match="not a registered network architecture"):
        architecture_of(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="not a registered network architecture"):
        Potential(TYPES, torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="unknown network architecture"):
        config_from_dict("egg", {})
    schnet = CGSchNet(SchNetConfig(hidden=4, filters=4, num_rbf=2))
    assert Potential(TYPES, schnet=schnet).schnet is schnet  # the former keyword
    with pytest.raises(TypeError, match="not both"):
        Potential(TYPES, schnet, schnet=schnet)


@dataclass
class ToyConfig:
    """Config of :class:`ToyNet`, a stand-in for another architecture (EGNN, ...)."""

    embedding_size: int = 25
    cutoff: float = 4.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ToyConfig:
        return cls(**data)


class ToyNet(torch.nn.Module):
    """Per-bead energy ``w · x`` (ignores the graph)."""

    def __init__(self, config: ToyConfig):
        super().__init__()
        self.config = config
        self.weight = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))

    @property
    def cutoff(self) -> float:
        return self.config.cutoff

    def forward(self, pos, types, graph, options=None):
        return pos @ self.weight.to(pos.dtype)


def test_a_new_architecture_is_one_registry_line(monkeypatch, tmp_path):
    monkeypatch.setitem(ARCHITECTURES, "toy", Architecture(__name__, "ToyConfig", "ToyNet"))
    sys = tiny_system()
    potential = Potential(sys.bead_types, ToyNet(ToyConfig()), native_priors(sys))
    assert potential.architecture == "toy" and potential.toy is potential.network
    loaded = load_potential(save_potential(potential, tmp_path / "toy.pt"))
    assert loaded.architecture == "toy" and loaded.schnet is None
    pos = sys.native_positions[None]
    graph = exact_graph(pos, potential.cutoff)
    torch.testing.assert_close(loaded.energy(pos, graph), potential.energy(pos, graph))
    monkeypatch.setitem(ARCHITECTURES, "energy", Architecture(__name__, "ToyConfig", "ToyNet"))
    monkeypatch.delitem(ARCHITECTURES, "toy")
    with pytest.raises(ValueError, match="would shadow an attribute of Potential"):
        Potential(sys.bead_types, ToyNet(ToyConfig()))


# -- bad input ------------------------------------------------------------------------------


def test_config_round_trip_and_unknown_keys():
    config = PaiNNConfig(**SMALL)
    assert PaiNNConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match=r"unknown PaiNN config keys: \['filters'\]"):
        PaiNNConfig.from_dict({**config.to_dict(), "filters": 8})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"activation": "relu"}, "unknown activation"), ({"basis": "bessel"}, "unknown basis"),
     ({"conv_envelope": "hann"}, "unknown cutoff kind"), ({"hidden": 0}, "hidden must be")],
)
def test_bad_config_is_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        CGPaiNN(PaiNNConfig(**{**SMALL, **overrides}))


def test_wrong_shapes_are_refused():
    model = small_painn()
    pos = positions()
    graph = exact_graph(pos, model.cutoff)
    flat, types = pos.reshape(-1, 3), TYPES.repeat(pos.shape[0])
    with pytest.raises(ValueError, match=r"positions must have shape \(N, 3\)"):
        model(flat[:, :2], types, graph)
    with pytest.raises(ValueError, match="bead types must have shape"):
        model(flat, types[:-1], graph)
    with pytest.raises(ValueError, match="src and dst"):
        model(flat, types, Graph(graph.src, graph.dst[:-1], graph.num_nodes))
    with pytest.raises(ValueError, match="outside the embedding of size 6"):
        Potential(torch.tensor([0, 6]), model)
