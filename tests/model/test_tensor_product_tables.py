"""Tabulated radial weights of CGTensorProduct (workbench.model.tensor_product_tables): the
tables' error against the exact networks block by block, padding and the cutoff, forces
against the exact network and against finite differences of the tabulated model, the
table read kernel through the whole model, the exact edges it is given, rebuilding when the
weights change, and the switch's notices (the tables through the accelerated backends'
wiring and on captured paths: test_tensor_product.py)."""

from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("e3nn")

from helpers import (  # noqa: E402
    assert_padding_and_far_edges_add_nothing,
    energy_and_forces,
    finite_difference_forces,
    interpreter_only,
    node_energies,
    perturbed_positions,
    relative_error,
)
from test_tensor_product import small_nequip  # noqa: E402

from workbench.model import tensor_product as tp  # noqa: E402
from workbench.model.options import KernelOptions  # noqa: E402
from workbench.model.tensor_product_tables import (  # noqa: E402
    TABLE_TOLERANCE,
    radial_tables,
    table_reads,
    tabulated_weights,
)
from workbench.neighbors import NeighborList  # noqa: E402

TABLES = KernelOptions(tabulated_filter=True)
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def fresh_notices(monkeypatch):
    monkeypatch.setattr(tp, "_WARNED", set())


def exact_and_tabulated(model, d):
    """Every block's weights ``[E, P_b]`` at lengths ``d``, exact and tabulated, with the
    sums of their slopes over the columns."""
    results = []
    tables = radial_tables(model, d.dtype, d.device)
    for tabulated in (False, True):
        x = d.clone().requires_grad_()
        if tabulated:
            reads = table_reads(tables, x, kernel=False)
            weights = [tabulated_weights(tables, b, reads) for b in range(len(model.blocks))]
        else:
            rbf, envelope = model.rbf_layer(x), model.envelope(x)
            weights = [block.edge_weights(rbf, envelope) for block in model.blocks]
        slopes = [torch.autograd.grad(w.sum(), x, retain_graph=True)[0] for w in weights]
        results.append(([w.detach() for w in weights], slopes))
    return results, tables


def test_every_block_meets_the_error_bound_relative_to_its_own_weights():
    """One block's weights made 1,000 times smaller still meet the bound relative to their
    own size (the grid is refined for them, not judged against the larger block)."""
    model = small_nequip(seed=1)
    with torch.no_grad():
        model.blocks[1].radial[-1].weight.mul_(1e-3)
        model.blocks[1].radial[-1].bias.mul_(1e-3)
    d = torch.rand(5000, generator=torch.Generator().manual_seed(0),
                   dtype=torch.float64) * model.cutoff
    ((exact, slopes), (tabulated, tab_slopes)), tables = exact_and_tabulated(model, d)
    assert tables.error <= TABLE_TOLERANCE
    assert [c.shape[2] for c in tables.coefficients] == [b.tp.weight_numel
                                                         for b in model.blocks]
    for w, w_tab, s, s_tab in zip(exact, tabulated, slopes, tab_slopes, strict=True):
        assert float((w_tab - w).abs().max()) <= 2 * TABLE_TOLERANCE * float(w.abs().max())
        assert relative_error(s_tab, s) < 1e-4  # C1 Hermite: slope error ~ h³ w''''


def test_padding_and_lengths_at_or_beyond_the_cutoff_read_exact_zeros():
    model = small_nequip(seed=2)
    d = torch.tensor([model.cutoff, model.cutoff + 0.5, 1e3], dtype=torch.float64,
                     requires_grad=True)
    tables = radial_tables(model, d.dtype, CPU)
    weights = tabulated_weights(tables, 0, table_reads(tables, d, kernel=False))
    assert bool((weights == 0).all())
    (slope,) = torch.autograd.grad(weights.sum(), d)
    assert bool((slope == 0).all())
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=4)
    assert_padding_and_far_edges_add_nothing(
        lambda p, graph=None: energy_and_forces(model, p, graph, TABLES), pos, model.cutoff)


