"""Verlet neighbour list against brute force: edge sets, ordering, exclusions, skin
rebuild logic, fixed-capacity mode, overflow and checkpoint state."""

from __future__ import annotations

import io

import pytest
import torch
from helpers import brute_force_edges, edge_set, perturbed_positions, random_cloud, tiny_system
from torch.overrides import TorchFunctionMode

from workbench.neighbors import CELL_MARGIN, Graph, NeighborList, NeighborListOverflow
from workbench.system.topology import bonded_exclusions

CUTOFF = 5.0


def check_layout(graph: Graph, n: int) -> None:
    """Sorted by (dst, src), same replica, no self edges, symmetric (valid slots): what
    ``graph.sorted_pairs`` promises."""
    src, dst = graph.src, graph.dst
    if graph.valid is not None:
        src, dst = src[graph.valid], dst[graph.valid]
    assert src.dtype == torch.long and dst.dtype == torch.long and graph.sorted_pairs
    key = dst * (graph.num_nodes + 1) + src
    assert bool((key[1:] > key[:-1]).all()), "edges not sorted by (destination, source)"
    assert bool((src // n == dst // n).all()), "edge across replicas"
    assert bool((src != dst).all()), "self edge"
    pairs = set(zip(src.tolist(), dst.tolist(), strict=True))
    assert len(pairs) == len(src), "duplicate edge"
    assert pairs == {(d, s) for s, d in pairs}, "graph not symmetric"


@pytest.mark.parametrize("max_block", [1 << 23, 30 * 30])  # one chunk; one replica per chunk
def test_edges_equal_brute_force(max_block):
    pos = random_cloud(replicas=4, n=30, box=12.0, seed=1)
    graph = NeighborList(30, CUTOFF, skin=1.0, max_block=max_block).update(pos)
    assert graph.num_nodes == 4 * 30 and graph.valid is None
    check_layout(graph, 30)
    expected = brute_force_edges(pos, CUTOFF)
    assert 100 < len(expected) < 4 * 30 * 29, "cloud density makes the test meaningful"
    assert edge_set(graph) == expected


def test_chunked_build_is_identical():
    pos = random_cloud(replicas=5, n=20, seed=2)
    whole = NeighborList(20, CUTOFF, skin=0.5).update(pos)
    chunked = NeighborList(20, CUTOFF, skin=0.5, max_block=2 * 20 * 20).update(pos)
    assert torch.equal(whole.src, chunked.src) and torch.equal(whole.dst, chunked.dst)


def test_exclusions_are_honoured():
    sys = tiny_system()
    exclusions = bonded_exclusions(sys)
    pos = perturbed_positions(sys, replicas=3, sigma=0.3, seed=3)
    graph = NeighborList(sys.n_beads, 6.0, exclusions=exclusions).update(pos)
    check_layout(graph, sys.n_beads)
    assert edge_set(graph) == brute_force_edges(pos, 6.0, exclusions)
    local = {(s % sys.n_beads, d % sys.n_beads) for s, d in edge_set(graph)}
    for i, j in exclusions.tolist():
        assert (i, j) not in local and (j, i) not in local
    # without exclusions those pairs (bonded, all close) are there
    full = edge_set(NeighborList(sys.n_beads, 6.0).update(pos))
    assert len(full) - len(edge_set(graph)) == 2 * 3 * len(exclusions)


def test_strict_cutoff():
    pos = torch.tensor([[[0.0, 0.0, 0.0], [CUTOFF, 0.0, 0.0], [0.0, CUTOFF - 1e-3, 0.0]]],
                       dtype=torch.float64)
    graph = NeighborList(3, CUTOFF, skin=0.0).update(pos)
    assert edge_set(graph) == {(0, 2), (2, 0)}


def test_candidate_list_without_exact_filtering():
    pos = random_cloud(replicas=3, n=25, seed=4)
    skin = 1.5
    graph = NeighborList(25, CUTOFF, skin=skin, exact=False).update(pos)
    check_layout(graph, 25)
    assert edge_set(graph) == brute_force_edges(pos, CUTOFF + skin)
    assert len(edge_set(graph)) > len(brute_force_edges(pos, CUTOFF))


def test_per_call_exact_override():
    pos = random_cloud(replicas=2, n=25, seed=11)
    nl = NeighborList(25, CUTOFF, skin=1.5)
    assert edge_set(nl.update(pos, exact=False)) == brute_force_edges(pos, CUTOFF + 1.5)
    assert edge_set(nl.update(pos)) == brute_force_edges(pos, CUTOFF)
    assert nl.builds == 1
    loose = NeighborList(25, CUTOFF, skin=1.5, exact=False)
    assert edge_set(loose.update(pos, exact=True)) == brute_force_edges(pos, CUTOFF)


# -- skin and rebuilds ----------------------------------------------------------------
@pytest.mark.parametrize("capacity", [None, 4000])
def test_rebuilds_only_when_a_bead_moves_half_the_skin(capacity):
    skin = 1.0
    gen = torch.Generator().manual_seed(5)
    pos = random_cloud(replicas=3, n=25, seed=5)
    nl = NeighborList(25, CUTOFF, skin=skin, capacity=capacity)
    reference = None
    expected_builds = 0
    rebuilt_steps = []
    for step in range(60):
        if step:
            # mostly small moves, occasionally one bead jumps
            pos = pos + 0.04 * torch.randn(pos.shape, generator=gen, dtype=torch.float64)
            if step % 17 == 0:
                pos[1, 7] += 0.6
        moved = None if reference is None else (pos - reference).norm(dim=-1).max()
        if moved is None or moved > skin / 2:
            expected_builds += 1
            reference = pos.clone()
            rebuilt_steps.append(step)
        graph = nl.update(pos)
        assert nl.builds == expected_builds, f"step {step}"
        if capacity is None:
            assert edge_set(graph) == brute_force_edges(pos, CUTOFF), f"step {step}"
        else:
            # candidates: a superset of the exact edges, within cutoff + skin of the build
            exact = brute_force_edges(pos, CUTOFF)
            assert exact <= edge_set(graph), f"step {step}"
            assert edge_set(graph) == brute_force_edges(reference, CUTOFF + skin)
    assert 3 <= len(rebuilt_steps) <= 30, rebuilt_steps  # the skin is neither unused nor useless
    assert any(b - a > 1 for a, b in zip(rebuilt_steps, rebuilt_steps[1:], strict=False))


def test_zero_skin_rebuilds_every_call():
    pos = random_cloud(replicas=2, n=10, seed=6)
    nl = NeighborList(10, CUTOFF, skin=0.0)
    for k in range(1, 4):
        nl.update(pos + 1e-6 * k)
        assert nl.builds == k


def test_replica_count_change_forces_rebuild():
    nl = NeighborList(10, CUTOFF)
    nl.update(random_cloud(replicas=2, n=10, seed=7))
    graph = nl.update(random_cloud(replicas=3, n=10, seed=7))
    assert nl.builds == 2 and graph.num_nodes == 30


# -- fixed capacity -------------------------------------------------------------------
def test_fixed_capacity_layout():
    pos = random_cloud(replicas=3, n=25, seed=8)
    skin = 1.0
    needed = len(brute_force_edges(pos, CUTOFF + skin))
    graph = NeighborList(25, CUTOFF, skin=skin, capacity=needed + 37).update(pos)
    assert graph.num_edges == needed + 37
    assert graph.valid is not None and int(graph.valid.sum()) == needed
    assert bool(graph.valid[:needed].all()) and not bool(graph.valid[needed:].any())
    padding = ~graph.valid
    assert bool((graph.src[padding] == 75).all()) and bool((graph.dst[padding] == 75).all())
    check_layout(graph, 25)
    assert edge_set(graph) == brute_force_edges(pos, CUTOFF + skin)


def test_overflow_reports_the_needed_capacity():
    pos = random_cloud(replicas=2, n=25, seed=9)
    needed = len(brute_force_edges(pos, CUTOFF + 1.0))
    nl = NeighborList(25, CUTOFF, skin=1.0, capacity=needed - 1)
    with pytest.raises(NeighborListOverflow, match=f"{needed} candidate edges") as info:
        nl.update(pos)
    assert info.value.needed == needed and info.value.capacity == needed - 1
    nl.capacity = info.value.needed  # the caller grows it and carries on
    assert int(nl.update(pos).valid.sum()) == needed


# -- state ----------------------------------------------------------------------------
@pytest.mark.parametrize("capacity", [None, 3000])
def test_state_dict_round_trip(capacity):
    pos = random_cloud(replicas=2, n=25, seed=10)
    nl = NeighborList(25, CUTOFF, skin=1.0, capacity=capacity)
    nl.update(pos)
    nl.update(pos + 0.6)  # a second build
    buffer = io.BytesIO()
    torch.save(nl.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    copy = NeighborList(25, CUTOFF, skin=1.0, capacity=capacity)
    copy.load_state_dict(state)
    assert copy.builds == nl.builds == 2
    gen = torch.Generator().manual_seed(0)
    current = pos + 0.6
    for _ in range(15):
        current = current + 0.05 * torch.randn(current.shape, generator=gen, dtype=torch.float64)
        a, b = nl.update(current), copy.update(current)
        assert torch.equal(a.src, b.src) and torch.equal(a.dst, b.dst)
        assert (a.valid is None) == (b.valid is None)
        assert copy.builds == nl.builds
    assert nl.builds > 2


def test_state_of_an_unbuilt_list():
    nl = NeighborList(5, CUTOFF)
    copy = NeighborList(5, CUTOFF)
    copy.load_state_dict(nl.state_dict())
    assert copy.candidates is None and copy.builds == 0
    assert copy.needs_rebuild(torch.zeros(1, 5, 3))


# -- errors ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_beads": 0}, "n_beads must be positive"),
        ({"cutoff": 0.0}, "cutoff must be positive"),
        ({"skin": -0.1}, "skin must be non-negative"),
        ({"capacity": 0}, "capacity must be positive"),
    ],
)
def test_bad_settings(kwargs, message):
    args = {"n_beads": 5, "cutoff": CUTOFF, **kwargs}
    with pytest.raises(ValueError, match=message):
        NeighborList(**args)


def test_wrong_position_shape():
    with pytest.raises(ValueError, match=r"shape \(R, 5, 3\), got \(2, 4, 3\)"):
        NeighborList(5, CUTOFF).update(torch.zeros(2, 4, 3))


# -- static-shape lists (what a captured step rebuilds every step) ------------------------
@pytest.mark.parametrize("max_block", [1 << 23, 2 * 30 * 30])  # one chunk; two replicas each
def test_static_graph_holds_the_edges_in_build_order(max_block):
    pos = random_cloud(replicas=4, n=30, box=12.0, seed=3)
    nl = NeighborList(30, CUTOFF, skin=1.0, max_block=max_block)
    slots = nl.slots_needed(pos) + 7
    graph, needed = nl.static_graph(pos, slots, margin=0.0)
    assert graph.num_edges == 4 * slots and graph.num_nodes == 120
    assert int(needed) <= slots
    check_layout(graph, 30)
    assert edge_set(graph) == brute_force_edges(pos, CUTOFF)
    padding = ~graph.valid
    assert bool((graph.src[padding] == 120).all() and (graph.dst[padding] == 120).all())
    exact = nl.update(pos, exact=True)  # real edges in the same relative order
    assert torch.equal(graph.src[graph.valid], exact.src)
    assert torch.equal(graph.dst[graph.valid], exact.dst)


def test_static_graph_reports_what_it_needed_when_too_small():
    pos = random_cloud(replicas=2, n=30, box=12.0, seed=4)
    nl = NeighborList(30, CUTOFF)
    per_replica = [len(brute_force_edges(pos[r : r + 1], CUTOFF)) for r in range(2)]
    assert nl.slots_needed(pos, margin=0.0) == max(per_replica)
    graph, needed = nl.static_graph(pos, 10, margin=0.0)
    assert graph.num_edges == 20  # never grows on its own: the caller redoes the step
    assert int(needed) == -(-sum(per_replica) // 2) > 10


def test_without_empty_slots_keeps_the_edges_in_order():
    from workbench.neighbors import without_empty_slots

    pos = random_cloud(replicas=3, n=30, box=12.0, seed=5)
    nl = NeighborList(30, CUTOFF, skin=1.0)
    graph, _ = nl.static_graph(pos, nl.slots_needed(pos) + 5, margin=0.0)
    compact = without_empty_slots(graph)
    assert compact.valid is None and compact.csr is None and compact.version == -1
    assert torch.equal(compact.src, graph.src[graph.valid])
    assert torch.equal(compact.dst, graph.dst[graph.valid])
    assert compact.num_edges < graph.num_edges and compact.sorted_pairs == graph.sorted_pairs
    assert without_empty_slots(compact) is compact


# -- cell-list search (large systems) ----------------------------------------------------
def _dense_and_cells(n, **kwargs):
    return (NeighborList(n, CUTOFF, **kwargs),
            NeighborList(n, CUTOFF, cell_list_above=0, **kwargs))


@pytest.mark.parametrize("max_block", [1 << 23, 50])  # one range of beads; many
def test_cell_list_gives_the_dense_candidates(max_block):
    # a sparse cloud (empty cells) with exclusions, over replicas
    n = 60
    pos = random_cloud(replicas=3, n=n, box=30.0, seed=4, dtype=torch.float32)
    excluded = torch.tensor([[0, 1], [5, 9], [17, 40], [59, 58]])
    dense, cells = _dense_and_cells(n, skin=1.0, exclusions=excluded, max_block=max_block)
    assert dense.dense and not cells.dense
    want, got = dense.update(pos, exact=False), cells.update(pos, exact=False)
    assert got.num_edges > 0
    assert torch.equal(want.src, got.src) and torch.equal(want.dst, got.dst)
    check_layout(got, n)


def test_cell_list_of_far_apart_clusters_grows_its_cells():
    # two clusters 5,000 Å apart: cells of the radius would number 10⁹, so they grow
    pos = random_cloud(replicas=1, n=40, box=8.0, seed=9, dtype=torch.float32)
    pos[:, 20:] += 5000.0
    dense, cells = _dense_and_cells(40, skin=1.0)
    want, got = dense.update(pos, exact=False), cells.update(pos, exact=False)
    assert got.num_edges > 0
    assert torch.equal(want.src, got.src) and torch.equal(want.dst, got.dst)


def test_cell_list_on_cell_boundaries():
    # beads exactly on cell faces (a lattice of the cell edge), and partners across the
    # faces at exactly the search radius (left out) and just inside it (kept)
    radius = CUTOFF + 1.0
    lattice = torch.cartesian_prod(*[torch.arange(3.0)] * 3) * (radius + CELL_MARGIN)
    pos = torch.cat([lattice, lattice[:4] + torch.tensor([radius, 0.0, 0.0]),
                     lattice[4:8] - torch.tensor([0.0, 0.0, radius * 0.999])])[None]
    dense, cells = _dense_and_cells(pos.shape[1], skin=1.0)
    want, got = dense.update(pos, exact=False), cells.update(pos, exact=False)
    assert torch.equal(want.src, got.src) and torch.equal(want.dst, got.dst)
    d2 = ((pos[0, got.dst] - pos[0, got.src]) ** 2).sum(-1)
    assert got.num_edges > 0 and bool((d2 < radius**2).all())


def test_cell_list_in_capacity_mode_and_its_refusals():
    pos = random_cloud(replicas=2, n=20, box=10.0, seed=2, dtype=torch.float32)
    dense, cells = _dense_and_cells(20, skin=0.5, capacity=2000)
    want, got = dense.update(pos), cells.update(pos)
    assert torch.equal(want.src, got.src) and torch.equal(want.valid, got.valid)
    assert dense.dense_problem() is None
    assert "20 beads per replica, above the 0 up to which" in cells.dense_problem()
    with pytest.raises(ValueError, match="no Triton pair search: the system has 20 beads"):
        cells.searched_graph(pos, 100)
    with pytest.raises(ValueError, match="NaN or infinite"):
        NeighborList(20, CUTOFF, cell_list_above=0).update(torch.full_like(pos, float("nan")))


def _real_edges(graph):
    return graph.src[graph.valid], graph.dst[graph.valid]


def test_a_cell_list_has_no_static_graphs():
    pos = random_cloud(replicas=1, n=20, box=10.0, seed=2, dtype=torch.float32)
    _, cells = _dense_and_cells(20, skin=0.5)
    for call in (lambda: cells.static_graph(pos, 100), lambda: cells.slots_needed(pos)):
        with pytest.raises(ValueError, match="no static graph: the system has 20 beads per "
                                             "replica.*what the Triton pair search and "
                                             "captured steps need"):
            call()


class _HostReads(TorchFunctionMode):
    """Records every read of a tensor's value by the host (what a captured CUDA graph
    cannot do: ``cudaErrorStreamCaptureUnsupported``)."""

    READS = {"__bool__", "__int__", "__float__", "__index__", "item", "tolist"}

    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.READS:
            self.reads.append(func.__name__)
        return func(*args, **(kwargs or {}))


def test_static_graph_reads_nothing_back_to_the_host():
    """What a captured step replays: no tensor value is read back to the host."""
    n = 40
    pos = random_cloud(replicas=2, n=n, box=15.0, seed=3, dtype=torch.float32)
    nl = NeighborList(n, CUTOFF, skin=0.5, exclusions=torch.tensor([[0, 1]]))
    slots = nl.slots_needed(pos) + 5
    first, _ = nl.static_graph(pos, slots)
    with _HostReads() as mode:
        again, needed = nl.static_graph(pos + 0.01, slots)
    assert mode.reads == []
    assert int(needed) <= slots and again.num_edges == first.num_edges == 2 * slots
