"""Tabulated cfconv: the cubic Hermite table, kernel vs reference, padding, finite differences."""

import math

import pytest
import torch
from kernels_testlib import central_differences, make_graph, rel_err

from kernels import (
    build_csr_reference,
    build_filter_table,
    edge_distances,
    tabulated,
    tabulated_cfconv,
)
from kernels.edge_distances import edge_distances_reference
from kernels.tabulated import (
    _CONFIGS,
    _TabulatedCFConv,
    evaluate_table,
    tabulate_filter,
    tabulated_cfconv_reference,
)

TABLE_CUTOFF = 5.0  # below the test graphs' 6 A: some edges lie beyond the table


def gaussian_filter(F, cutoff, sigma=0.6, seed=3):
    """Smooth analytic filter ``d [M] -> [M, F]``: Gaussians times a cosine envelope."""
    g = torch.Generator().manual_seed(seed)
    amp = torch.randn(8, F, generator=g, dtype=torch.float64)
    mu = torch.linspace(0.0, cutoff, 8, dtype=torch.float64)

    def fn(d):
        env = 0.5 * (torch.cos(math.pi * d / cutoff) + 1.0)
        return (torch.exp(-0.5 * ((d[:, None] - mu.to(d)) / sigma) ** 2) @ amp.to(d)) * env[:, None]

    return fn


def _value_and_slope(fn, d):
    """``fn(d) [M, F]`` and its derivative in ``d`` (forward-mode AD, pointwise in d)."""
    return torch.func.jvp(fn, (d,), (torch.ones_like(d),))


def _setup(device, F=32, G=64, seed=0, xs_dtype=torch.float32):
    g = make_graph(device=device, seed=seed)
    table = tabulate_filter(gaussian_filter(F, TABLE_CUTOFF), G, TABLE_CUTOFF, device)
    gen = torch.Generator().manual_seed(seed + 7)
    xs = torch.randn(g["num_nodes"] + 1, F, generator=gen).to(device, xs_dtype)
    gu = torch.randn(g["num_nodes"], F, generator=gen).to(device)
    return g, table, xs, gu


KERNEL = (edge_distances, tabulated_cfconv)
REFERENCE = (edge_distances_reference, tabulated_cfconv_reference)


def _run(ops, pos, xs, g, table, gu):
    """``u`` and the gradients of ``sum(u * gu)`` for positions and features, through the
    edge lengths as the model computes them (``ops``: lengths op, convolution op)."""
    lengths, conv = ops
    pos = pos.clone().requires_grad_()
    xs = xs.clone().requires_grad_()
    u = conv(lengths(pos, g["src"], g["dst"], g["csr"]), xs, g["src"], g["dst"], g["csr"],
             table)
    gp, gx = torch.autograd.grad((u * gu.to(u.dtype)).sum(), (pos, xs))
    return u.detach(), gp, gx


def _with_config(cfg):
    """`KERNEL` with the convolution's autotuner bypassed by ``cfg`` (both kernels)."""
    return edge_distances, lambda *args: _TabulatedCFConv.apply(*args, (cfg, cfg), False,
                                                                 False, None)


def _hermite(values, slopes, h, d):
    """The exact (float64) cubic Hermite interpolant of ``values``, ``slopes`` [G, F] at d."""
    x = d / h
    k = x.detach().floor().long().clamp(0, values.shape[0] - 2)
    t = (x - k)[:, None]
    return ((2 * t - 3) * t * t + 1) * values[k] + (t - 1) ** 2 * t * h * slopes[k] + (
        (3 - 2 * t) * t * t * values[k + 1] + (t - 1) * t * t * h * slopes[k + 1])


def _c23_ulp(table):
    """[F]: 2^-11 of each column's largest stored |c2|, |c3| (the fp16 rounding bound)."""
    return 2.0**-11 * table.coeffs23.double().abs().amax((0, 1)) * table.scale23.double()