def test_tabulated_forces_match_the_network_and_finite_differences():
    """Float64: forces within 1e-5 of the network's (docs/tensor-product.md) and the exact
    gradient of the tabulated energy; float32 as MD runs it: within 1e-5 of float64."""
    model = small_nequip(seed=3)
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=3)
    e_net, f_net = energy_and_forces(model, pos)
    e, f = energy_and_forces(model, pos, options=TABLES)
    assert relative_error(e, e_net) < 1e-7
    assert 0 < relative_error(f, f_net) < 1e-5  # the tables did run
    reference = finite_difference_forces(
        lambda p: node_energies(model, p, options=TABLES).sum(-1), pos[0])
    assert relative_error(f[0], reference) < 1e-7
    e32, f32 = energy_and_forces(model.float(), pos.float(), options=TABLES)
    assert relative_error(f32.double(), f) < 1e-5 and relative_error(e32.double(), e) < 1e-6


@interpreter_only
def test_the_table_read_kernel_gives_the_pytorch_reads_through_the_whole_model(monkeypatch):
    """Float32 under the interpreter: `kernels.table_read` reads the tables (a padded
    graph); the PyTorch reads give the same energies and forces."""
    model = small_nequip(seed=7, dtype=torch.float32, cutoff=4.0)
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=7, dtype=torch.float32)
    graph = NeighborList(pos.shape[1], model.cutoff, skin=1.0, capacity=1000,
                         exact=False).update(pos)
    assert not bool(graph.valid.all()), "needs padding slots"
    reads = []
    monkeypatch.setattr(tp, "table_reads", lambda *args: reads.append(args[2])
                        or table_reads(*args))
    e, f = energy_and_forces(model, pos, graph, TABLES)
    monkeypatch.setattr(tp, "fused_radial_problem", lambda *args: "the PyTorch reads")
    e_ref, f_ref = energy_and_forces(model, pos, graph, TABLES)
    assert reads == [True, False]
    assert relative_error(e, e_ref) < 1e-6 and relative_error(f, f_ref) < 1e-5


def test_tables_are_kept_until_a_weight_changes():
    model = small_nequip(seed=4)
    tables = radial_tables(model, torch.float64, CPU)
    assert radial_tables(model, torch.float64, CPU) is tables
    assert radial_tables(model, torch.float32, CPU) is not tables
    tables = radial_tables(model, torch.float64, CPU)
    with torch.no_grad():
        model.blocks[0].radial[0].weight.mul_(1.5)
    rebuilt = radial_tables(model, torch.float64, CPU)
    assert rebuilt is not tables
    assert not torch.equal(rebuilt.coefficients[0], tables.coefficients[0])


def test_fused_update_beside_the_tables_says_it_has_nothing_to_run():
    model = small_nequip(seed=6, dtype=torch.float32)
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=6, dtype=torch.float32)
    e_tab, _ = energy_and_forces(model, pos, options=TABLES)
    with pytest.warns(RuntimeWarning, match="fused_update does nothing beside "
                                            "tabulated_filter"):
        e, _ = energy_and_forces(model, pos, options=KernelOptions(tabulated_filter=True,
                                                                   fused_update=True))
    assert torch.equal(e, e_tab)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        energy_and_forces(model, pos, options=TABLES)  # the tables alone: no notice


@interpreter_only
def test_the_tables_get_the_exact_edges_as_the_reference_path(monkeypatch):
    """The table read kernel reads the edge arrays only: an eager step's neighbour list
    gives the exact edges, and a potential gives the network a graph without its empty
    slots (the convolution then does the work of the edges only), as on the reference
    path; the layout and candidate techniques of other networks would not."""
    from test_tensor_product import nequip_potential

    from workbench.model.force_paths import force_path, reads_candidates, walks_layouts

    potential = nequip_potential()
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=8, dtype=torch.float32)
    graph = NeighborList(pos.shape[1], potential.network.cutoff, skin=1.0, capacity=4000,
                         exact=False).update(pos)
    assert not bool(graph.valid.all()), "needs padding slots"
    seen = []
    forward = type(potential.network).forward
    monkeypatch.setattr(type(potential.network), "forward",
                        lambda self, p, t, g, o=None: seen.append(g) or forward(self, p, t, g, o))
    assert force_path(potential.network, pos.device, TABLES) == "triton"
    assert not walks_layouts(potential.network, TABLES)
    assert walks_layouts(potential.network, KernelOptions(fused_message_passing=True))
    # an eager step's neighbour list: the exact edges, not the candidates within the skin
    assert not reads_candidates(potential.network, TABLES)
    assert reads_candidates(None, TABLES)  # (CGSchNet's tables drop them on the device)
    potential.energy(pos, graph, TABLES)
    assert seen[-1].valid is None and seen[-1].src.shape[0] == int(graph.valid.sum())
