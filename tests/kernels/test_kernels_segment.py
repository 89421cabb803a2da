"""Segmented reductions against index_add_ references."""

import pytest
import torch
from kernels_testlib import make_graph, rel_err

from kernels import (
    edge_grad_to_positions,
    edge_vectors_to_positions,
    segment_sum,
)
from kernels.segment_reduce import (
    edge_grad_to_positions_reference,
    edge_vectors_to_positions_reference,
    scaled_segment_sum,
    scaled_segment_sum_reference,
    segment_sum_reference,
    signed_segment_sum,
    signed_segment_sum_reference,
)


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


def test_signed_segment_sum_adds_and_subtracts_rows(device):
    m = torch.randn(5, 6, generator=torch.Generator().manual_seed(2)).to(device)
    ptr = torch.tensor([0, 2, 2, 5, 6], dtype=torch.int32, device=device)
    perm = torch.tensor([0, -1, 3, -5, 4, -3, 2], dtype=torch.int32, device=device)
    out = signed_segment_sum(m, ptr, perm)
    expected = torch.stack([m[0] - m[0], torch.zeros(6, device=device), m[3] - m[4] + m[4],
                            -m[2]])
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)
    assert torch.equal(out, signed_segment_sum(m, ptr, perm))
    torch.testing.assert_close(signed_segment_sum_reference(m, ptr, perm), expected)


def test_scaled_segment_sum_multiplies_each_row_by_its_scale(device):
    """16-bit rows with scales over eight orders of magnitude (as the EGNN backward keeps its
    rows): the FP32 sums of ``scale[e] m[e]`` within the rows' rounding, shuffled layout."""
    g = make_graph(device=device, shuffle=True)
    csr = g["csr"]
    gen = torch.Generator().manual_seed(3)
    m = torch.randn(g["src"].numel(), 24, generator=gen).to(device=device, dtype=torch.float16)
    scale = (10.0 ** (8 * torch.rand(g["src"].numel(), generator=gen) - 6)).to(device)
    out = scaled_segment_sum(m, scale, csr.src_ptr, csr.src_perm)
    assert out.dtype == torch.float32
    ref = scaled_segment_sum_reference(m, scale.double(), csr.src_ptr, csr.src_perm)
    assert rel_err(out, ref) < 1e-6


def test_edge_grad_to_positions(device):
    g = make_graph(device=device)
    e = torch.randn(g["src"].numel(), device=device)
    out = edge_grad_to_positions(e, g["pos"], g["src"], g["dst"], g["csr"])
    ref = edge_grad_to_positions_reference(e.double(), g["pos"].double(), g["src"], g["dst"],
                                           g["csr"])
    assert out.shape == g["pos"].shape
    assert rel_err(out, ref) < 1e-5
    assert (out[g["num_nodes"]:] == 0).all()


def test_edge_vectors_to_positions(device):
    """Per-edge vectors: +g onto destinations, -g onto sources; padding rows (NaN here) are
    never read; a wrong shape is refused."""
    g = make_graph(device=device, shuffle=True)
    v = torch.randn(g["src"].numel(), 3, device=device)
    valid = torch.zeros(v.shape[0], dtype=torch.bool, device=device)
    valid[g["csr"].dst_perm[: int(g["csr"].dst_ptr[-1])].long()] = True
    v[~valid] = float("nan")
    out = edge_vectors_to_positions(v, g["pos"], g["src"], g["dst"], g["csr"])
    ref = edge_vectors_to_positions_reference(v.double(), g["pos"].double(), g["src"],
                                              g["dst"], g["csr"])
    n = g["num_nodes"]
    assert out.shape == g["pos"].shape and bool(torch.isfinite(out).all())
    assert rel_err(out, ref) < 1e-6
    assert (out[n:] == 0).all()
    assert float(out.sum(0).abs().max()) < 1e-4  # every edge adds +v and -v
    with pytest.raises(ValueError, match=r"g \[E, 3\]"):
        edge_vectors_to_positions(v[:, 0], g["pos"], g["src"], g["dst"], g["csr"])
