"""Flash message passing: the whole continuous-filter convolution of one block in one kernel.

For one interaction block and every edge ``e = (src j -> dst i)``::

    d_e = |r_i - r_j|,  e(d) = basis (K),  C(d) = envelope          (kernels.radial_basis)
    W_e = (A2 tanh(A1 e(d_e) + a1) + b2) * C(d_e)                   [F]   filter MLP
    u_i = sum_{e: dst_e = i} xs[j] * W_e                             [N, F]

Forward (`_cfconv_fwd_kernel`): one program owns ``BLOCK_N`` consecutive destination nodes,
i.e. one contiguous range of the destination-grouped CSR, and streams its edges in tiles of
``BLOCK_E``. Per tile, on chip only: gather positions, distance, envelope, basis
``[BLOCK_E, KP]``, the two filter GEMMs on tensor cores (``tl.dot``; FP32 operands as
``tf32x3``/``ieee``, or 16-bit operands with FP32 accumulation), ``tanh``, envelope, the
product with the gathered ``xs[src]`` rows, and the reduction onto the owned destinations
as one more tensor-core product ``onehot[BLOCK_N, BLOCK_E] @ msg[BLOCK_E, F]`` (the one-hot
matrix marks which owned node each edge of the tile belongs to). The ``[BLOCK_N, F]``
accumulator is written once: exclusive ownership, no atomics, deterministic. Nothing of
size E x K or E x F is ever written.

Backward (`_cfconv_bwd_kernel`), given ``grad_u [N, F]``: one program owns ``BLOCK_N``
consecutive *source* nodes of the source-grouped CSR and, recomputing ``W_e`` per tile,
produces

* ``grad_xs[j] = sum_{e: src_e = j} grad_u[dst_e] * W_e`` (same one-hot reduction, written
  once per owned node), and
* ``g_e = dE/dd_e = sum_f s_ef dW_ef/dd`` with ``s_e = grad_u[dst_e] * xs[j]``. Since
  ``dW/dd = C A2 (tanh' * A1 e'(d)) + C' (A2 t + b2)`` (``e'`` includes the derivative of an
  envelope inside the basis, and ``C'`` the filter envelope's), it is evaluated as
  ``g_e = C <A2^T s_e, tanh' * (A1 e')> + C' <s_e, A2 t + b2>``: two extra tensor-core GEMMs
  per tile (``A1 e'`` and ``A2^T s``), one FP32 scalar per edge written to HBM.

Then `kernels.segment_reduce.edge_grad_to_positions` sums ``g_e (r_i - r_j)/d`` over both
CSRs into position gradients (no atomics). Weights and basis parameters get no gradient.

Padding: edges outside every CSR segment (``src``/``dst`` outside ``[0, num_nodes)`` or
beyond ``num_edges``, see `kernels.csr`) are never visited, so they contribute nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels._triton import (
    autotune,
    check_no_grad,
    mma,
    pick_configs,
    tanh_f32,
    tl,
    torch_to_tl_dtype,
    triton,
)
from kernels.csr import GraphCSR, valid_edge_mask
from kernels.quantize import DTYPES, PackedLinear, pack_linear
from kernels.radial_basis import (
    RadialSpec,
    edge_envelope,
    edge_vector,
    radial_features,
    radial_reference_terms,
    reference_distances,
)
from kernels.segment_reduce import edge_grad_to_positions

__all__ = ["FilterParams", "pack_filter", "cfconv", "cfconv_reference"]


@dataclass(frozen=True)
class FilterParams:
    """The filter network of one block, packed (`kernels.quantize.pack_linear`).

    Attributes
    ----------
    lin1 : PackedLinear
        ``A1 [F, K]``, ``a1 [F]`` (K padded to ``KP``, a power of two >= 16).
    lin2 : PackedLinear
        ``A2 [F, F]``, optional ``b2 [F]`` (zeros when absent).
    """

    lin1: PackedLinear
    lin2: PackedLinear

    @property
    def dtype(self) -> torch.dtype:
        return self.lin1.dtype


def pack_filter(A1, a1, A2, b2=None, dtype=torch.float32, spec: RadialSpec | None = None,
                calib_dist=None) -> FilterParams:
    """Pack a filter network ``W = A2 tanh(A1 e + a1) + b2`` for `cfconv`.

    Parameters
    ----------
    A1 : Tensor [F, K]; a1 : Tensor [F]; A2 : Tensor [F, F]; b2 : Tensor [F], optional
        Weights (detached: the fused op returns no weight gradients).
    dtype : torch.dtype or {"fp32", "fp16", "bf16"}
        Operand type of the two GEMMs (FP32 accumulation in every case).
    spec : RadialSpec, optional
        Needed for 16-bit packing: calibration inputs are the basis at ``calib_dist``
        (layer 1) and the hidden activations they produce (layer 2).
    calib_dist : Tensor, float [M], optional
        Calibration distances; default 2048 points evenly over ``[0, cutoff_upper]``.
    """
    dtype = DTYPES.get(dtype, dtype)
    F = A1.shape[0]
    if F < 16 or F & (F - 1) or A2.shape != (F, F):
        raise ValueError(f"cfconv needs F a power of two >= 16 and A2 [F, F]; got A1 "
                         f"{tuple(A1.shape)}, A2 {tuple(A2.shape)}")
    calib1 = calib2 = None
    if dtype != torch.float32:
        if spec is None:
            raise ValueError("16-bit filter packing needs the RadialSpec for calibration")
        if calib_dist is None:
            calib_dist = torch.linspace(0.0, spec.cutoff_upper, 2048, device=A1.device)
        with torch.no_grad():
            calib1, _ = radial_reference_terms(calib_dist.float(), spec)
            calib2 = torch.tanh(calib1 @ A1.detach().float().t() + a1.detach().float())
    return FilterParams(pack_linear(A1, a1, dtype, calib1), pack_linear(A2, b2, dtype, calib2))


@triton.jit
def _filter_chunk(w1_ptr, s1_ptr, b1_ptr, w2_ptr, c: tl.constexpr, F: tl.constexpr,
                  KP: tl.constexpr, FC: tl.constexpr):
    """Hidden units ``[c*FC, (c+1)*FC)`` of the filter: ``w1 [KP, FC]``, ``s1``, ``b1`` [FC]
    and the matching rows ``w2 [FC, F]`` of the packed second layer (``Q^T``)."""
    h = c * FC + tl.arange(0, FC)
    k = tl.arange(0, KP)
    w1 = tl.load(w1_ptr + k[:, None] * F + h[None, :])
    w2 = tl.load(w2_ptr + h[:, None] * F + tl.arange(0, F)[None, :])
    return w1, tl.load(s1_ptr + h), tl.load(b1_ptr + h), w2


@triton.jit
def _owned_range(ptr_ptr, num_nodes, BLOCK_N: tl.constexpr):
    """First node, CSR range [start, end) and per-node segment ends of this program's nodes."""
    n0 = tl.program_id(0) * BLOCK_N
    nodes = n0 + tl.arange(0, BLOCK_N)
    start = tl.load(ptr_ptr + n0)
    end = tl.load(ptr_ptr + tl.minimum(n0 + BLOCK_N, num_nodes))
    seg_end = tl.load(ptr_ptr + nodes + 1, mask=nodes < num_nodes, other=0)
    seg_end = tl.where(nodes < num_nodes, seg_end, end)
    return n0, nodes, start, end, seg_end


