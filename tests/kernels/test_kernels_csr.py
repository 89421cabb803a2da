"""CSR construction: exact match with the stable-sort reference, padding, high degree; the
atomic-free build of neighbour-list graphs."""

import pytest
import torch
from helpers import random_cloud
from kernels_testlib import make_graph

from kernels import build_csr, build_csr_reference, build_csr_sorted_pairs, valid_edge_mask
from workbench.neighbors import NeighborList


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_build_csr_matches_reference(device):
    for shuffle in (False, True):
        g = make_graph(device=device, shuffle=shuffle, seed=3)
        csr = build_csr(g["src"], g["dst"], g["num_nodes"], g["num_edges"])
        assert _same(csr, g["csr"])
        assert csr.dst_ptr.dtype == torch.int32 and csr.dst_perm.dtype == torch.int32
        no_count = build_csr(g["src"], g["dst"], g["num_nodes"])
        assert _same(no_count, build_csr_reference(g["src"], g["dst"], g["num_nodes"]))


def test_build_csr_high_degree_and_empty_segments(device):
    # node 0 receives 150 edges (several rank chunks); nodes 5.. have no edges at all
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(1, 5, (150,), generator=gen)
    dst = torch.zeros(150, dtype=torch.long)
    src = torch.cat([src, torch.tensor([0, 0, 3, 9])]).to(device)
    dst = torch.cat([dst, torch.tensor([2, 1, 4, 9])]).to(device)  # (9 -> 9): padding
    csr = build_csr(src, dst, 9)
    assert _same(csr, build_csr_reference(src, dst, 9))
    assert int(csr.dst_ptr[1]) == 150 and int(csr.dst_ptr[-1]) == 153
    assert valid_edge_mask(csr).sum() == 153


def test_valid_edge_mask(device):
    g = make_graph(device=device)
    mask = valid_edge_mask(g["csr"])
    n_real = int(g["num_edges"][0])
    assert mask[:n_real].all() and not mask[n_real:].any()


def symmetric_graph(n: int, seed: int, device):
    """Edges of a random symmetric graph sorted by (dst, src), with whole pairs dropped (a
    length beyond the cutoff: both ends set to ``n``) and padding slots in the middle and
    at the end."""
    gen = torch.Generator().manual_seed(seed)
    adj = torch.rand(n, n, generator=gen) < 0.4
    adj = (adj | adj.T) & ~torch.eye(n, dtype=torch.bool)
    dst, src = adj.nonzero(as_tuple=True)
    dropped = torch.rand(n, n, generator=gen) < 0.3
    dropped = (dropped | dropped.T)[dst, src]
    src, dst = torch.where(dropped, n, src), torch.where(dropped, n, dst)
    pad = torch.full((3,), n)
    src = torch.cat([src[:7], pad, src[7:], pad[:2]])
    dst = torch.cat([dst[:7], pad, dst[7:], pad[:2]])
    return src.to(device), dst.to(device)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sorted_pairs_build_matches_reference(device, seed):
    src, dst = symmetric_graph(12, seed, device)
    assert _same(build_csr_sorted_pairs(src, dst, 12), build_csr_reference(src, dst, 12))
    empty = torch.zeros(0, dtype=torch.long, device=device)
    assert _same(build_csr_sorted_pairs(empty, empty, 5), build_csr_reference(empty, empty, 5))


def test_sorted_pairs_build_of_neighbour_lists_as_the_fused_path_uses_them(device):
    pos = random_cloud(replicas=3, n=25, box=10.0, seed=6).to(device)
    nl = NeighborList(25, 5.0, skin=1.0, max_block=2 * 25 * 25)
    static, _ = nl.static_graph(pos, nl.slots_needed(pos, margin=1.0) + 5, margin=1.0)
    for graph in (nl.update(pos), nl.update(pos, exact=False), static):
        assert graph.sorted_pairs
        flat = pos.reshape(-1, 3)
        n = graph.num_nodes
        real = (graph.src < n) & (graph.dst < n)
        s, t = torch.where(real, graph.src, 0), torch.where(real, graph.dst, 0)
        real &= ((flat[t] - flat[s]) ** 2).sum(-1) < 4.5**2  # a shorter cutoff drops pairs
        src = torch.where(real, graph.src, n)
        dst = torch.where(real, graph.dst, n)
        assert _same(build_csr_sorted_pairs(src, dst, n), build_csr_reference(src, dst, n))


def test_benchmark_verlet_graph_is_a_padded_neighbour_list(device):
    from benchmarks.bench_kernels import verlet_list_graph

    graph = verlet_list_graph(30, 2, device=device)
    src, dst, n = graph["src"], graph["dst"], graph["num_nodes"]
    padding = src >= n
    assert int(padding.sum()) == int(0.1 * int((~padding).sum())) and bool(padding[-1])
    reference = build_csr_reference(src, dst, n)
    assert _same(build_csr_sorted_pairs(src, dst, n), reference)
    assert _same(build_csr(src, dst, n), reference)
