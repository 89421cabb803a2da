"""Fused PaiNN message block: FP32 values and gradients against the float64 reference,
finite differences, padding and edges beyond the cutoff, 16-bit operands, argument checks;
each with the filter network or its table (``TABLE``)."""

from dataclasses import replace

import pytest
import torch
from kernels_testlib import central_differences, make_graph, radial_specs, rel_err, within_cutoff

from kernels import (
    RadialSpec,
    get_op,
    pack_painn_filter,
    painn_message,
    painn_message_reference,
)
from kernels.radial_basis import radial_reference_terms
from kernels.tabulated import tabulate_filter

OUTPUTS = ("dq", "dmu", "grad_pos", "grad_x", "grad_mu")


def filter_weights(K=8, H=16, seed=1, device="cpu"):
    """Random filter network ``(A [3H, K], a [3H])``."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(3 * H, K, generator=g).to(device) / K**0.5,
            (torch.randn(3 * H, generator=g) * 0.3).to(device))


def painn_filter(spec: RadialSpec, table: bool, K=8, H=16, seed=1, device="cpu"):
    """A random block filter (`filter_weights`) packed, or (``table``) its enveloped filter
    ``w(d) = (e(d) A^T + a) C(d)`` tabulated from float64 at 0.01 A spacing (up to its left
    limit at the cutoff: the identity envelope's jump is the kernels' cutoff test)."""
    A, a = filter_weights(K, H, seed, device)
    if not table:
        return pack_painn_filter(A, a)

    def w(d):
        basis, env = radial_reference_terms(d, spec)
        return (basis @ A.double().T + a.double()) * env[:, None]

    points = round(spec.cutoff_upper / 0.01) + 1
    return tabulate_filter(w, points, spec.cutoff_upper, device=device)


def identity_filter_envelope(spec: RadialSpec) -> RadialSpec:
    """``spec`` with mlcg's identity cutoff on the filter (1 inside the cutoff, 0 beyond)."""
    return RadialSpec.gaussian(spec.centers, spec.widths[0], spec.cutoff_upper,
                               envelope_in_basis=True, envelope_on_filter=False)


def _setup(device, spec_name, H=16, seed=0, **graph_kw):
    g = make_graph(device=device, seed=seed, num_nodes=16, pad=8, **graph_kw)
    specs = radial_specs(device=device)
    spec = identity_filter_envelope(specs["gauss"]) if spec_name == "identity" else specs[
        spec_name]
    gen = torch.Generator().manual_seed(seed + 7)
    n = g["num_nodes"]
    rows = n + 1  # the padding node's row too
    x = torch.randn(rows, 3 * H, generator=gen).to(device)
    mu = torch.randn(rows, 3, H, generator=gen).to(device)
    grads = (torch.randn(n, H, generator=gen).to(device),
             torch.randn(n, 3, H, generator=gen).to(device))
    return g, spec, x, mu, grads


def _run(op, g, pos, x, mu, params, spec, grads, precision="ieee"):
    """``dq``, ``dmu`` and the gradients of ``<dq, gq> + <dmu, gmu>`` w.r.t. ``pos``, ``x``,
    ``mu``."""
    pos, x, mu = (t.clone().requires_grad_() for t in (pos, x, mu))
    dq, dmu = op(pos, x, mu, g["src"], g["dst"], g["csr"], params, spec, precision)
    loss = (dq * grads[0].to(dq.dtype)).sum() + (dmu * grads[1].to(dq.dtype)).sum()
    return (dq.detach(), dmu.detach(), *torch.autograd.grad(loss, (pos, x, mu)))


def _reference(g, x, mu, params, spec, grads):
    return _run(painn_message_reference, g, g["pos"].double(), x.double(), mu.double(), params,
                spec, grads)


@pytest.mark.parametrize("table", [False, True], ids=["network", "table"])
@pytest.mark.parametrize("spec_name,precision,H", [
    ("gauss_env", "ieee", 16), ("expnorm", "tf32x3", 32), ("expnorm_lower", "ieee", 16),
    ("identity", "tf32x3", 16)])
def test_painn_message_fp32_matches_reference(device, spec_name, precision, H, table):
    """Against the float64 reference of the same filter: the packed network's, or the
    table's stored cubic evaluated in float64."""
    g, spec, x, mu, grads = _setup(device, spec_name, H=H)
    params = painn_filter(spec, table, H=H, device=device)
    got = _run(painn_message, g, g["pos"], x, mu, params, spec, grads, precision)
    ref = _reference(g, x, mu, params, spec, grads)
    for name, a, b in zip(OUTPUTS, got, ref, strict=True):
        assert rel_err(a, b) < 1e-5, name
    n = g["num_nodes"]
    assert all(bool((grad[n:] == 0).all()) for grad in got[2:])  # the padding node's rows
    assert float(got[1].abs().max()) > 0.1, "the vector messages must be exercised"


def test_painn_message_tf32_single_product_is_close(device):
    """One TF32 product of rounded operands (10-bit mantissas): 3.5e-4 measured."""
    g, spec, x, mu, grads = _setup(device, "gauss_env", seed=4)
    params = pack_painn_filter(*filter_weights(seed=5, device=device))
    got = _run(painn_message, g, g["pos"], x, mu, params, spec, grads, "tf32")
    ref = _reference(g, x, mu, params, spec, grads)
    for name, a, b in zip(OUTPUTS, got, ref, strict=True):
        assert rel_err(a, b) < 2e-3, name