@triton.jit
def _tile_owner(p, pmask, seg_end, BLOCK_N: tl.constexpr):
    """Local owner index [BLOCK_E] of CSR slots ``p`` and the one-hot [BLOCK_N, BLOCK_E]."""
    local = tl.sum((p[:, None] >= seg_end[None, :]).to(tl.int32), axis=1)
    onehot = (local[None, :] == tl.arange(0, BLOCK_N)[:, None]) & pmask[None, :]
    return local, onehot.to(tl.float32)


def _cfg(n, e, fc, w, stages=1):
    return triton.Config({"BLOCK_N": n, "BLOCK_E": e, "FC": fc}, num_warps=w, num_stages=stages)


def _prune(configs, named_args, **kwargs):
    """Keep configs whose hidden chunk divides F; IEEE FP32 (CUDA-core FMA) gets one."""
    F = named_args.get("F", kwargs.get("F"))
    ok = [cfg for cfg in configs if F % cfg.kwargs["FC"] == 0] or [
        _cfg(configs[0].kwargs["BLOCK_N"], configs[0].kwargs["BLOCK_E"], F, configs[0].num_warps)]
    return ok[:1] if kwargs.get("PREC", named_args.get("PREC")) == "ieee" else ok


# Candidates from an H200 sweep (docs/decisions/0006-tabulated-filter-fast-path.md): these
# kernels are register-bound, so small edge tiles, one pipeline stage (no multi-buffered
# weight tiles) and 4 warps win.
_FWD_CONFIGS = pick_configs(
    [_cfg(16, 32, 128, 4), _cfg(16, 16, 128, 4), _cfg(16, 32, 64, 4)],
    _cfg(16, 16, 16, 4),
)
_BWD_CONFIGS = pick_configs(
    [_cfg(16, 32, 128, 4), _cfg(16, 16, 128, 4), _cfg(16, 128, 64, 8), _cfg(16, 64, 64, 4)],
    _cfg(16, 16, 16, 4),
)


