"""Fused EGNN edge block: FP32 values and gradients against the float64 reference, finite
differences, padding and edges beyond the cutoff, argument checks; each for both backward
variants (`kernels.egnn_edge.SAVED`: the edge MLP evaluated anew, or its stored
pre-activations), and the two variants against each other."""

import pytest
import torch
from kernels_testlib import central_differences, make_graph, radial_specs, rel_err, within_cutoff

from kernels import RadialSpec, egnn_edge, get_op, pack_edge_mlp
from kernels.edge_distances import edge_distances, edge_distances_reference
from kernels.egnn_edge import SAVED, edge_envelopes, egnn_edge_reference


def edge_weights(K=8, F=16, seed=1, device="cpu"):
    """Random edge-side weights ``(Wr [F, K], wd [F], W2 [F, F], b2 [F])``."""
    g = torch.Generator().manual_seed(seed)
    return tuple(t.to(device) for t in (
        torch.randn(F, K, generator=g) / K**0.5, torch.randn(F, generator=g),
        torch.randn(F, F, generator=g) / F**0.5, torch.randn(F, generator=g) * 0.1))


def _setup(device, spec_name, F=16, seed=0, **graph_kw):
    g = make_graph(device=device, seed=seed, **graph_kw)
    spec = radial_specs(device=device)[spec_name]
    gen = torch.Generator().manual_seed(seed + 7)
    rows = g["num_nodes"] + 1  # the padding node's row too
    xa, xb = (torch.randn(rows, F, generator=gen).to(device) for _ in range(2))
    gu = torch.randn(g["num_nodes"], F, generator=gen).to(device)
    return g, spec, xa, xb, gu


def _lengths(op, g, pos):
    """The edge lengths ``op`` takes: the fused op's from `edge_distances`, the reference's
    from its reference (autograd, any dtype)."""
    lengths = edge_distances if op is egnn_edge else edge_distances_reference
    return lengths(pos, g["src"], g["dst"], g["csr"])


def _run(op, g, pos, xa, xb, params, spec, gu, precision="ieee", activation="silu",
         saved="none", **kw):
    """``u`` and the gradients of ``<u, gu>`` w.r.t. ``pos`` (through the edge lengths),
    ``xa``, ``xb``."""
    pos, xa, xb = (t.clone().requires_grad_() for t in (pos, xa, xb))
    u = op(_lengths(op, g, pos), xa, xb, g["src"], g["dst"], g["csr"], params, spec,
           precision, activation, saved, **kw)
    grads = torch.autograd.grad((u * gu.to(u.dtype)).sum(), (pos, xa, xb))
    return (u.detach(), *grads)


@pytest.mark.parametrize("saved", SAVED)
@pytest.mark.parametrize("spec_name,precision,activation,F", [
    ("gauss_env", "ieee", "silu", 16), ("expnorm", "tf32x3", "silu", 32),
    ("gauss", "tf32x3", "tanh", 16), ("expnorm_lower", "ieee", "tanh", 16)])
def test_egnn_edge_fp32_matches_reference(device, spec_name, precision, activation, F, saved):
    g, spec, xa, xb, gu = _setup(device, spec_name, F=F)
    params = pack_edge_mlp(*edge_weights(F=F, device=device))
    got = _run(egnn_edge, g, g["pos"], xa, xb, params, spec, gu, precision, activation, saved)
    ref = _run(egnn_edge_reference, g, g["pos"].double(), xa.double(), xb.double(), params,
               spec, gu, activation=activation)
    for name, a, b in zip(("u", "grad_pos", "grad_xa", "grad_xb"), got, ref, strict=True):
        assert rel_err(a, b) < 1e-5, name
    n = g["num_nodes"]
    assert all(bool((grad[n:] == 0).all()) for grad in got[1:])  # the padding node's rows


