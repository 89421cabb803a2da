"""Tabulated filters in PyTorch (the CPU path of ``tabulated_filter``): against the exact
network, against the Triton kernel's reference, by finite differences, and in MD."""

import pytest
import torch
from helpers import (
    exact_graph,
    finite_difference_forces,
    interpreter_only,
    perturbed_positions,
    schnet_potential,
    tiny_system,
)

from kernels import build_csr_reference
from kernels.tabulated import tabulated_cfconv_reference
from workbench.md import LangevinIntegrator, Simulation
from workbench.model import pytorch_tables, schnet
from workbench.model.fused_schnet import build_filter_tables
from workbench.model.native_priors import demo_potential
from workbench.model.options import KernelOptions
from workbench.model.pytorch_tables import pair_cfconv, table_pairs, table_rows
from workbench.neighbors import NeighborList

TABLES = KernelOptions(tabulated_filter=True)


@pytest.fixture
def no_triton(monkeypatch):
    """A CPU without the Triton interpreter: where the PyTorch tables run."""
    import kernels._triton

    monkeypatch.setattr(kernels._triton, "INTERPRET", False)


def _rel(a, b):
    return float((a - b).norm() / b.norm())


def _schnet_only(potential):
    potential.priors.clear()
    return potential


# Tables on a 0.01 Å grid: measured 3.4e-7 (small network below) and 3.5e-6 (the demo
# model's 128 x 128 filters on 10 Å) relative force error; asserted at the Triton path's
# bound for tabulated forces (tests/model/test_fused_schnet.py).
TABLE_BOUND = 1e-4


@pytest.mark.parametrize("model", ["small", "demo"])
def test_tables_match_the_network_within_the_table_bound(no_triton, model):
    system = tiny_system()
    if model == "small":
        potential = schnet_potential(system, priors=False)
        with torch.no_grad():  # a SchNet energy large enough to compare
            potential.schnet.output_network.layers[-1].weight.mul_(30.0)
    else:
        potential = _schnet_only(demo_potential(system))
    pos = perturbed_positions(system, replicas=3, sigma=0.4, dtype=torch.float32)
    nl = NeighborList(system.n_beads, potential.cutoff, skin=1.5)
    e_ref, f_ref = potential.energy_and_forces(pos, nl.update(pos, exact=True))
    e, f = potential.energy_and_forces(pos, nl.update(pos, exact=False), TABLES)
    assert e.dtype == f.dtype == torch.float32
    assert 0 < _rel(f, f_ref) < TABLE_BOUND
    assert _rel(e, e_ref) < TABLE_BOUND


def test_forces_are_minus_the_gradient_of_the_tabulated_energy(no_triton):
    potential = schnet_potential(priors=False).double()
    pos = perturbed_positions(replicas=1, sigma=0.3)[0]

    def energy(x):
        return potential.energy(x, exact_graph(x, potential.cutoff), TABLES)

    forces = potential.energy_and_forces(pos[None], exact_graph(pos[None], potential.cutoff),
                                         TABLES)[1][0]
    fd = finite_difference_forces(energy, pos, h=1e-5)
    assert _rel(forces, fd) < 1e-7


def test_pair_convolution_is_the_kernel_reference_on_the_same_table():
    """`pair_cfconv` against `tabulated_cfconv_reference` (which the Triton kernel is tested
    against), float64, on both directions of every edge."""
    net = schnet_potential(priors=False).schnet.double()
    pos = perturbed_positions(replicas=2, sigma=0.3).reshape(-1, 3).requires_grad_(True)
    graph = exact_graph(pos.detach().reshape(2, -1, 3), net.cutoff)
    table = build_filter_tables(net, pos.device)[0]
    rows = table_rows(net, torch.float64, pos.device)[0]
    gen = torch.Generator().manual_seed(1)
    xs = torch.randn(pos.shape[0], table.num_features, dtype=torch.float64, generator=gen)
    grad_u = torch.randn(xs.shape, dtype=torch.float64, generator=gen)

    def grads(u):
        return torch.autograd.grad((u * grad_u).sum(), (pos, xs))

    xs.requires_grad_(True)
    u = pair_cfconv(xs, table_pairs(pos, graph, rows, chunk=64), rows)
    dist = torch.linalg.vector_norm(pos[graph.dst] - pos[graph.src], dim=-1)
    csr = build_csr_reference(graph.src, graph.dst, graph.num_nodes)
    u_ref = tabulated_cfconv_reference(dist, xs, graph.src, graph.dst, csr, table)
    assert torch.allclose(u, u_ref, rtol=1e-12, atol=1e-14)
    for g, g_ref in zip(grads(u), grads(u_ref), strict=True):
        assert torch.allclose(g, g_ref, rtol=1e-10, atol=1e-13)


