"""Fused cfconv: FP32 exactness (general and symmetric graphs), finite differences, padding,
the pair list, single-pass TF32 and W16A16 force errors."""

import pytest
import torch
import triton
from kernels_testlib import (
    central_differences,
    filter_weights,
    make_graph,
    radial_specs,
    rel_err,
)

from kernels import cfconv, pack_filter
from kernels.cfconv import _prune_configs, cfconv_reference, upper_edges


def _run(op, pos, xs, g, filt, spec, gu, precision="tf32x3", symmetric=False):
    pos = pos.clone().requires_grad_()
    xs = xs.clone().requires_grad_()
    u = op(pos, xs, g["src"], g["dst"], g["csr"], filt, spec, precision, symmetric)
    gp, gx = torch.autograd.grad((u * gu.to(u.dtype)).sum(), (pos, xs))
    return u.detach(), gp, gx


def _setup(device, spec_name, F=32, seed=0, drop=3):
    """``drop=0`` keeps the graph symmetric (dropping edges by count breaks pairs)."""
    g = make_graph(device=device, seed=seed, drop=drop)
    spec = radial_specs(device=device)[spec_name]
    gen = torch.Generator().manual_seed(seed + 7)
    xs = torch.randn(g["num_nodes"] + 1, F, generator=gen).to(device)
    gu = torch.randn(g["num_nodes"], F, generator=gen).to(device)
    return g, spec, xs, gu


@pytest.mark.parametrize("spec_name,precision,symmetric", [
    ("gauss_env", "tf32x3", False), ("expnorm", "ieee", False), ("expnorm_lower", "tf32x3", False),
    ("gauss", "tf32x3", True), ("expnorm_lower", "ieee", True)])
def test_cfconv_fp32_matches_reference(device, spec_name, precision, symmetric):
    g, spec, xs, gu = _setup(device, spec_name, drop=0 if symmetric else 3)
    filt = pack_filter(*filter_weights(device=device), dtype="fp32")
    u, gp, gx = _run(cfconv, g["pos"], xs, g, filt, spec, gu, precision, symmetric)
    ur, gpr, gxr = _run(cfconv_reference, g["pos"].double(), xs.double(), g, filt, spec, gu)
    assert rel_err(u, ur) < 1e-5
    assert rel_err(gp, gpr) < 1e-5
    assert rel_err(gx, gxr) < 1e-5
    assert (gp[g["num_nodes"]:] == 0).all() and (gx[g["num_nodes"]:] == 0).all()


@pytest.mark.parametrize("spec_name,symmetric", [("gauss_env", False), ("expnorm", True)])
def test_cfconv_position_gradient_finite_differences(device, spec_name, symmetric):
    """Kernel FP32 gradient vs central differences of the float64 reference (envelope and
    basis derivatives included: many edges sit close to the cutoff)."""
    g, spec, xs, gu = _setup(device, spec_name, seed=1, drop=0 if symmetric else 3)
    filt = pack_filter(*filter_weights(device=device, seed=2), dtype="fp32")
    _, gp, _ = _run(cfconv, g["pos"], xs, g, filt, spec, gu, symmetric=symmetric)
    pos64, xs64, gu64 = g["pos"].double(), xs.double(), gu.double()

    def energy(p):
        u = cfconv_reference(p, xs64, g["src"], g["dst"], g["csr"], filt, spec)
        return float((u * gu64).sum())

    assert rel_err(gp, central_differences(energy, pos64)) < 1e-5


def test_cfconv_padding_contributes_nothing(device):
    g, spec, xs, gu = _setup(device, "gauss_env")
    filt = pack_filter(*filter_weights(device=device), dtype="fp32")
    pos = g["pos"].clone()
    pos[g["num_nodes"]] = float("nan")  # padding node: never read
    xs[g["num_nodes"]] = float("nan")
    u, gp, gx = _run(cfconv, pos, xs, g, filt, spec, gu)
    assert torch.isfinite(u).all() and torch.isfinite(gx[: g["num_nodes"]]).all()
    assert torch.isfinite(gp[: g["num_nodes"]]).all()
    # identical to the graph without padding slots (same CSR order of the valid edges)
    n_real = int(g["num_edges"][0])
    trimmed = dict(g, src=g["src"][:n_real], dst=g["dst"][:n_real])
    trimmed["csr"] = type(g["csr"])(g["csr"].dst_ptr, g["csr"].dst_perm[:n_real],
                                    g["csr"].src_ptr, g["csr"].src_perm[:n_real])
    u2, gp2, gx2 = _run(cfconv, g["pos"], xs, trimmed, filt, spec, gu)
    assert torch.equal(u, u2) and torch.equal(gx[: g["num_nodes"]], gx2[: g["num_nodes"]])