@pytest.mark.parametrize("saved", SAVED)
@pytest.mark.parametrize("dtype,bound", [("fp16", 1e-3), ("bf16", 1e-2)])
def test_egnn_edge_16bit_operands_match_reference(device, dtype, bound, saved):
    """16-bit GEMM operands against the float64 reference of the same rounded weights: the
    error is the rounding of the activations (fp16 ~1e-4, bf16 ~3e-3 measured)."""
    g, spec, xa, xb, gu = _setup(device, "gauss_env", seed=2, shuffle=True)  # a permutation
    params = pack_edge_mlp(*edge_weights(seed=3, device=device), dtype=dtype)
    assert params.w2.dtype != torch.float32
    got = _run(egnn_edge, g, g["pos"], xa, xb, params, spec, gu, saved=saved)
    ref = _run(egnn_edge_reference, g, g["pos"].double(), xa.double(), xb.double(), params,
               spec, gu)
    for name, a, b in zip(("u", "grad_pos", "grad_xa", "grad_xb"), got, ref, strict=True):
        assert rel_err(a, b) < bound, name


@pytest.mark.parametrize("saved", SAVED)
def test_egnn_edge_position_gradient_finite_differences(device, saved):
    """Kernel gradient against central differences of the float64 reference (envelope,
    basis and d² derivatives: many edges sit close to the cutoff)."""
    g, spec, xa, xb, gu = _setup(device, "gauss_env", seed=1)
    params = pack_edge_mlp(*edge_weights(seed=2, device=device))
    _, gp, _, _ = _run(egnn_edge, g, g["pos"], xa, xb, params, spec, gu, saved=saved)
    xa64, xb64, gu64 = xa.double(), xb.double(), gu.double()

    def energy(p):
        u = egnn_edge_reference(_lengths(egnn_edge_reference, g, p), xa64, xb64, g["src"],
                                g["dst"], g["csr"], params, spec)
        return float((u * gu64).sum())

    assert rel_err(gp, central_differences(energy, g["pos"].double())) < 1e-5


@pytest.mark.parametrize("saved", SAVED)
def test_egnn_edge_padding_and_edges_beyond_the_cutoff_contribute_nothing(device, saved):
    """Edges in the CSR at or beyond the envelope's radius and padding slots change nothing:
    the same sums and gradients as the graph of the edges within it; NaN padding rows are
    never read."""
    g, spec, xa, xb, gu = _setup(device, "gauss", cutoff=8.0, drop=0)  # edges up to 8 Å
    params = pack_edge_mlp(*edge_weights(device=device))
    n = g["num_nodes"]
    pos = g["pos"].clone()
    pos[n] = float("nan")
    xa[n] = xb[n] = float("nan")
    got = _run(egnn_edge, g, pos, xa, xb, params, spec, gu, saved=saved)
    assert all(bool(torch.isfinite(t[:n]).all()) for t in got)
    near, lonely = within_cutoff(g, pos, spec.cutoff_upper)
    want = _run(egnn_edge, near, pos, xa, xb, params, spec, gu, saved=saved)
    for a, b in zip(got, want, strict=True):
        assert rel_err(a[:n], b[:n]) < 1e-6
    assert bool((got[0][lonely] == 0).all())  # nodes whose every edge is beyond the cutoff


@pytest.mark.parametrize("precision,dtype", [("tf32x3", "fp32"), ("tf32", "fp32"),
                                             ("ieee", "fp32"), ("ieee", "fp16")])
def test_egnn_edge_stored_activations_agree_with_recomputing(device, precision, dtype):
    """Both backward variants on one graph with padding and edges beyond the cutoff: the
    same forward; with FP32 operands the same destination-layout terms (``grad_xa``,
    ``grad_pos``: the stored ``z1``, ``z2`` are those the recomputing pass evaluates) and
    ``grad_xb`` to round-off (other sums). With 16-bit operands ``z1``, ``z2`` are stored
    in the GEMM dtype, so the gradients differ by their rounding (fp16: 1.9e-4 measured),
    within the bound of the 16-bit reference tests. Without a gradient to take nothing is
    stored, same values."""
    g, spec, xa, xb, gu = _setup(device, "expnorm", seed=4, cutoff=8.0, drop=2)
    params = pack_edge_mlp(*edge_weights(seed=5, device=device), dtype=dtype)
    recomputed, stored = (_run(egnn_edge, g, g["pos"], xa, xb, params, spec, gu, precision,
                               saved=saved) for saved in SAVED)
    assert rel_err(stored[0], recomputed[0]) < 1e-6, "u"
    bounds = (1e-6, 1e-6, 1e-6) if dtype == "fp32" else (1e-3, 1e-3, 1e-3)
    for name, a, b, bound in zip(("grad_pos", "grad_xa", "grad_xb"), recomputed[1:],
                                 stored[1:], bounds, strict=True):
        assert rel_err(b, a) < bound, name
    with torch.no_grad():
        u = egnn_edge(_lengths(egnn_edge, g, g["pos"]), xa, xb, g["src"], g["dst"], g["csr"],
                      params, spec, precision, saved="activations")
    assert torch.equal(u, recomputed[0])