def test_the_switch_chooses_the_path(no_triton, monkeypatch):
    calls = []
    monkeypatch.setattr(schnet, "table_node_energies",
                        lambda *a: calls.append(1) or pytorch_tables.table_node_energies(*a))
    potential = schnet_potential(priors=False)
    pos = perturbed_positions(replicas=1, dtype=torch.float32)
    graph = exact_graph(pos, potential.cutoff)
    f_exact = potential.energy_and_forces(pos, graph, KernelOptions())[1]
    assert not calls
    f_tables = potential.energy_and_forces(pos, graph, TABLES)[1]
    assert calls and not torch.equal(f_tables, f_exact)  # the table's own (tiny) error
    with pytest.warns(RuntimeWarning, match="tabulated filters run in PyTorch"):
        potential.energy(pos, graph, KernelOptions.all_on(tabulated_filter=True))
    assert len(calls) == 2


@interpreter_only
def test_interpreter_keeps_the_triton_tables(monkeypatch):
    """With TRITON_INTERPRET=1 (how the Triton path is tested on CPUs) the kernels run."""
    monkeypatch.setattr(schnet, "table_node_energies", None)  # would fail if called
    potential = schnet_potential(priors=False)
    pos = perturbed_positions(replicas=1, dtype=torch.float32)
    potential.energy(pos, exact_graph(pos, potential.cutoff), TABLES)


def test_short_md_with_tables_is_stable_and_follows_the_reference(no_triton):
    system = tiny_system()
    potential = schnet_potential(system)  # with the native priors
    runs = {}
    for name, options in (("exact", KernelOptions()), ("tables", TABLES)):
        sim = Simulation(system, potential, LangevinIntegrator(0.004, 1.0, 300.0),
                         replicas=4, seed=3, options=options)
        sim.step(50)
        runs[name] = sim
    exact, tables = runs["exact"], runs["tables"]
    assert not tables.frozen.any() and torch.isfinite(tables.positions).all()
    assert (tables.positions - exact.positions).abs().max() < 1e-3  # Å, after 50 steps
    assert _rel(tables.forces, exact.forces) < TABLE_BOUND * 10


def test_every_graph_of_the_neighbour_list_gives_the_same_forces(no_triton):
    """Exact, skin candidates and fixed capacity with padding slots: the same pairs."""
    potential = schnet_potential(priors=False)
    pos = perturbed_positions(replicas=2, sigma=0.3, dtype=torch.float32)
    n = pos.shape[1]
    graphs = [NeighborList(n, potential.cutoff, skin=1.0).update(pos, exact=exact)
              for exact in (True, False)]
    graphs.append(NeighborList(n, potential.cutoff, skin=1.0, capacity=2 * n * n).update(pos))
    assert graphs[2].valid is not None and not graphs[2].valid.all()
    results = [potential.energy_and_forces(pos, g, TABLES) for g in graphs]
    for e, f in results[1:]:
        assert torch.equal(e, results[0][0]) and torch.equal(f, results[0][1])


@interpreter_only
def test_pytorch_and_triton_tables_compute_the_same_potential(monkeypatch):
    import kernels._triton

    potential = schnet_potential(priors=False)
    pos = perturbed_positions(replicas=2, sigma=0.3, dtype=torch.float32)
    graph = NeighborList(pos.shape[1], potential.cutoff, skin=1.0).update(pos, exact=False)
    e_triton, f_triton = potential.energy_and_forces(pos, graph, TABLES)
    monkeypatch.setattr(kernels._triton, "INTERPRET", False)
    e, f = potential.energy_and_forces(pos, graph, TABLES)
    assert _rel(f, f_triton) < 1e-5 and _rel(e, e_triton) < 1e-6  # FP32 rounding apart
