"""Pair search straight into both CSR layouts: the same edges, order and layouts as the dense
reference; in-bounds indices when the capacity is too small; non-finite replicas."""

import pytest
import torch
from helpers import random_cloud

from kernels import build_csr_reference, edge_distances, tabulated_cfconv
from kernels.pair_search import pair_search_csr, pair_search_csr_reference
from kernels.tabulated import tabulate_filter


def _allowed(n, excluded=()):
    allowed = ~torch.eye(n, dtype=torch.bool)
    for i, j in excluded:
        allowed[i, j] = allowed[j, i] = False
    return allowed


def _same(a, b):
    return all(torch.equal(x.long(), y.long()) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("replicas,n,cutoff", [(3, 21, 5.0), (1, 260, 4.0), (1, 2, 20.0)],
                         ids=["small", "two-tiles", "one-pair"])
def test_matches_the_dense_reference(device, replicas, n, cutoff):
    pos = random_cloud(replicas, n, box=10.0 if n < 100 else 16.0, seed=n,
                       dtype=torch.float32).to(device)
    allowed = _allowed(n, [(0, 1), (1, 2), (0, n - 1)] if n > 2 else []).to(device)
    capacity = replicas * n * n
    got = pair_search_csr(pos, allowed, cutoff, capacity)
    ref = pair_search_csr_reference(pos, allowed, cutoff, capacity)
    assert int(got.needed) == int(ref.needed) > 0
    assert torch.equal(got.src, ref.src) and torch.equal(got.dst, ref.dst)
    assert _same(got.csr, ref.csr)
    assert got.csr.dst_ptr.dtype == torch.int32 and got.csr.src_perm.dtype == torch.int32
    # the layouts are those of the edge list itself
    assert _same(got.csr, build_csr_reference(got.src, got.dst, replicas * n))
    real = got.src < replicas * n
    assert not (got.src[real] // n != got.dst[real] // n).any()  # never across replicas
    if n > 2:
        assert not ((got.src % n == 0) & (got.dst % n == 1) & real).any()  # excluded pair


def test_a_small_capacity_cuts_segments_but_keeps_indices_in_bounds(device):
    pos = random_cloud(2, 30, box=8.0, seed=4, dtype=torch.float32).to(device)
    full = pair_search_csr(pos, _allowed(30).to(device), 5.0, 2 * 900)
    total = int(full.needed)
    cut = pair_search_csr(pos, _allowed(30).to(device), 5.0, total // 2)
    assert int(cut.needed) == total  # tells the caller how many it needs
    capacity = total // 2
    assert int(cut.csr.dst_ptr[-1]) == capacity and int(cut.csr.dst_ptr.max()) <= capacity
    for perm in (cut.csr.dst_perm, cut.csr.src_perm):
        assert int(perm.min()) >= 0 and int(perm.max()) < capacity
    assert torch.equal(cut.src, full.src[:capacity]) and torch.equal(cut.dst, full.dst[:capacity])


def _cut_reference(full, capacity):
    """The layouts of ``full`` (the whole graph, from the reference) cut at ``capacity``:
    segments clamped, ``src_perm[p]`` the slot of the reverse of edge ``p`` where both were
    stored, ``p`` where the reverse edge fell beyond the capacity."""
    ptr, _, _, perm = full.csr
    ids = torch.arange(capacity, dtype=torch.int64, device=ptr.device)
    perm = perm[:capacity].long()
    return (full.src[:capacity], full.dst[:capacity], ptr.clamp(max=capacity), ids,
            ptr.clamp(max=capacity), torch.where(perm < capacity, perm, ids))


def _check_source_layout(got, whole):
    """Position ``p`` of node ``j``'s segment holds the ``p``-th edge into ``j``,
    ``src[p] -> j``; ``src_perm[p]`` is its reverse ``j -> src[p]`` where that was stored,
    else ``p`` (only in a cut graph, and only where the reverse was cut off)."""
    ptr, perm = got.csr.src_ptr.long(), got.csr.src_perm.long()
    capacity, used = got.src.numel(), int(ptr[-1])
    assert used == min(int(got.needed), capacity)
    owner = torch.repeat_interleave(torch.arange(ptr.numel() - 1, device=ptr.device),
                                    ptr.diff())
    assert torch.equal(got.dst[:used], owner)
    slots = torch.arange(capacity, device=ptr.device)
    moved = perm != slots  # no edge is its own reverse
    assert not moved[used:].any()
    p = slots[:used][moved[:used]]
    k = perm[p]
    assert torch.equal(got.src[k], got.dst[p]) and torch.equal(got.dst[k], got.src[p])
    # each node's outgoing edges come in increasing dst
    same_node = got.dst[p][1:] == got.dst[p][:-1]
    assert not (same_node & (got.dst[k][1:] <= got.dst[k][:-1])).any()
    lost = slots[:used][~moved[:used]]
    assert bool((whole.csr.src_perm.long()[lost] >= capacity).all())  # the reverse was cut
    if used == int(got.needed):
        assert lost.numel() == 0


@pytest.mark.parametrize("n,capacities", [(45, ("one less",)), (70, ("spare", "two rows"))],
                         ids=["45", "70"])
def test_words_across_replicas_match_the_reference_whole_and_cut(device, n, capacities):
    """``n`` not a multiple of 32, more than one mask word, a dense replica and a sparse
    one: ranks come from word prefix counts plus popcounts, on both sides of word
    boundaries and in a later replica. All the outputs match the reference, with room to
    spare (padding) and cut at the capacity (the last edge only, or all but two rows)."""
    pos = random_cloud(2, n, box=1.0, seed=n, dtype=torch.float32)
    pos = (pos * torch.tensor([8.0, 20.0])[:, None, None]).to(device)
    cutoff = 7.0
    allowed = _allowed(n, [(0, 31), (31, 32), (5, n - 1), (33, 34)]).to(device)
    ref = pair_search_csr_reference(pos, allowed, cutoff, 2 * n * n)
    total = int(ref.needed)
    degree = torch.bincount(ref.dst[:total] // n, minlength=2) / n
    assert degree[0] > 0.5 * n and 1 < degree[1] < 0.2 * n  # dense, sparse
    for name in capacities:
        capacity = {"spare": total + 37, "one less": total - 1, "two rows": 2 * n + 5}[name]
        got = pair_search_csr(pos, allowed, cutoff, capacity)
        assert int(got.needed) == total
        if capacity >= total:
            want = pair_search_csr_reference(pos, allowed, cutoff, capacity)
            assert _same((got.src, got.dst, *got.csr), (want.src, want.dst, *want.csr))
        else:
            assert _same((got.src, got.dst, *got.csr), _cut_reference(ref, capacity))
        _check_source_layout(got, ref)


def test_a_replica_with_non_finite_positions_has_no_edges(device):
    pos = random_cloud(3, 16, box=8.0, seed=2, dtype=torch.float32).to(device)
    pos[1, 4, 0] = float("nan")
    pos[2] = float("inf")
    got = pair_search_csr(pos, _allowed(16).to(device), 6.0, 3 * 256)
    real = got.src < 48
    assert not ((got.src[real] // 16 == 2) | (got.src[real] == 20) | (got.dst[real] == 20)).any()
    clean = pos.clone()
    clean[1, 4] = 100.0 + torch.arange(3.0, device=device)  # far from everything: no edges
    clean[2] = 100.0 * torch.arange(16.0, device=device)[:, None]
    assert torch.equal(got.src, pair_search_csr(clean, _allowed(16).to(device), 6.0, 768).src)


def test_tabulated_messages_over_the_searched_graph_match_the_reference_layouts(device):
    pos = random_cloud(2, 24, box=9.0, seed=8, dtype=torch.float32).to(device)
    found = pair_search_csr(pos, _allowed(24).to(device), 6.0, 2 * 24 * 24)
    flat = pos.reshape(-1, 3)
    xs = torch.randn(48, 16, generator=torch.Generator().manual_seed(1)).to(device)

    def filter_fn(d):
        waves = torch.arange(1.0, 17.0, dtype=d.dtype, device=d.device) / 6.0
        return torch.cos(d[:, None] * waves) * (6.0 - d[:, None]).clamp(min=0) ** 2

    table = tabulate_filter(filter_fn, 601, 6.0, device=device)
    dist = edge_distances(flat, found.src, found.dst, found.csr)
    ours = tabulated_cfconv(dist, xs, found.src, found.dst, found.csr, table)
    reference = build_csr_reference(found.src, found.dst, 48)
    dist_ref = edge_distances(flat, found.src, found.dst, reference)
    assert torch.equal(dist, dist_ref)
    assert torch.equal(ours, tabulated_cfconv(dist_ref, xs, found.src, found.dst, reference,
                                              table))


def test_bad_shapes_are_refused():
    pos = torch.zeros(2, 5, 3)
    with pytest.raises(ValueError, match="float32"):
        pair_search_csr(pos.double(), _allowed(5), 3.0, 10)
    with pytest.raises(ValueError, match=r"\[5, 5\]"):
        pair_search_csr(pos, _allowed(4), 3.0, 10)
    with pytest.raises(ValueError, match="capacity"):
        pair_search_csr(pos, _allowed(5), 3.0, 0)


def test_kernel_benchmark_rows_check_against_the_references():
    from benchmarks import bench_kernels

    device = "cuda" if torch.cuda.is_available() else "cpu"
    graph = bench_kernels.make_benchmark_graph(20, 2, device=device)
    table = []
    bench_kernels._pair_search_rows(table, graph["pos"], 20, 2)
    bench_kernels._langevin_rows(table, 20, 2, device)
    names = [row[0] for row in table]
    assert names == ["pair_search_csr (positions -> CSRs)", "langevin_drift",
                     "langevin_finish (kick, checks, freeze)"]
    assert table[0][4] == "exact match"
    assert all(row[3] < 1e-6 for row in table)