def test_build_filter_table_is_hermite():
    G, F, h = 9, 4, 0.25
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(G, F, generator=gen, dtype=torch.float64)
    s = torch.randn(G, F, generator=gen, dtype=torch.float64)
    table = build_filter_table(v, s, h, (G - 1) * h)
    assert table.coeffs01.shape == (G - 1, 2, F) and table.coeffs01.dtype == torch.float32
    assert table.coeffs23.shape == (G - 1, 2, F) and table.coeffs23.dtype == torch.float16
    assert table.scale23.shape == (F,) and table.scale23.dtype == torch.float32
    assert (torch.frexp(table.scale23).mantissa == 0.5).all()  # powers of two
    peak = table.coeffs23.float().abs().amax((0, 1))
    assert ((peak >= 2**14 * 0.99) & (peak <= 2**15 * 1.01)).all()
    # values and slopes at both ends of every interval: exact (float32 c0, c1) at the left,
    # up to the float16 rounding of c2, c3 at the right
    ulp = _c23_ulp(table)
    d = torch.arange(G - 1, dtype=torch.float64) * h
    for end, w_tol, s_tol in ((0.0, 1e-6, 1e-5),
                              (1.0 - 1e-12, 2 * ulp + 1e-6, 3 * ulp / h + 1e-5)):
        w, slope = _value_and_slope(lambda x: evaluate_table(table, x), d + end * h)
        lo = 1 if end else 0
        assert ((w - v[lo : G - 1 + lo]).abs() <= w_tol).all()
        assert ((slope - s[lo : G - 1 + lo]).abs() <= s_tol).all()
    assert (evaluate_table(table, torch.tensor([2.0, 7.5], dtype=torch.float64)) == 0).all()
    with pytest.raises(ValueError, match="cutoff"):
        build_filter_table(v, s, h, 3.0)
    with pytest.raises(ValueError, match="G >= 2"):
        build_filter_table(v, s[:-1], h, (G - 1) * h)


