"""Pair filter rows: the pair layout, W and W' per pair against forward-mode AD, and the
convolution that reads them against the exact per-edge reference (values and gradients)."""

import pytest
import torch
from kernels_testlib import filter_weights, make_graph, radial_specs, rel_err

from kernels import (
    build_csr_sorted_pairs,
    cfconv_reference,
    edge_distances,
    pack_filter,
    tabulated_cfconv,
    tabulated_cfconv_reference,
)
from kernels.pair_filter import (
    pair_filter_rows,
    pair_filter_rows_reference,
    pair_layout,
    pair_layout_reference,
)


def _symmetric_graph(device, seed=0):
    """A symmetric cutoff graph sorted by (dst, src), padding edges after it."""
    g = make_graph(device=device, seed=seed, drop=0)
    g["csr"] = build_csr_sorted_pairs(g["src"], g["dst"], g["num_nodes"])
    return g


def _filter(device, spec, dtype=torch.float32, F=32, K=8):
    A1, a1, A2, b2 = filter_weights(K=K, F=F, device=device)
    return pack_filter(A1, a1, A2, b2, dtype=dtype, spec=spec)


def test_pair_layout_gives_both_directions_one_row(device):
    g = _symmetric_graph(device)
    layout = pair_layout(g["csr"], g["src"].numel())
    n, src, dst = g["num_nodes"], g["src"].cpu(), g["dst"].cpu()
    real = int((dst < n).sum())
    count = int(layout.count)
    assert count == real // 2
    rows = layout.row.cpu().long()
    edges = layout.edges.cpu().long()[:count]
    # every pair's representative appears once; each real edge's row holds it or its reverse
    assert len(set(edges.tolist())) == count
    for e in range(real):
        r = int(edges[rows[e]])
        assert {(int(src[r]), int(dst[r])), (int(dst[r]), int(src[r]))} == {
            (int(src[e]), int(dst[e])), (int(dst[e]), int(src[e]))}


@pytest.mark.parametrize("seed", [0, 1])
def test_pair_layout_kernels_equal_the_reference(device, seed):
    g = _symmetric_graph(device, seed=seed)
    E = g["src"].numel()
    got, ref = pair_layout(g["csr"], E), pair_layout_reference(g["csr"], E)
    assert int(got.count) == int(ref.count) > 0
    assert torch.equal(got.row.cpu(), ref.row.cpu())
    assert torch.equal(got.edges.cpu(), ref.edges.cpu())


@pytest.mark.parametrize("spec_name", ["gauss", "gauss_env", "expnorm", "expnorm_lower"])
@pytest.mark.parametrize("dtype,precision,tol", [(torch.float32, "ieee", 2e-5),
                                                 (torch.float32, "tf32", 5e-3),
                                                 (torch.float16, "tf32", 2e-2)])
def test_rows_match_forward_mode_reference(device, spec_name, dtype, precision, tol):
    g = _symmetric_graph(device)
    spec = radial_specs(device=device)[spec_name]
    filt = _filter(device, spec, dtype)
    layout = pair_layout(g["csr"], g["src"].numel())
    dist = edge_distances(g["pos"], g["src"], g["dst"], g["csr"])
    rows = pair_filter_rows(dist, layout, filt, spec, precision)
    ref = pair_filter_rows_reference(dist.double(), layout, filt, spec)
    count = int(layout.count)
    assert rel_err(rows.w[:count], ref.w[:count]) < tol
    assert rel_err(rows.dw[:count], ref.dw[:count]) < tol
    assert rows.w.dtype == (torch.float32 if dtype == torch.float32 else torch.float16)