@pytest.mark.parametrize("dtype,symmetric", [("fp16", True), ("bf16", False)])
def test_cfconv_w16a16_force_error(device, dtype, symmetric):
    g, spec, xs, gu = _setup(device, "gauss_env", drop=0 if symmetric else 3)
    weights = filter_weights(device=device)
    filt16 = pack_filter(*weights, dtype=dtype, spec=spec)
    filt32 = pack_filter(*weights, dtype="fp32")
    u, gp, gx = _run(cfconv, g["pos"], xs, g, filt16, spec, gu, symmetric=symmetric)
    ur, gpr, gxr = _run(cfconv_reference, g["pos"].double(), xs.double(), g, filt32, spec, gu)
    force_rms = gpr.pow(2).mean().sqrt()
    assert (gp.double() - gpr).pow(2).mean().sqrt() <= 0.01 * force_rms
    assert rel_err(u, ur) < 0.01 and rel_err(gx, gxr) < 0.01


def test_cfconv_refuses_weights_requiring_grad(device):
    A1, a1, A2, b2 = filter_weights(device=device)
    with pytest.raises(ValueError, match="require grad"):
        pack_filter(A1.requires_grad_(), a1, A2, b2)
    with torch.no_grad():
        pack_filter(A1, a1, A2, b2)  # fine: nothing is recorded


def test_upper_edges_lists_each_pair_once(device):
    g = make_graph(device=device, drop=0, shuffle=True)
    order, count = upper_edges(g["src"], g["dst"], g["csr"])
    listed = order[: int(count)].long()
    src, dst = g["src"][listed], g["dst"][listed]
    n = g["num_nodes"]
    pairs = {(int(a), int(b)) for a, b in zip(dst, src, strict=True)}
    real = {(min(int(a), int(b)), max(int(a), int(b)))
            for a, b in zip(g["dst"], g["src"], strict=True) if a < n}
    assert (src > dst).all() and len(pairs) == int(count) == len(real) and pairs == real
    # destination-layout order: non-decreasing destinations
    assert (dst[1:] >= dst[:-1]).all()


def test_cfconv_tf32_force_error(device):
    """One TF32 product per GEMM (operands rounded to TF32; what the GPU computes, emulated
    exactly by the interpreter): the position gradient within 1e-3 of its RMS of float64."""
    g, spec, xs, gu = _setup(device, "expnorm", drop=0, F=64)
    filt = pack_filter(*filter_weights(device=device, F=64), dtype="fp32")
    u, gp, gx = _run(cfconv, g["pos"], xs, g, filt, spec, gu, "tf32", symmetric=True)
    ur, gpr, gxr = _run(cfconv_reference, g["pos"].double(), xs.double(), g, filt, spec, gu)
    force_rms = gpr.pow(2).mean().sqrt()
    err = (gp.double() - gpr).pow(2).mean().sqrt() / force_rms
    assert 1e-7 < err <= 1e-3  # above zero: the TF32 rounding is really applied
    assert rel_err(u, ur) < 1e-3 and rel_err(gx, gxr) < 1e-3


def test_autotune_prune():
    """IEEE products get one config; hidden chunks must divide F."""
    cfgs = [triton.Config({"BLOCK_E": 16, "FC": fc}, num_warps=4) for fc in (32, 64, 128)]
    assert [c.kwargs["FC"] for c in _prune_configs(cfgs, {}, F=128, PREC="tf32")] == [32, 64, 128]
    assert [c.kwargs["FC"] for c in _prune_configs(cfgs, {}, F=64, PREC="tf32")] == [32, 64]
    assert len(_prune_configs(cfgs, {}, F=128, PREC="ieee")) == 1
    assert [c.kwargs["FC"] for c in _prune_configs(cfgs, {}, F=16, PREC="tf32")] == [16]


@pytest.mark.parametrize("persistent", [0, 2])
def test_conv_kernel_grid_variants_cover_every_node(device, persistent):
    """One program per node, and a persistent grid of fewer programs than nodes (each
    walking every ``num_programs``-th node): the same sums."""
    from kernels.cfconv import _conv_kernel, _kernel_args

    g, spec, xs, _ = _setup(device, "gauss_env")
    filt = pack_filter(*filter_weights(device=device), dtype="fp32")
    n = g["num_nodes"]
    args = _kernel_args(filt, spec, "ieee", xs.shape[1])
    out = torch.full((n, xs.shape[1]), float("nan"), device=device)
    grid = (3 * persistent if persistent else n,)
    _conv_kernel.fn[grid](g["pos"], xs, g["src"], g["csr"].dst_ptr, g["csr"].dst_perm, xs, out,
                          out_ptr=out, num_nodes=n, EDGE_DOT=False, PERSISTENT=persistent,
                          BLOCK_E=16, **args)
    ref = cfconv_reference(g["pos"].double(), xs.double(), g["src"], g["dst"], g["csr"], filt,
                           spec)
    assert rel_err(out, ref) < 1e-5