def test_interpolant_accuracy():
    """G = 2001 on [0, 10] with float16 c2, c3: max error < 1e-6 of the filter's scale.

    The slope error, 1.7e-6 of max |W'| here, is the float16 rounding of c2 (at most
    2^-13 h max |W''|, see `kernels.tabulated`); float32 coefficients gave < 1e-7. Forces
    are held to 1e-4 relative (tests/model).
    """
    F, rc = 16, 10.0
    fn = gaussian_filter(F, rc)
    table = tabulate_filter(fn, 2001, rc)
    d = torch.rand(20000, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * rc
    w, dw = _value_and_slope(lambda x: evaluate_table(table, x), d)
    exact, dexact = _value_and_slope(fn, d)
    scale = exact.abs().amax(0)
    assert ((w - exact).abs().amax(0) / scale).max() < 1e-6
    assert ((dw - dexact).abs().amax(0) / dexact.abs().amax(0)).max() < 3e-6


def test_half_precision_coefficients_keep_their_range():
    """Columns from 1e-12 to 1e12: no float16 overflow (c2 ~ 2e10 here) nor flush to zero."""
    G, F, h = 65, 7, 1.0 / 16
    amp = 10.0 ** torch.linspace(-12, 12, F, dtype=torch.float64)
    phase = torch.linspace(0, 3, F, dtype=torch.float64)
    grid = torch.arange(G, dtype=torch.float64)[:, None] * h
    v, s = amp * torch.sin(3 * grid + phase), 3 * amp * torch.cos(3 * grid + phase)
    table = build_filter_table(v, s, h, (G - 1) * h)
    assert torch.isfinite(table.coeffs23).all()
    assert (table.coeffs23.float().abs().amax((0, 1)) <= 2**15 * 1.01).all()
    d = torch.rand(4000, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    d = d * (G - 1) * h
    w, dw = _value_and_slope(lambda x: evaluate_table(table, x), d)
    exact, dexact = _value_and_slope(lambda x: _hermite(v, s, h, x), d)
    assert ((w - exact).abs().amax(0) / exact.abs().amax(0)).max() < 1e-5
    assert ((dw - dexact).abs().amax(0) / dexact.abs().amax(0)).max() < 1e-4


@pytest.mark.parametrize(("cfg", "feature_slice"),
                         [(None, 64), (_CONFIGS[0], 64), (_CONFIGS[-1], 64), (None, 8)],
                         ids=["autotune", "smallest-tile", "largest-tile", "four-slices"])
def test_matches_reference(device, cfg, feature_slice, monkeypatch):
    monkeypatch.setattr(tabulated, "FORWARD_SLICE", feature_slice)
    monkeypatch.setattr(tabulated, "BACKWARD_SLICE", feature_slice)
    g, table, xs, gu = _setup(device)
    op = KERNEL if cfg is None else _with_config(cfg)
    u, gp, gx = _run(op, g["pos"], xs, g, table, gu)
    ur, gpr, gxr = _run(REFERENCE, g["pos"].double(), xs.double(), g, table,
                        gu)
    assert rel_err(u, ur) < 1e-5
    assert rel_err(gp, gpr) < 1e-5
    assert rel_err(gx, gxr) < 1e-5
    assert (gp[g["num_nodes"]:] == 0).all() and (gx[g["num_nodes"]:] == 0).all()


def test_backward_takes_one_slice_when_partial_rows_are_too_large(device, monkeypatch):
    """Above `PARTIAL_ROWS_BYTES` the backward writes one row; the gradients stay the
    reference's either way."""
    monkeypatch.setattr(tabulated, "BACKWARD_SLICE", 8)
    g, table, xs, gu = _setup(device)
    num_edges = g["src"].numel()
    assert tabulated.backward_slice(32, num_edges) == 8
    sliced = _run(KERNEL, g["pos"], xs, g, table, gu)
    monkeypatch.setattr(tabulated, "PARTIAL_ROWS_BYTES", 4 * 4 * num_edges - 1)
    assert tabulated.backward_slice(32, num_edges) == 32
    whole = _run(KERNEL, g["pos"], xs, g, table, gu)
    reference = _run(REFERENCE, g["pos"].double(), xs.double(), g, table, gu)
    for a, b, r in zip(sliced, whole, reference, strict=True):
        assert rel_err(a, r) < 1e-5 and rel_err(b, r) < 1e-5


@pytest.mark.parametrize(("symmetric", "slots_are_edges"),
                         [(False, True), (True, False), (True, True)])
def test_symmetric_walk_and_identity_slots(device, symmetric, slots_are_edges):
    """On a symmetric graph whose destination layout is the identity (no edge dropped),
    the backward's walk of the destination layout and the skipped permutation give the
    reference's results, and the same features and gradients as the general walk."""
    g = make_graph(device=device, seed=4, drop=0)
    _, table, xs, gu = _setup(device)
    n_real = int(g["num_edges"][0])
    assert torch.equal(g["csr"].dst_perm[:n_real].long(), torch.arange(n_real, device=device))

    def conv(*args):
        return tabulated_cfconv(*args, symmetric=symmetric, slots_are_edges=slots_are_edges)

    u, gp, gx = _run((edge_distances, conv), g["pos"], xs, g, table, gu)
    ur, gpr, gxr = _run(REFERENCE, g["pos"].double(), xs.double(), g, table, gu)
    assert rel_err(u, ur) < 1e-5 and rel_err(gp, gpr) < 1e-5 and rel_err(gx, gxr) < 1e-5
    general = _run(KERNEL, g["pos"], xs, g, table, gu)
    # the same neighbours in the same order: messages and feature gradients bit for bit;
    # position gradients add the pairs' terms in another order
    assert torch.equal(u, general[0]) and torch.equal(gx, general[2])
    assert rel_err(gp, general[1]) < 1e-6


def _three_blocks(g, table, xs, gu, slots_are_edges, length_grad, prefill=None):
    """Three convolutions chained through ``tanh`` that read one set of lengths, as the
    model's blocks do. Returns the gradients of ``sum(u_2 * gu)`` for positions, ``xs``
    and the lengths."""
    pos = g["pos"].clone().requires_grad_()
    xs = xs.clone().requires_grad_()
    dist = edge_distances(pos, g["src"], g["dst"], g["csr"])
    if prefill is not None:  # rows left over in the buffer: must never reach the result
        length_grad.rows = torch.full(prefill, float("nan"), device=pos.device)
    h = xs
    for _ in range(3):
        u = tabulated_cfconv(dist, h, g["src"], g["dst"], g["csr"], table, symmetric=True,
                             slots_are_edges=slots_are_edges, length_grad=length_grad)
        h = torch.cat([torch.tanh(u), h[u.shape[0]:]])
    return torch.autograd.grad((u * gu).sum(), (pos, xs, dist))


@pytest.mark.parametrize("slots_are_edges", [False, True])
def test_shared_length_gradient_sums_the_blocks_once(device, slots_are_edges):
    """Blocks sharing a `LengthGradient` give the gradients of separate backward passes
    (the sum's order differs: within 1e-6); on a searched graph the rows beyond the last
    segment are never read, so whatever the buffer held there stays out."""
    g = make_graph(device=device, seed=4, drop=0)
    _, table, xs, gu = _setup(device)
    separate = _three_blocks(g, table, xs, gu, slots_are_edges, None)
    num_edges = g["src"].numel()
    shared = tabulated.LengthGradient(3)
    rows = 32 // tabulated.backward_slice(32, num_edges)
    prefill = (3, rows, num_edges) if slots_are_edges else None
    together = _three_blocks(g, table, xs, gu, slots_are_edges, shared, prefill)
    for a, b in zip(together, separate, strict=True):
        assert torch.isfinite(a).all() and rel_err(a, b) < 1e-6
    n_real = int(g["num_edges"][0])
    assert not together[2][n_real:].any() and together[2][:n_real].any()
    assert shared.written == set()  # summed and reset: a second pass starts afresh


def test_rows_too_large_to_share_are_returned_per_block(device, monkeypatch):
    """Above `PARTIAL_ROWS_BYTES` no shared buffer is made: every block returns its own
    single row, and the gradients are those of separate passes."""
    g = make_graph(device=device, seed=4, drop=0)
    _, table, xs, gu = _setup(device)
    separate = _three_blocks(g, table, xs, gu, True, None)
    monkeypatch.setattr(tabulated, "PARTIAL_ROWS_BYTES", 0)
    shared = tabulated.LengthGradient(3)
    together = _three_blocks(g, table, xs, gu, True, shared)
    assert shared.rows is None
    for a, b in zip(together, separate, strict=True):
        assert rel_err(a, b) < 1e-6


def test_shared_length_gradient_refuses_a_block_left_out(device):
    """If a block registered in the forward never ran its backward, the sum would lack its
    rows: the first block's backward refuses instead of returning a wrong gradient."""
    g = make_graph(device=device, seed=4, drop=0)
    _, table, xs, gu = _setup(device)
    shared = tabulated.LengthGradient(2)
    pos = g["pos"].clone().requires_grad_()
    dist = edge_distances(pos, g["src"], g["dst"], g["csr"])
    first = tabulated_cfconv(dist, xs, g["src"], g["dst"], g["csr"], table, length_grad=shared)
    tabulated_cfconv(dist, xs, g["src"], g["dst"], g["csr"], table, length_grad=shared)
    with pytest.raises(RuntimeError, match="must run last"):
        torch.autograd.grad((first * gu).sum(), pos)
    with pytest.raises(RuntimeError, match="one more"):
        tabulated_cfconv(dist, xs, g["src"], g["dst"], g["csr"], table, length_grad=shared)


def test_features_without_gradient_give_the_same_position_gradient(device, monkeypatch):
    """Features that need no gradient (a first block's, computed from the bead types
    alone): the backward skips their gradient and returns the same position gradient."""
    launches = []

    def launch(kernel, config, num_nodes, args):
        if kernel is tabulated._tab_bwd_kernel:
            launches.append(args["XS_GRAD"])
        return real_launch(kernel, config, num_nodes, args)

    real_launch = tabulated._launch
    monkeypatch.setattr(tabulated, "_launch", launch)
    g, table, xs, gu = _setup(device)
    _, gp, _ = _run(KERNEL, g["pos"], xs, g, table, gu)
    pos = g["pos"].clone().requires_grad_()
    u = tabulated_cfconv(edge_distances(pos, g["src"], g["dst"], g["csr"]), xs, g["src"],
                         g["dst"], g["csr"], table)
    (alone,) = torch.autograd.grad((u * gu).sum(), pos)
    assert not xs.requires_grad and torch.equal(alone, gp)
    assert launches == [True, False]


def test_half_precision_features(device):
    g, table, xs, gu = _setup(device, xs_dtype=torch.float16)
    u, gp, gx = _run(KERNEL, g["pos"], xs, g, table, gu)
    ur, gpr, gxr = _run(REFERENCE, g["pos"].double(), xs.double(), g, table,
                        gu)
    assert gx.dtype == torch.float16
    assert rel_err(u, ur) < 1e-5 and rel_err(gp, gpr) < 1e-5
    assert rel_err(gx, gxr) < 1e-3  # rounded to float16 on the way out


def test_position_gradient_finite_differences(device):
    """Kernel FP32 gradient vs central differences of the float64 interpolant."""
    g, table, xs, gu = _setup(device, seed=1)
    _, gp, _ = _run(KERNEL, g["pos"], xs, g, table, gu)
    pos64, xs64, gu64 = g["pos"].double(), xs.double(), gu.double()

    def energy(p):
        dist = edge_distances_reference(p, g["src"], g["dst"], g["csr"])
        u = tabulated_cfconv_reference(dist, xs64, g["src"], g["dst"], g["csr"], table)
        return float((u * gu64).sum())

    assert rel_err(gp, central_differences(energy, pos64)) < 1e-5


def test_padding_and_cutoff_contribute_nothing(device):
    g, table, xs, gu = _setup(device)
    n = g["num_nodes"]
    pos = g["pos"].clone()
    pos[n] = float("nan")  # padding node: never read
    xs[n] = float("nan")
    u, gp, gx = _run(KERNEL, pos, xs, g, table, gu)
    assert torch.isfinite(u).all() and torch.isfinite(gx[:n]).all()
    assert torch.isfinite(gp[:n]).all()
    # identical to the graph without padding slots (same CSR order of the valid edges)
    n_real = int(g["num_edges"][0])
    trimmed = dict(g, src=g["src"][:n_real], dst=g["dst"][:n_real])
    trimmed["csr"] = type(g["csr"])(g["csr"].dst_ptr, g["csr"].dst_perm[:n_real],
                                    g["csr"].src_ptr, g["csr"].src_perm[:n_real])
    u2, gp2, gx2 = _run(KERNEL, g["pos"], xs, trimmed, table, gu)
    assert torch.equal(u, u2) and torch.equal(gx[:n], gx2[:n]) and torch.equal(gp[:n], gp2[:n])
    # the same as the graph without its edges at d >= cutoff (some exist)
    src, dst = trimmed["src"], trimmed["dst"]
    near = (g["pos"][dst] - g["pos"][src]).norm(dim=1) < TABLE_CUTOFF
    assert 0 < int(near.sum()) < near.numel()
    short = dict(g, src=src[near], dst=dst[near])
    short["csr"] = build_csr_reference(short["src"], short["dst"], n)
    u3, gp3, gx3 = _run(KERNEL, g["pos"], xs, short, table, gu)
    for a, b in ((u, u3), (gp[:n], gp3[:n]), (gx[:n], gx3[:n])):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_only_far_edges_give_zero(device):
    g, table, xs, gu = _setup(device)
    real = slice(0, int(g["num_edges"][0]))
    assert (g["pos"][g["dst"][real]] - g["pos"][g["src"][real]]).norm(dim=1).min() > 0.25
    ones = torch.ones(2, table.num_features, dtype=torch.float64, device=device)
    far = build_filter_table(ones, ones, 0.25, 0.25)
    u, gp, gx = _run(KERNEL, g["pos"], xs, g, far, gu)  # every edge has d > 0.25
    assert not u.any() and not gp.any() and not gx.any()


def test_deterministic(device):
    g, table, xs, gu = _setup(device, seed=2)
    a = _run(KERNEL, g["pos"], xs, g, table, gu)
    b = _run(KERNEL, g["pos"], xs, g, table, gu)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_refuses_mismatched_width_and_positions(device):
    g, table, xs, _ = _setup(device)
    dist = edge_distances(g["pos"], g["src"], g["dst"], g["csr"])
    with pytest.raises(ValueError, match="power of two"):
        tabulated_cfconv(dist, xs[:, :16], g["src"], g["dst"], g["csr"], table)
    with pytest.raises(ValueError, match="edge lengths"):
        tabulated_cfconv(g["pos"], xs, g["src"], g["dst"], g["csr"], table)


@pytest.mark.gpu
def test_full_size_tabulated_cfconv():
    """1ENH x 64 benchmark graph (E ~ 1.1M), F = 128, G = 2001: kernel vs float64 reference."""
    from benchmarks.bench_kernels import make_benchmark_graph
    from kernels import build_csr

    graph = make_benchmark_graph(device="cuda")
    n = graph["num_nodes"]
    csr = build_csr(graph["src"], graph["dst"], n)
    table = tabulate_filter(gaussian_filter(128, 10.0, sigma=0.3), 2001, 10.0, "cuda")
    xs = torch.randn(n, 128, device="cuda")
    gu = torch.randn(n, 128, device="cuda")
    g = dict(graph, csr=csr)
    u, gp, gx = _run(KERNEL, graph["pos"], xs, g, table, gu)
    ur, gpr, gxr = _run(REFERENCE, graph["pos"].double(), xs.double(), g,
                        table, gu)
    assert rel_err(u, ur) < 1e-5 and rel_err(gp, gpr) < 1e-5 and rel_err(gx, gxr) < 1e-5
