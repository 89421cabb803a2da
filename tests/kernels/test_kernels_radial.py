"""Flash radial basis: values and position gradients for every basis / envelope variant."""

import pytest
import torch
from kernels_testlib import make_graph, radial_specs, rel_err

from kernels import radial_basis
from kernels.radial_basis import radial_basis_reference


@pytest.mark.parametrize("name", ["gauss", "gauss_env", "expnorm", "expnorm_lower"])
def test_radial_basis_matches_reference(device, name):
    g = make_graph(device=device)
    spec = radial_specs(device=device)[name]
    args = (g["src"], g["dst"], g["csr"], spec, g["num_edges"])
    p32 = g["pos"].clone().requires_grad_()
    p64 = g["pos"].double().requires_grad_()
    outs = radial_basis(p32, *args)
    refs = radial_basis_reference(p64, *args)
    for a, b in zip(outs, refs, strict=True):
        assert rel_err(a, b) < 1e-5
    valid = torch.zeros(g["src"].numel(), dtype=torch.bool, device=device)
    valid[: int(g["num_edges"][0])] = True
    assert (outs[1][~valid] == 0).all() and (outs[2][~valid] == 0).all()
    ws = [torch.randn(o.shape, dtype=torch.float64, device=device) for o in outs]
    (gk,) = torch.autograd.grad(sum((o * w.float()).sum() for o, w in zip(outs, ws,
                                                                         strict=True)), p32)
    (gr,) = torch.autograd.grad(sum((o * w).sum() for o, w in zip(refs, ws, strict=True)), p64)
    assert rel_err(gk, gr) < 1e-5