@pytest.mark.parametrize("spec_name", ["gauss", "expnorm_lower"])
def test_rows_convolution_matches_exact_reference(device, spec_name):
    """u, d(u.gu)/dpos and d(u.gu)/dxs through lengths -> pair rows -> row convolution equal
    the per-edge reference differentiated by autograd in float64."""
    g = _symmetric_graph(device)
    spec = radial_specs(device=device)[spec_name]
    filt = _filter(device, spec)
    gen = torch.Generator().manual_seed(5)
    xs = torch.randn(g["num_nodes"] + 1, 32, generator=gen).to(device)
    gu = torch.randn(g["num_nodes"], 32, generator=gen).to(device)
    layout = pair_layout(g["csr"], g["src"].numel())
    pos = g["pos"].clone().requires_grad_()
    x = xs.clone().requires_grad_()
    dist = edge_distances(pos, g["src"], g["dst"], g["csr"])
    rows = pair_filter_rows(dist, layout, filt, spec, "ieee")
    u = tabulated_cfconv(dist, x, g["src"], g["dst"], g["csr"], rows, symmetric=True)
    gp, gx = torch.autograd.grad((u * gu).sum(), (pos, x))
    pos64 = g["pos"].double().requires_grad_()
    x64 = xs.double().requires_grad_()
    u64 = cfconv_reference(pos64, x64, g["src"], g["dst"], g["csr"], filt, spec)
    gp64, gx64 = torch.autograd.grad((u64 * gu.double()).sum(), (pos64, x64))
    assert rel_err(u, u64) < 2e-5
    assert rel_err(gp, gp64) < 2e-5
    assert rel_err(gx, gx64) < 2e-5
    # the row convolution's own reference agrees as well
    ref = tabulated_cfconv_reference(dist.detach(), xs, g["src"], g["dst"], g["csr"], rows)
    assert rel_err(u, ref) < 1e-6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rows_outside_the_cutoff_and_padding_are_zero(device, dtype):
    g = _symmetric_graph(device)
    spec = radial_specs(cutoff=6.0, device=device)["gauss"]
    filt = _filter(device, spec, dtype)
    layout = pair_layout(g["csr"], g["src"].numel())
    dist = edge_distances(g["pos"], g["src"], g["dst"], g["csr"]).clone()
    count = int(layout.count)
    far = layout.edges[:count:3].long()
    dist[far] = 7.0  # beyond the cutoff
    rows = pair_filter_rows(dist, layout, filt, spec, "ieee")
    r = layout.row[far].long()
    assert torch.all(rows.w[r] == 0) and torch.all(rows.dw[r] == 0)
    assert rows.w[:count].abs().sum() > 0


def test_rows_refuse_bad_input(device):
    g = _symmetric_graph(device)
    spec = radial_specs(device=device)["gauss"]
    layout = pair_layout(g["csr"], g["src"].numel())
    with pytest.raises(ValueError, match="float32 edge lengths"):
        pair_filter_rows(g["pos"][:, 0].double(), layout, _filter(device, spec), spec)
    dist = edge_distances(g["pos"], g["src"], g["dst"], g["csr"])
    rows = pair_filter_rows(dist, layout, _filter(device, spec), spec)
    xs = torch.zeros(g["num_nodes"] + 1, 64, device=device)
    with pytest.raises(ValueError, match="matching the table"):
        tabulated_cfconv(dist, xs, g["src"], g["dst"], g["csr"], rows, symmetric=True)


@pytest.mark.parametrize("tile", [dict(BLOCK_P=16, NC=16, HC=32), dict(BLOCK_P=16, NC=32, HC=16),
                                  dict(BLOCK_P=32, NC=32, HC=32)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_every_tile_shape_gives_the_same_rows(device, tile, dtype):
    """Output-column chunks (NC) and hidden-unit chunks (HC) are the same computation."""
    import triton

    from kernels.cfconv import _kernel_args
    from kernels.pair_filter import ROW_DTYPES, _pair_filter_kernel

    g = _symmetric_graph(device)
    spec = radial_specs(device=device)["gauss_env"]
    filt = _filter(device, spec, dtype)
    layout = pair_layout(g["csr"], g["src"].numel())
    dist = edge_distances(g["pos"], g["src"], g["dst"], g["csr"])
    capacity = layout.edges.numel()
    w = torch.zeros(capacity, 32, dtype=ROW_DTYPES[dtype], device=device)
    dw = torch.zeros_like(w)
    _pair_filter_kernel.fn[(triton.cdiv(capacity, tile["BLOCK_P"]),)](
        dist, layout.edges, layout.count, w_out_ptr=w, dw_out_ptr=dw, capacity=capacity,
        cutoff=spec.cutoff_upper, num_warps=4, **tile, **_kernel_args(filt, spec, "ieee", 32))
    ref = pair_filter_rows_reference(dist.double(), layout, filt, spec)
    count = int(layout.count)
    tol = 2e-5 if dtype == torch.float32 else 5e-2
    assert rel_err(w[:count], ref.w[:count]) < tol
    assert rel_err(dw[:count], ref.dw[:count]) < tol
