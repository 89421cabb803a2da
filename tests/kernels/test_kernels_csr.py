"""CSR construction: exact match with the stable-sort reference, padding, high degree."""

import torch
from kernels_testlib import make_graph

from kernels import build_csr, build_csr_reference, valid_edge_mask


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
