"""Edge lengths op: values, padding, and the position gradient of its backward."""

import pytest
import torch
from kernels_testlib import make_graph, rel_err

from kernels import edge_distances
from kernels.edge_distances import edge_distances_reference


@pytest.mark.parametrize("shuffle", [False, True], ids=["sorted", "shuffled"])
def test_lengths_and_gradient_match_the_reference(device, shuffle):
    g = make_graph(device=device, seed=4, shuffle=shuffle)
    n, csr = g["num_nodes"], g["csr"]
    pos = g["pos"].clone()
    pos[n] = float("nan")  # the padding node is never read
    upstream = torch.randn(g["src"].numel(), generator=torch.Generator().manual_seed(5))
    upstream = upstream.to(device)

    p = pos.clone().requires_grad_()
    d = edge_distances(p, g["src"], g["dst"], csr)
    (grad,) = torch.autograd.grad((d * upstream).sum(), p)
    p64 = g["pos"].double().requires_grad_()
    d64 = edge_distances_reference(p64, g["src"], g["dst"], csr)
    (grad64,) = torch.autograd.grad((d64 * upstream.double()).sum(), p64)

    valid = d64 != 0
    assert 0 < int(valid.sum()) < d.numel() - 20  # dropped edges and padding are invalid
    assert (d[~valid] == 0).all()
    assert rel_err(d, d64) < 1e-6
    assert rel_err(grad[:n], grad64[:n]) < 1e-6
    assert (grad[n:] == 0).all()


def test_refuses_other_dtypes(device):
    g = make_graph(device=device)
    with pytest.raises(ValueError, match="float32 positions"):
        edge_distances(g["pos"].double(), g["src"], g["dst"], g["csr"])