@pytest.mark.parametrize("saved", SAVED)
def test_egnn_edge_sorted_layout_gives_the_same_values(device, saved):
    """A destination layout whose permutation is the identity over its segments (a searched
    graph's; here the real edges come sorted by destination, padding after them): with
    ``sorted_edges`` the kernels skip reading it and give the same values (to the order of
    the sums: on a GPU the autotuner may tile the two variants differently), and the
    envelope passed in is the one computed otherwise."""
    g, spec, xa, xb, gu = _setup(device, "gauss_env", seed=3)
    ptr, perm = g["csr"].dst_ptr, g["csr"].dst_perm
    assert torch.equal(perm[: int(ptr[-1])].long(), torch.arange(int(ptr[-1]), device=device))
    params = pack_edge_mlp(*edge_weights(seed=4, device=device))
    envelope = edge_envelopes(_lengths(egnn_edge, g, g["pos"]), spec)
    plain = _run(egnn_edge, g, g["pos"], xa, xb, params, spec, gu, saved=saved)
    fast = _run(egnn_edge, g, g["pos"], xa, xb, params, spec, gu, saved=saved,
                sorted_edges=True, envelope=envelope)
    for a, b in zip(plain, fast, strict=True):
        assert rel_err(b, a) < 1e-6


def test_edge_envelopes_rows_start_16_byte_aligned(device):
    """For any edge count, so that a rebuilt neighbour list never changes the alignment the
    edge kernels were compiled and autotuned for; values as the reference's envelope."""
    spec = radial_specs(device=device)["gauss_env"]
    for E in (5, 6, 7, 8):
        dist = torch.linspace(0.5, spec.cutoff_upper + 1.0, E, device=device)
        env = edge_envelopes(dist, spec)
        assert env.shape == (2, E) and all(row.data_ptr() % 16 == 0 for row in env)
        d = dist.double().requires_grad_()
        c = torch.where(d < spec.cutoff_upper,
                        0.5 * (torch.cos(torch.pi * d / spec.cutoff_upper) + 1.0), 0.0)
        (dc,) = torch.autograd.grad(c.sum(), d)
        assert rel_err(env[0], c.detach()) < 1e-6 and rel_err(env[1], dc) < 1e-5


def test_egnn_edge_argument_checks(device):
    g, spec, xa, xb, _ = _setup(device, "gauss")
    Wr, wd, W2, b2 = edge_weights(device=device)
    with pytest.raises(ValueError, match="power of two"):
        pack_edge_mlp(Wr[:12], wd[:12], W2[:12, :12], b2[:12])
    params = pack_edge_mlp(Wr, wd, W2, b2)
    args = (_lengths(egnn_edge, g, g["pos"]), xa, xb, g["src"], g["dst"], g["csr"], params)
    with pytest.raises(ValueError, match="K=8"):
        egnn_edge(*args, radial_specs(K=16, device=device)["gauss"])
    with pytest.raises(ValueError, match="activation"):
        egnn_edge(*args, spec, activation="relu")
    no_env = RadialSpec.gaussian(spec.centers, spec.widths[0], spec.cutoff_upper,
                                 envelope_on_filter=False)
    with pytest.raises(ValueError, match="envelope"):
        egnn_edge(*args, no_env)
    with pytest.raises(ValueError, match="saved"):
        egnn_edge(*args, spec, saved="everything")
    with pytest.raises(ValueError, match="require grad"):
        pack_edge_mlp(Wr, wd, W2, b2.clone().requires_grad_())
    with torch.no_grad():
        pack_edge_mlp(Wr, wd, W2, b2.clone().requires_grad_())  # fine: nothing is recorded
    assert get_op("egnn_edge", use_triton=False) is egnn_edge_reference
