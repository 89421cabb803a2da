"""Segmented reductions against index_add_ references."""

import torch
from kernels_testlib import make_graph, rel_err

from kernels import (
    edge_grad_to_positions,
    segment_sum,
)
from kernels.segment_reduce import edge_grad_to_positions_reference, segment_sum_reference


def test_segment_sum_forward_backward(device):
    g = make_graph(device=device)
    csr = g["csr"]
    m = torch.randn(g["src"].numel(), 40, device=device, requires_grad=True)  # F not 2^k
    out = segment_sum(m, csr.dst_ptr, csr.dst_perm)
    ref = segment_sum_reference(m, csr.dst_ptr, csr.dst_perm)
    assert rel_err(out, ref) < 1e-6
    w = torch.randn_like(out)
    (gk,) = torch.autograd.grad((out * w).sum(), m)
    (gr,) = torch.autograd.grad((ref * w).sum(), m)
    assert torch.equal(gk, gr)  # a gather is exact; padding edges get zero
    assert (gk[~torch.isin(torch.arange(m.shape[0], device=device),
                           csr.dst_perm[: int(csr.dst_ptr[-1])].long())] == 0).all()


def test_edge_grad_to_positions(device):
    g = make_graph(device=device)
    e = torch.randn(g["src"].numel(), device=device)
    out = edge_grad_to_positions(e, g["pos"], g["src"], g["dst"], g["csr"])
    ref = edge_grad_to_positions_reference(e.double(), g["pos"].double(), g["src"], g["dst"],
                                           g["csr"])
    assert out.shape == g["pos"].shape
    assert rel_err(out, ref) < 1e-5
    assert (out[g["num_nodes"]:] == 0).all()
