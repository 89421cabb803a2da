"""Compressed embedding networks of CGDeepPotential (workbench.model.dp_tables): the tables'
error against the exact networks (values and slopes, the grid refined where the networks
need it), forces against the exact network and against finite differences of the tabulated
model, clamping beyond the table, and rebuilding when the weights change."""

from __future__ import annotations

import torch
from helpers import (
    exact_graph,
    finite_difference_forces,
    perturbed_positions,
    relative_error,
    seeded,
)
from helpers import tiny_system as tiny

from workbench.model.deep_potential import CGDeepPotential, DeepPotentialConfig
from workbench.model.dp_tables import (
    FIRST_INTERVALS,
    TABLE_MIN_DISTANCE,
    TABLE_TOLERANCE,
    embedding_table,
    tabulated_embedding,
)
from workbench.model.options import KernelOptions

SMALL = {"embedding_size": 6, "cutoff": 6.0, "cutoff_smooth": 4.0,
         "embedding_widths": [4, 8, 16], "axis_neurons": 4, "fitting_widths": [16, 16],
         "num_neighbors": 8.0}
TABLES = KernelOptions(tabulated_filter=True)
CPU = torch.device("cpu")


def small_dp(seed: int = 0, dtype=torch.float64, **overrides) -> CGDeepPotential:
    config = DeepPotentialConfig(**{**SMALL, **overrides})
    return seeded(lambda: CGDeepPotential(config).to(dtype), seed)


def types_of(replicas: int) -> torch.Tensor:
    return tiny().bead_types.repeat(replicas) % SMALL["embedding_size"]


def energy(model, pos, options=None):
    """Total energy per replica of positions ``(R, n, 3)`` on the exact graph."""
    replicas, n, _ = pos.shape
    graph = exact_graph(pos, model.cutoff)
    return model(pos.reshape(-1, 3), types_of(replicas), graph, options).reshape(
        replicas, n).sum(-1)


def forces(model, pos, options=None):
    pos = pos.detach().clone().requires_grad_()
    (grad,) = torch.autograd.grad(energy(model, pos, options).sum(), pos)
    return -grad


def exact_and_tabulated(model, x, net):
    """``g`` of the exact networks and of the tables at inputs ``x``, with their slopes."""
    x = x.clone().requires_grad_()
    table = embedding_table(model, x.dtype, x.device)
    values = []
    for g in (model.embedding(x, net), tabulated_embedding(table, x, net)):
        (slope,) = torch.autograd.grad(g.sum(), x)  # the sum over features of g'
        values.append((g.detach(), slope))
    return values, table


def test_tables_meet_their_error_bound_inside_the_range():
    model = small_dp(seed=1)
    lower, upper = model.embedding_input_range()
    assert lower == 0.0 and abs(upper - 1.0 / TABLE_MIN_DISTANCE) < 1e-12  # s(r_c), s(r_min)
    generator = torch.Generator().manual_seed(0)
    x = lower + (upper - lower) * torch.rand(4000, generator=generator, dtype=torch.float64)
    net = torch.randint(0, model.pair_nets, (4000,), generator=generator)
    ((g, slope), (g_tab, slope_tab)), table = exact_and_tabulated(model, x, net)
    assert table.error <= TABLE_TOLERANCE and table.networks == model.pair_nets
    scale = float(g.abs().max())
    assert float((g_tab - g).abs().max()) <= 2 * TABLE_TOLERANCE * scale
    assert relative_error(slope_tab, slope) < 1e-4  # C1 Hermite: slope error ~ h³ g''''


def test_the_grid_is_refined_for_steep_networks():
    model = small_dp(seed=2)
    smooth = embedding_table(model, torch.float64, CPU).intervals
    with torch.no_grad():
        model.embedding_weights[0].mul_(8.0)  # tanh(8 x ...): steeper in x
    table = embedding_table(model, torch.float64, CPU)
    assert table.intervals > max(smooth, FIRST_INTERVALS) and table.error <= TABLE_TOLERANCE
    x = torch.linspace(0.0, 1.0 / TABLE_MIN_DISTANCE, 3001, dtype=torch.float64)
    net = torch.full_like(x, 7, dtype=torch.long)
    ((g, _), (g_tab, _)), _ = exact_and_tabulated(model, x, net)
    assert float((g_tab - g).abs().max()) <= 2 * TABLE_TOLERANCE * float(g.abs().max())


def test_inputs_beyond_the_table_are_held_at_its_ends():
    model = small_dp(seed=3)
    table = embedding_table(model, torch.float64, CPU)
    x = torch.tensor([-0.5, 0.0, 1.0 / TABLE_MIN_DISTANCE, 3.0 / TABLE_MIN_DISTANCE],
                     dtype=torch.float64,
                     requires_grad=True)
    g = tabulated_embedding(table, x, torch.zeros(4, dtype=torch.long))
    torch.testing.assert_close(g[0], g[1], rtol=0, atol=0)
    torch.testing.assert_close(g[3], g[2], rtol=0, atol=0)
    (slope,) = torch.autograd.grad(g.sum(), x)
    assert slope[0] == 0 and slope[3] == 0


def test_tabulated_forces_match_the_exact_network_and_finite_differences():
    model = small_dp(seed=4)
    pos = perturbed_positions(replicas=1, sigma=0.15, seed=4)
    gaps = torch.cdist(pos[0], pos[0]) + 9.0 * torch.eye(pos.shape[1])
    assert float(gaps.min()) > TABLE_MIN_DISTANCE  # inside the table
    exact = forces(model, pos)
    tabulated = forces(model, pos, TABLES)
    error = relative_error(tabulated, exact)
    assert 0 < error < 1e-5, error  # bound stated in docs/deep-potential.md
    reference = finite_difference_forces(lambda p: energy(model, p, TABLES), pos[0])
    assert relative_error(tabulated[0], reference) < 1e-7  # −∂E/∂r of the tabulated model
    # float32, as MD runs it: float32 rows and positions
    model32 = small_dp(seed=4, dtype=torch.float32)
    assert relative_error(forces(model32, pos.float(), TABLES).double(), exact) < 1e-5


def test_tables_are_rebuilt_when_the_weights_change():
    model = small_dp(seed=5)
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=5)
    with torch.no_grad():
        first = embedding_table(model, torch.float64, CPU)
        assert embedding_table(model, torch.float64, CPU) is first  # kept while unchanged
        model.embedding_biases[-1].add_(0.25)  # in place
        second = embedding_table(model, torch.float64, CPU)
        assert second is not first
        torch.testing.assert_close(energy(model, pos, TABLES), energy(model, pos),
                                   rtol=1e-6, atol=0)