@pytest.mark.parametrize("dtype,bound", [("fp16", 1e-3), ("bf16", 1e-2)])
def test_painn_message_16bit_operands_match_reference(device, dtype, bound):
    """16-bit filter GEMM operands against the float64 reference of the same rounded
    weights: the error is the rounding of the basis (fp16 1.5e-4, bf16 2.8e-3 measured)."""
    g, spec, x, mu, grads = _setup(device, "expnorm", seed=2)
    params = pack_painn_filter(*filter_weights(seed=3, device=device), dtype=dtype)
    assert params.w.dtype != torch.float32
    got = _run(painn_message, g, g["pos"], x, mu, params, spec, grads)
    ref = _reference(g, x, mu, params, spec, grads)
    for name, a, b in zip(OUTPUTS, got, ref, strict=True):
        assert rel_err(a, b) < bound, name


@pytest.mark.parametrize("table", [False, True], ids=["network", "table"])
def test_painn_message_position_gradient_finite_differences(device, table):
    """Kernel gradient against central differences of the float64 reference (envelope,
    basis and direction derivatives: many edges sit close to the cutoff). With a table, the
    reference evaluates the stored cubic: the kernel's forces are exactly minus the
    gradient of the tabulated energy."""
    g, spec, x, mu, grads = _setup(device, "gauss_env", seed=1)
    params = painn_filter(spec, table, seed=2, device=device)
    gp = _run(painn_message, g, g["pos"], x, mu, params, spec, grads)[2]
    x64, mu64 = x.double(), mu.double()
    gq, gmu = (t.double() for t in grads)

    def energy(p):
        dq, dmu = painn_message_reference(p, x64, mu64, g["src"], g["dst"], g["csr"], params,
                                          spec)
        return float((dq * gq).sum() + (dmu * gmu).sum())

    assert rel_err(gp, central_differences(energy, g["pos"].double())) < 1e-5


@pytest.mark.parametrize("table", [False, True], ids=["network", "table"])
@pytest.mark.parametrize("spec_name", ["gauss", "identity"])
def test_painn_message_padding_and_edges_beyond_the_cutoff_contribute_nothing(device,
                                                                              spec_name,
                                                                              table):
    """Edges in the CSR at or beyond the envelope's radius and padding slots change nothing:
    the same sums and gradients as the graph of the edges within it; NaN padding rows are
    never read. ``identity``: the filter's envelope is 1 up to the cutoff, so only the
    cutoff itself removes the far edges (a table is zero from the cutoff on)."""
    g, spec, x, mu, grads = _setup(device, spec_name, cutoff=8.0, drop=0)  # edges up to 8 Å
    params = painn_filter(spec, table, device=device)
    n = g["num_nodes"]
    pos = g["pos"].clone()
    pos[n] = float("nan")
    x[n] = mu[n] = float("nan")
    got = _run(painn_message, g, pos, x, mu, params, spec, grads)
    assert all(bool(torch.isfinite(t[:n]).all()) for t in got)
    near, lonely = within_cutoff(g, pos, spec.cutoff_upper)
    want = _run(painn_message, near, pos, x, mu, params, spec, grads)
    for name, a, b in zip(OUTPUTS, got, want, strict=True):
        assert rel_err(a[:n], b[:n]) < 1e-6, name
    assert bool((got[0][lonely] == 0).all()) and bool((got[1][lonely] == 0).all())


def test_painn_message_argument_checks(device):
    g, spec, x, mu, _ = _setup(device, "gauss")
    A, a = filter_weights(device=device)
    with pytest.raises(ValueError, match="power of two"):
        pack_painn_filter(A[:36], a[:36])  # H = 12
    with pytest.raises(ValueError, match=r"A \[3H, K\]"):
        pack_painn_filter(A[:47], a[:47])
    with pytest.raises(ValueError, match="require grad"):
        pack_painn_filter(A, a.clone().requires_grad_())
    with torch.no_grad():
        pack_painn_filter(A, a.clone().requires_grad_())  # fine: nothing is recorded
    params = pack_painn_filter(A, a)
    edges = (g["src"], g["dst"], g["csr"], params)
    with pytest.raises(ValueError, match="K=8"):
        painn_message(g["pos"], x, mu, *edges[:3], params, radial_specs(K=16)["gauss"])
    with pytest.raises(ValueError, match="precision"):
        painn_message(g["pos"], x, mu, *edges, spec, precision="fp8")
    with pytest.raises(ValueError, match="float32 x"):
        painn_message(g["pos"], x.double(), mu, *edges, spec)
    with pytest.raises(ValueError, match=r"x must be \[P' >= 16, 3H = 48\]"):
        painn_message(g["pos"], x[:, :32], mu, *edges, spec)
    with pytest.raises(ValueError, match="mu must be"):
        painn_message(g["pos"], x, mu[:, :2], *edges, spec)
    with pytest.raises(ValueError, match="positions must be"):
        painn_message(g["pos"][:5], x, mu, *edges, spec)
    with pytest.raises(ValueError, match="src and dst"):
        painn_message(g["pos"], x, mu, g["src"][:-1], g["dst"][:-1], *edges[2:], spec)
    table = painn_filter(spec, True, device=device)
    with pytest.raises(ValueError, match="table ends at 6.0, the cutoff is 5.0"):
        painn_message(g["pos"], x, mu, *edges[:3], table, radial_specs(cutoff=5.0)["gauss"])
    narrow = painn_filter(spec, True, H=16, device=device)
    narrow = replace(narrow, coeffs01=narrow.coeffs01[..., :40].contiguous(), num_features=40)
    with pytest.raises(ValueError, match="3H columns"):
        painn_message(g["pos"], x, mu, *edges[:3], narrow, spec)
    assert get_op("painn_message", use_triton=False) is painn_message_reference