@autotune(_FWD_CONFIGS, ["num_nodes", "F", "KP", "PREC"],
          prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _cfconv_fwd_kernel(pos_ptr, xs_ptr, src_ptr, ptr_ptr, perm_ptr, w1_ptr, s1_ptr, b1_ptr,
                       w2_ptr, s2_ptr, b2_ptr, out_ptr, num_nodes, mu_ptr, gamma_ptr, K, alpha,
                       basis_lower, env_a, env_b, env_upper, env_lower,
                       EXP_NORMAL: tl.constexpr, ENV_LOWER: tl.constexpr,
                       ENV_IN_BASIS: tl.constexpr, ENV_ON_FILTER: tl.constexpr,
                       F: tl.constexpr, KP: tl.constexpr, DT: tl.constexpr,
                       PREC: tl.constexpr, RED_PREC: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_E: tl.constexpr, FC: tl.constexpr):
    n0, nodes, start, end, seg_end = _owned_range(ptr_ptr, num_nodes, BLOCK_N)
    f = tl.arange(0, F)
    s2 = tl.load(s2_ptr + f)
    b2 = tl.load(b2_ptr + f)
    acc = tl.zeros([BLOCK_N, F], dtype=tl.float32)
    for p0 in range(start, end, BLOCK_E):
        p = p0 + tl.arange(0, BLOCK_E)
        pmask = p < end
        e = tl.load(perm_ptr + p, mask=pmask, other=0).to(tl.int64)
        j = tl.load(src_ptr + e, mask=pmask, other=0)
        local, onehot = _tile_owner(p, pmask, seg_end, BLOCK_N)
        _, _, _, d = edge_vector(pos_ptr, n0 + local, j, pmask)
        c, dc = edge_envelope(d, env_a, env_b, env_upper, env_lower, ENV_LOWER, ENV_IN_BASIS,
                              ENV_ON_FILTER)
        basis, _ = radial_features(d, c, dc, mu_ptr, gamma_ptr, K, alpha, basis_lower, KP,
                                   EXP_NORMAL, ENV_IN_BASIS)
        w = tl.zeros([BLOCK_E, F], dtype=tl.float32)
        for ch in tl.static_range(F // FC):
            w1, s1, b1, w2 = _filter_chunk(w1_ptr, s1_ptr, b1_ptr, w2_ptr, ch, F, KP, FC)
            t = tanh_f32(mma(basis, w1, DT, PREC) * s1[None, :] + b1[None, :])
            w += mma(t, w2, DT, PREC)
        w = w * s2[None, :] + b2[None, :]
        if ENV_ON_FILTER:
            w = w * c[:, None]
        x = tl.load(xs_ptr + j.to(tl.int64)[:, None] * F + f[None, :], mask=pmask[:, None],
                    other=0.0)
        acc += tl.dot(onehot, x * w, input_precision=RED_PREC)
    tl.store(out_ptr + nodes.to(tl.int64)[:, None] * F + f[None, :], acc,
             mask=(nodes < num_nodes)[:, None])


@autotune(_BWD_CONFIGS, ["num_nodes", "F", "KP", "PREC"],
          prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _cfconv_bwd_kernel(pos_ptr, xs_ptr, gu_ptr, dst_ptr, ptr_ptr, perm_ptr, w1_ptr, s1_ptr,
                       b1_ptr, w2_ptr, s2_ptr, b2_ptr, gxs_ptr, g_ptr, num_nodes, mu_ptr,
                       gamma_ptr, K, alpha, basis_lower, env_a, env_b, env_upper, env_lower,
                       EXP_NORMAL: tl.constexpr, ENV_LOWER: tl.constexpr,
                       ENV_IN_BASIS: tl.constexpr, ENV_ON_FILTER: tl.constexpr,
                       F: tl.constexpr, KP: tl.constexpr, DT: tl.constexpr,
                       PREC: tl.constexpr, RED_PREC: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_E: tl.constexpr, FC: tl.constexpr):
    n0, nodes, start, end, seg_end = _owned_range(ptr_ptr, num_nodes, BLOCK_N)
    f = tl.arange(0, F)
    s2 = tl.load(s2_ptr + f)
    b2 = tl.load(b2_ptr + f)
    acc = tl.zeros([BLOCK_N, F], dtype=tl.float32)
    for p0 in range(start, end, BLOCK_E):
        p = p0 + tl.arange(0, BLOCK_E)
        pmask = p < end
        e = tl.load(perm_ptr + p, mask=pmask, other=0).to(tl.int64)
        i = tl.load(dst_ptr + e, mask=pmask, other=0)
        local, onehot = _tile_owner(p, pmask, seg_end, BLOCK_N)
        j = n0 + local
        _, _, _, d = edge_vector(pos_ptr, i, j, pmask)
        c, dc = edge_envelope(d, env_a, env_b, env_upper, env_lower, ENV_LOWER, ENV_IN_BASIS,
                              ENV_ON_FILTER)
        basis, dbasis = radial_features(d, c, dc, mu_ptr, gamma_ptr, K, alpha, basis_lower, KP,
                                        EXP_NORMAL, ENV_IN_BASIS)
        gu = tl.load(gu_ptr + i.to(tl.int64)[:, None] * F + f[None, :], mask=pmask[:, None],
                     other=0.0)
        x = tl.load(xs_ptr + j.to(tl.int64)[:, None] * F + f[None, :], mask=pmask[:, None],
                    other=0.0)
        s = gu * x
        sq = s * s2[None, :]
        if DT != tl.float32:  # noqa: SIM300 - 16-bit: keep rows in the best-resolved range
            rmax = tl.max(tl.abs(sq), axis=1)
            rmax = tl.where(rmax > 0, rmax, 1.0)
            sq = sq / rmax[:, None]
        else:
            rmax = tl.full([BLOCK_E], 1.0, tl.float32)
        wpre = tl.zeros([BLOCK_E, F], dtype=tl.float32)
        g = tl.zeros([BLOCK_E], dtype=tl.float32)
        for ch in tl.static_range(F // FC):
            w1, s1, b1, w2 = _filter_chunk(w1_ptr, s1_ptr, b1_ptr, w2_ptr, ch, F, KP, FC)
            t = tanh_f32(mma(basis, w1, DT, PREC) * s1[None, :] + b1[None, :])
            dz = mma(dbasis, w1, DT, PREC) * s1[None, :]
            wpre += mma(t, w2, DT, PREC)
            q = mma(sq, tl.trans(w2), DT, PREC)  # (A2^T s) restricted to these hidden units
            g += tl.sum(q * (1.0 - t * t) * dz, axis=1)
        g = g * rmax
        wpre = wpre * s2[None, :] + b2[None, :]
        if ENV_ON_FILTER:
            g = g * c + tl.sum(s * wpre, axis=1) * dc
            wpre = wpre * c[:, None]
        acc += tl.dot(onehot, gu * wpre, input_precision=RED_PREC)
        tl.store(g_ptr + e, g, mask=pmask)
    tl.store(gxs_ptr + nodes.to(tl.int64)[:, None] * F + f[None, :], acc,
             mask=(nodes < num_nodes)[:, None])


def _kernel_args(filt: FilterParams, spec: RadialSpec, precision: str, F: int) -> dict:
    l1, l2 = filt.lin1, filt.lin2
    if l1.in_features != spec.num_basis:
        raise ValueError(f"filter expects K={l1.in_features}, basis has {spec.num_basis}")
    check_no_grad("cfconv", A1=l1.weight_t, a1=l1.bias, A2=l2.weight_t, b2=l2.bias)
    if l1.weight_t.shape[1] != F or l2.weight_t.shape != (F, F):
        raise ValueError(f"filter width {l1.weight_t.shape[1]} does not match xs width {F}")
    return dict(w1_ptr=l1.weight_t, s1_ptr=l1.scale, b1_ptr=l1.bias, w2_ptr=l2.weight_t,
                s2_ptr=l2.scale, b2_ptr=l2.bias, F=F, KP=l1.weight_t.shape[0],
                DT=torch_to_tl_dtype(filt.dtype), PREC=precision,
                RED_PREC="ieee" if precision == "ieee" else "tf32x3", **spec.kernel_args())


def _grid(meta):
    return (triton.cdiv(meta["num_nodes"], meta["BLOCK_N"]),)


class _CFConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pos, xs, src, dst, csr, filt, spec, precision):
        pos, xs = pos.contiguous(), xs.contiguous()
        n, F = csr.num_nodes, xs.shape[1]
        args = _kernel_args(filt, spec, precision, F)
        out = torch.empty(n, F, dtype=torch.float32, device=xs.device)
        if n:
            _cfconv_fwd_kernel[_grid](pos, xs, src, csr.dst_ptr, csr.dst_perm, out_ptr=out,
                                      num_nodes=n, **args)
        ctx.save_for_backward(pos, xs, src, dst, *csr)
        ctx.args = args
        return out

    @staticmethod
    def backward(ctx, grad_u):
        pos, xs, src, dst, *csr = ctx.saved_tensors
        csr = GraphCSR(*csr)
        n = csr.num_nodes
        grad_xs = torch.zeros_like(xs)
        g = torch.empty(src.numel(), dtype=torch.float32, device=xs.device)
        if n:
            _cfconv_bwd_kernel[_grid](pos, xs, grad_u.contiguous().float(), dst, csr.src_ptr,
                                      csr.src_perm, gxs_ptr=grad_xs, g_ptr=g, num_nodes=n,
                                      **ctx.args)
        grad_pos = edge_grad_to_positions(g, pos, src, dst, csr)
        return grad_pos, grad_xs, None, None, None, None, None, None


def cfconv(pos, xs, src, dst, csr: GraphCSR, filt: FilterParams, spec: RadialSpec,
           precision: str = "tf32x3"):
    """Fused continuous-filter convolution of one interaction block (Triton).

    Parameters
    ----------
    pos : Tensor, float32 [P, 3]
        Flattened positions, ``P >= csr.num_nodes`` (extra rows, e.g. a padding node, are
        ignored and get zero gradient). May require grad.
    xs : Tensor, float32 [P', F]
        ``lin1(h)``, ``P' >= csr.num_nodes``; F a power of two >= 16. May require grad.
    src, dst : Tensor, int64 [E]
        Edge endpoints (message ``src -> dst``).
    csr : GraphCSR
        Both CSR layouts of these edges (`kernels.csr.build_csr`); padding edges are in no
        segment and contribute nothing.
    filt : FilterParams
        Packed filter network (`pack_filter`); its dtype selects FP32 or W16A16 GEMMs.
    spec : RadialSpec
        Basis and envelope.
    precision : {"tf32x3", "ieee"}
        FP32 GEMM mode (ignored by 16-bit filters; their FP32 one-hot reduction uses
        tf32x3). ``"tf32"`` is accepted but is not accurate enough for forces.

    Returns
    -------
    Tensor, float32 [csr.num_nodes, F]
        ``u_i = sum_{e: dst_e = i} xs[src_e] * W_e``. Gradients flow to ``pos`` and ``xs``
        only (recomputing the filter; see the module docstring); weights, biases and basis
        parameters get none.
    """
    return _CFConv.apply(pos, xs, src, dst, csr, filt, spec, precision)


def cfconv_reference(pos, xs, src, dst, csr: GraphCSR, filt: FilterParams, spec: RadialSpec,
                     precision: str = "ieee"):
    """PyTorch reference of `cfconv` (materialises E x F; computes in ``pos.dtype``).

    Uses the filter's dequantized weights (``diag(s) Q``, exact for FP32 packing) and plain
    autograd, so it also differentiates float64 inputs for finite-difference checks.
    """
    valid = valid_edge_mask(csr)
    n = csr.num_nodes
    dtype = pos.dtype
    dist = reference_distances(pos, src, dst, valid)
    basis, env = radial_reference_terms(dist, spec)
    w1, b1 = (t.to(dtype) for t in filt.lin1.dequantized())
    w2, b2 = (t.to(dtype) for t in filt.lin2.dequantized())
    w = (torch.tanh(basis @ w1.t() + b1) @ w2.t() + b2) * env[:, None]
    msg = xs.to(dtype)[torch.where(valid, src, 0)] * w * valid[:, None]
    out = torch.zeros(n + 1, xs.shape[1], dtype=dtype, device=xs.device)
    return out.index_add(0, torch.where(valid, dst, n), msg)[:n]
