"""Fused PaiNN message block: distance, direction, basis, envelope, filter and the sums of
scalar and vector messages in one kernel.

For one PaiNN interaction block and every edge ``e = (src j -> dst i)``::

    r_e   = r_i - r_j,   d_e = sqrt(|r_e|^2 + 1e-16) - 1e-8,   n_e = r_e / d_e
    w_e   = (e(d_e) A^T + a) * C(d_e)                                       [3H]
    m_e   = w_e * x[j] = (dq_e, dmu^R_e, dmu^mu_e)                          3 x [H]
    dq_i  = sum_{e: dst_e = i} dq_e                                         [N, H]
    dmu_i = sum_{e: dst_e = i} dmu^R_e n_e + dmu^mu_e mu[j]                 [N, 3, H]

with ``e(d)`` the radial basis (K functions, `kernels.radial_basis`), ``A [3H, K]``, ``a``
the filter network (mlcg's ``filter_network``, one ``Linear``), ``C`` the filter envelope
(the cosine of `RadialSpec.envelope_on_filter`, else 1 inside the cutoff and 0 at and beyond
it), ``x = context_net(q) [N, 3H]`` (a per-node MLP made before the kernel) and ``mu
[N, 3, H]`` the vector features. ``d`` is mlcg's ``safe_norm``, as in
`workbench.model.painn`. The residual sums ``q + dq``, ``mu + dmu`` stay outside.

Forward (`_message_fwd_kernel`): one program owns one destination node, one segment of the
destination-grouped CSR, and streams the segment's edges in tiles of ``BLOCK_E``. Per tile,
on chip only: gather positions and the rows ``x[j]``, ``mu[j]``, distance, direction,
envelope, basis ``[BLOCK_E, KP]``, the filter GEMM (three ``tl.dot`` of ``[BLOCK_E, KP] x
[KP, H]``, one per channel block, FP32 accumulation; FP32 operands, or float16 / bfloat16
operands with the weights stored so), and the tile's messages summed into FP32 register
accumulators ``dq [H]`` and ``dmu [3, H]``, written once: no atomics, deterministic,
nothing of size E x H or E x K in memory.

Backward, given ``gq = dL/d(dq) [N, H]`` and ``gmu = dL/d(dmu) [N, 3, H]``, one launch of
`_message_bwd_kernel` over the source layout (the program owns ``j``; PaiNN's messages
read no feature of their destination, so nothing is summed onto destinations but position
gradients). Per edge, with ``G = (gq[i], sum_c gmu[i, c] n_c, sum_c gmu[i, c] mu[j, c])``::

    grad_x[j]     += G * w_e
    grad_mu[j, c] += gmu[i, c] * dmu^mu_e
    dL/dd_e        = < G * x[j], (e'(d) A^T) C + (e(d) A^T + a) C' >
    dL/dn_e[c]     = < gmu[i, c], dmu^R_e >
    v_e = dL/dr_e  = (dL/dd_e - (n_e . dL/dn_e) / d) r / s + dL/dn_e / d,   s = d + 1e-8

(``e'`` includes the derivative of an envelope inside the basis), the filter GEMMs
recomputed per tile (twice: values and derivatives). The per-edge vectors ``v [E, 3]`` are
the only per-edge memory; `kernels.segment_reduce.edge_vectors_to_positions` sums ``+v``
onto destinations and ``-v`` onto sources (no atomics). Weights and basis parameters get no
gradient.

Table variant (``TABLE``, `painn_message` given a `kernels.tabulated.FilterTable` of 3H
columns instead of the packed network): ``w_e`` depends on the length alone, so both
kernels read it and ``w'`` from the block's cubic Hermite table (`_table_eval`, the
evaluation of `kernels.tabulated`'s kernels; per channel block ``H`` columns of the
``12 * 3H``-byte row pair of the edge's interval) instead of the basis, the envelope and the
filter GEMMs: no ``tl.dot`` at all, forward or backward. Everything else (geometry,
gathers, sums, the per-edge vectors) is the same code. The table holds the enveloped filter
up to its left limit at the cutoff; lanes at or beyond it are masked (they load no table
row and add exactly zero, as mlcg's identity envelope, which jumps to zero there, does).
Forces are exactly minus the gradient of the tabulated energy.

Padding: edges outside every CSR segment (see `kernels.csr`) are never visited; edges at or
beyond the cutoff have ``C = C' = 0``, so they add nothing to the sums or to any gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernels._triton import (
    autotune,
    check_no_grad,
    mma,
    next_pow2,
    pick_configs,
    tl,
    torch_to_tl_dtype,
    triton,
)
from kernels.cfconv import PRECISIONS, _load_weight
from kernels.csr import GraphCSR, valid_edge_mask
from kernels.egnn_edge import _cfg
from kernels.quantize import DTYPES
from kernels.radial_basis import (
    RadialSpec,
    edge_envelope,
    edge_vector,
    radial_features,
    radial_reference_terms,
)
from kernels.segment_reduce import edge_vectors_to_positions
from kernels.tabulated import FilterTable, _table_eval, evaluate_table

__all__ = ["PaiNNFilterParams", "pack_painn_filter", "painn_message", "painn_message_reference",
           "NORM_EPS", "NORM_SHIFT"]

#: mlcg's ``safe_norm``: ``d = sqrt(|r|^2 + NORM_EPS) - NORM_SHIFT``.
NORM_EPS = 1e-16
NORM_SHIFT = 1e-8


@dataclass(frozen=True)
class PaiNNFilterParams:
    """The filter network of one PaiNN interaction block, packed for `painn_message`.

    Attributes
    ----------
    w : Tensor, GEMM dtype [3, KP, H]
        ``A^T`` by channel block: ``w[s, k, h] = A[s H + h, k]`` (block 0 scales ``dq``, 1
        ``dmu^R``, 2 ``dmu^mu``), rows ``k >= K`` zero (``KP`` a power of two >= 16).
    bias : Tensor, float32 [3, H]
        ``a`` by channel block.
    num_basis : int
        K.
    """

    w: torch.Tensor
    bias: torch.Tensor
    num_basis: int

    @property
    def hidden(self) -> int:
        """H, the width of the scalar and vector features."""
        return self.bias.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        """Operand type of the GEMMs (float32, float16 or bfloat16)."""
        return self.w.dtype


def pack_painn_filter(A, a, dtype=torch.float32) -> PaiNNFilterParams:
    """Pack a PaiNN block's filter network for `painn_message`.

    Parameters
    ----------
    A : Tensor [3H, K]
        ``filter_network.weight`` (``nn.Linear`` layout: out x in).
    a : Tensor [3H]
        ``filter_network.bias``.
    dtype : torch.dtype or {"fp32", "fp16", "bf16"}
        Operand type of the filter GEMMs: ``A`` is stored rounded to it and the kernel rounds
        the basis to it (FP32 accumulation in every case); ``a`` and everything outside the
        products stay FP32.

    Raises
    ------
    ValueError
        ``H`` not a power of two >= 16, mismatched shapes, or a weight that requires grad
        while autograd records (the fused op returns no weight gradients): pack under
        ``torch.no_grad()`` or pass detached weights.
    """
    check_no_grad("painn_message", A=A, a=a)
    dtype = DTYPES.get(dtype, dtype)
    if A.ndim != 2 or A.shape[0] % 3 or a.shape != (A.shape[0],):
        raise ValueError(f"painn_message needs A [3H, K] and a [3H]; got A {tuple(A.shape)}, "
                         f"a {tuple(a.shape)}")
    H, K = A.shape[0] // 3, A.shape[1]
    if H < 16 or H & (H - 1):
        raise ValueError(f"painn_message needs H a power of two >= 16, got H={H}")
    w = A.new_zeros(3, next_pow2(K), H, dtype=dtype)
    w[:, :K] = A.reshape(3, H, K).transpose(1, 2).to(dtype)
    return PaiNNFilterParams(w.contiguous(), a.float().reshape(3, H).contiguous(), K)


@triton.jit
def _edge_frame(pos_ptr, perm_ptr, other_ptr, owner, p0, end, OWNER_IS_DST: tl.constexpr,
                BLOCK_E: tl.constexpr):
    """The tile of a segment's edges at CSR positions ``p0 ..`` (before ``end``): their ids,
    other ends and geometry.

    ``owner`` ([BLOCK_E] int64) is the program's node, the destination (``OWNER_IS_DST``)
    or the source of every edge; ``other_ptr`` holds the other end. Returns ``(e, other,
    pmask, rx, ry, rz, s, d, inv_d)``: ``r = r_dst - r_src``, ``s = sqrt(|r|^2 + eps)``,
    ``d = s - shift`` and ``inv_d = 1/d`` (1 where ``d <= 0``, as the reference's
    direction), all [BLOCK_E].
    """
    p = p0 + tl.arange(0, BLOCK_E)
    pmask = p < end
    e = tl.load(perm_ptr + p, mask=pmask, other=0).to(tl.int64)
    other = tl.load(other_ptr + e, mask=pmask, other=0).to(tl.int64)
    if OWNER_IS_DST:
        rx, ry, rz, _ = edge_vector(pos_ptr, owner, other, pmask)
    else:
        rx, ry, rz, _ = edge_vector(pos_ptr, other, owner, pmask)
    s = tl.sqrt_rn(rx * rx + ry * ry + rz * rz + 1e-16)  # NORM_EPS
    d = s - 1e-8  # NORM_SHIFT
    inv_d = tl.where(d > 0, 1.0 / d, 1.0)
    return e, other, pmask, rx, ry, rz, s, d, inv_d


@triton.jit
def _edge_basis(d, pmask, mu_ptr, gamma_ptr, K, alpha, basis_lower, env_a, env_b, env_upper,
                env_lower, EXP_NORMAL: tl.constexpr, ENV_LOWER: tl.constexpr,
                ENV_IN_BASIS: tl.constexpr, ENV_ON_FILTER: tl.constexpr, KP: tl.constexpr):
    """The basis and its derivative ``[BLOCK_E, KP]`` at the lengths ``d`` [BLOCK_E], and the
    filter envelope ``C``, ``C'`` [BLOCK_E, 1], zero on rows not in ``pmask`` (so they add
    nothing to any sum)."""
    c, dc = edge_envelope(d, env_a, env_b, env_upper, env_lower, ENV_LOWER, ENV_IN_BASIS, True)
    basis, dbasis = radial_features(d, c, dc, mu_ptr, gamma_ptr, K, alpha, basis_lower, KP,
                                    EXP_NORMAL, ENV_IN_BASIS)
    if not ENV_ON_FILTER:  # identity envelope: 1 inside the cutoff
        c = tl.where(d < env_upper, 1.0, 0.0)
        dc = tl.zeros(d.shape, tl.float32)
    return basis, dbasis, tl.where(pmask, c, 0.0)[:, None], tl.where(pmask, dc, 0.0)[:, None]


@triton.jit
def _filter_weight(w_ptr, S: tl.constexpr, H: tl.constexpr, KP: tl.constexpr,
                   DT: tl.constexpr, PREC: tl.constexpr):
    """``A_S^T`` [KP, H], channel block ``S`` of the packed filter (0: ``dq``, 1: ``dmu^R``,
    2: ``dmu^mu``). Loaded per use, from L1/L2: three tiles live through the edge loop would
    not fit in registers at H = 128."""
    return _load_weight(w_ptr + S * KP * H, tl.arange(0, KP), tl.arange(0, H), H, 1, DT, PREC)


@triton.jit
def _filter_block(basis, w, b_ptr, S: tl.constexpr, H: tl.constexpr, DT: tl.constexpr,
                  PREC: tl.constexpr):
    """``basis @ A_S^T + a_S`` [BLOCK_E, H]: channel block ``S`` of the filter before its
    envelope, ``w`` from `_filter_weight`."""
    return mma(basis, w, DT, PREC) + tl.load(b_ptr + S * H + tl.arange(0, H))[None, :]


@triton.jit
def _filter(S: tl.constexpr, basis, dbasis, cf, dcf, w_ptr, b_ptr, d, valid, c01_ptr,
            c23_ptr, scale_ptr, inv_h, num_intervals, H: tl.constexpr, KP: tl.constexpr,
            DT: tl.constexpr, PREC: tl.constexpr, TABLE: tl.constexpr,
            DERIV: tl.constexpr):
    """Channel block ``S`` of the enveloped filter, ``w = (e(d) A_S^T + a_S) C(d)``, and
    (``DERIV``) its derivative ``w'``, [BLOCK_E, H] each.

    ``TABLE``: both read from the block's cubic Hermite table (`kernels.tabulated`, columns
    ``S H .. S H + H`` of its 3H, at the lengths ``d``; zero where not ``valid``), and
    ``basis`` .. ``dcf``, ``w_ptr``, ``b_ptr`` are not read. Otherwise the filter GEMM of
    `_filter_block` on ``basis`` (and, with ``DERIV``, the product of ``dbasis`` with the
    same weight tile) times the envelope ``cf``, ``dcf`` of `_edge_basis`; ``d`` ..
    ``num_intervals`` are not read. Without ``DERIV`` the second value is ``w`` again.
    """
    if TABLE:
        cols = S * H + tl.arange(0, H)[None, :]
        w, dw = _table_eval(c01_ptr, c23_ptr, tl.load(scale_ptr + cols), d, valid, inv_h,
                            num_intervals, cols, 3 * H)
    else:
        wt = _filter_weight(w_ptr, S, H, KP, DT, PREC)  # one load, two products
        f = _filter_block(basis, wt, b_ptr, S, H, DT, PREC)
        w = f * cf
        dw = w
        if DERIV:
            dw = mma(dbasis, wt, DT, PREC) * cf + f * dcf
    return w, dw


# One node per program. Compiled for sm_90 at H = 128, K = 64 (tests/kernels/hopper_compile.py),
# the backward's six filter GEMMs per tile spill registers with 4 warps (984 bytes of stack
# per thread, 288 with 8 warps), hence 8-warp candidates; the table variant's backward
# spills 104 bytes with 4 warps, its forward none (142 registers).
_CONFIGS = pick_configs([_cfg(16, 4), _cfg(16, 8), _cfg(32, 8)], _cfg(16, 4))


@triton.jit
def _tile_filter_inputs(d, pmask, mu_ptr, gamma_ptr, K, alpha, basis_lower, env_a, env_b,
                        env_upper, env_lower, EXP_NORMAL: tl.constexpr,
                        ENV_LOWER: tl.constexpr, ENV_IN_BASIS: tl.constexpr,
                        ENV_ON_FILTER: tl.constexpr, KP: tl.constexpr, TABLE: tl.constexpr):
    """What `_filter` reads of a tile: ``(valid, basis, dbasis, cf, dcf)``. With ``TABLE``
    the lanes inside the cutoff (``valid``; the table is zero beyond it, so the rest load no
    row) and no basis (``d`` stands in for the four, unread: a compiled function returns
    tensors); otherwise the lanes in the segment and `_edge_basis`."""
    if TABLE:  # one return: the compiler wants one return type
        valid = pmask & (d < env_upper)
        basis, dbasis, cf, dcf = d, d, d, d
    else:
        valid = pmask
        basis, dbasis, cf, dcf = _edge_basis(d, pmask, mu_ptr, gamma_ptr, K, alpha,
                                             basis_lower, env_a, env_b, env_upper, env_lower,
                                             EXP_NORMAL, ENV_LOWER, ENV_IN_BASIS,
                                             ENV_ON_FILTER, KP)
    return valid, basis, dbasis, cf, dcf


@autotune(_CONFIGS, ["num_nodes", "H", "KP", "PREC", "TABLE"])
@triton.jit
def _message_fwd_kernel(pos_ptr, x_ptr, vec_ptr, src_ptr, ptr_ptr, perm_ptr, w_ptr, b_ptr,
                        c01_ptr, c23_ptr, scale_ptr, inv_h, num_intervals, dq_ptr, dmu_ptr,
                        num_nodes, mu_ptr, gamma_ptr, K, alpha, basis_lower, env_a, env_b,
                        env_upper, env_lower, EXP_NORMAL: tl.constexpr,
                        ENV_LOWER: tl.constexpr, ENV_IN_BASIS: tl.constexpr,
                        ENV_ON_FILTER: tl.constexpr, H: tl.constexpr, KP: tl.constexpr,
                        DT: tl.constexpr, PREC: tl.constexpr, TABLE: tl.constexpr,
                        BLOCK_E: tl.constexpr):
    """Summed PaiNN messages of the destination node owned by this program.

    Parameters
    ----------
    pos_ptr : pointer to float32 [P, 3]
        Positions.
    x_ptr : pointer to float32 [P', 3H]
        Context ``x = context_net(q)``, read at sources.
    vec_ptr : pointer to float32 [P', 3, H]
        Vector features ``mu``, read at sources.
    src_ptr : pointer to int64 [E]
        Source of every edge.
    ptr_ptr, perm_ptr : pointers to int32 [N + 1], [E]
        Destination-grouped CSR (`kernels.csr.GraphCSR.dst_ptr`, ``dst_perm``).
    w_ptr : pointer to DT [3, KP, H]
        Packed filter weights (`PaiNNFilterParams.w`); not read with ``TABLE``.
    b_ptr : pointer to float32 [3, H]
        Filter bias; not read with ``TABLE``.
    c01_ptr, c23_ptr, scale_ptr : pointers to float32 [G-1, 2, 3H], float16 [G-1, 2, 3H],
    float32 [3H]
        The block's filter table (`kernels.tabulated.FilterTable`: ``coeffs01``,
        ``coeffs23``, ``scale23``); read with ``TABLE`` only.
    inv_h : float
        ``1 / spacing`` of the table (``TABLE``).
    num_intervals : int
        ``G - 1`` of the table (``TABLE``).
    dq_ptr, dmu_ptr : pointers to float32 [N, H], [N, 3, H]
        Outputs, one row written per program.
    num_nodes : int
        N, the number of programs (an autotuning key).
    mu_ptr, gamma_ptr, K, alpha, basis_lower, env_a, env_b, env_upper, env_lower
        Basis and envelope parameters (`RadialSpec.kernel_args`); with ``TABLE`` only
        ``env_upper``, the cutoff, is read.
    EXP_NORMAL, ENV_LOWER, ENV_IN_BASIS, ENV_ON_FILTER : constexpr bool
        Basis family and envelopes (`RadialSpec.kernel_args`).
    H : constexpr int
        Feature width, a power of two >= 16.
    KP : constexpr int
        K padded to a power of two >= 16.
    DT : constexpr tl.dtype
        GEMM operand type (float32, float16, bfloat16).
    PREC : constexpr str
        FP32 product mode ("tf32", "tf32x3", "ieee"; `kernels.cfconv.PRECISIONS`).
    TABLE : constexpr bool
        Read the filter from the table instead of the basis and the filter GEMMs.
    BLOCK_E : constexpr int
        Edges per tile.
    """
    h = tl.arange(0, H)
    node = tl.program_id(0)
    start = tl.load(ptr_ptr + node)
    end = tl.load(ptr_ptr + node + 1)
    owner = tl.full([BLOCK_E], node, tl.int64)
    acc_q = tl.zeros([H], dtype=tl.float32)
    acc_x = tl.zeros([H], dtype=tl.float32)
    acc_y = tl.zeros([H], dtype=tl.float32)
    acc_z = tl.zeros([H], dtype=tl.float32)
    for p0 in range(start, end, BLOCK_E):
        _, j, pmask, rx, ry, rz, _, d, inv_d = _edge_frame(pos_ptr, perm_ptr, src_ptr, owner,
                                                           p0, end, True, BLOCK_E)
        valid, basis, dbasis, cf, dcf = _tile_filter_inputs(
            d, pmask, mu_ptr, gamma_ptr, K, alpha, basis_lower, env_a, env_b, env_upper,
            env_lower, EXP_NORMAL, ENV_LOWER, ENV_IN_BASIS, ENV_ON_FILTER, KP, TABLE)
        rows = valid[:, None]
        xrow = x_ptr + j[:, None] * (3 * H) + h[None, :]
        vrow = vec_ptr + j[:, None] * (3 * H) + h[None, :]
        w, _ = _filter(0, basis, dbasis, cf, dcf, w_ptr, b_ptr, d, valid, c01_ptr, c23_ptr,
                       scale_ptr, inv_h, num_intervals, H, KP, DT, PREC, TABLE, False)
        acc_q += tl.sum(w * tl.load(xrow, mask=rows, other=0.0), axis=0)
        w, _ = _filter(1, basis, dbasis, cf, dcf, w_ptr, b_ptr, d, valid, c01_ptr, c23_ptr,
                       scale_ptr, inv_h, num_intervals, H, KP, DT, PREC, TABLE, False)
        m_r = w * tl.load(xrow + H, mask=rows, other=0.0)
        w, _ = _filter(2, basis, dbasis, cf, dcf, w_ptr, b_ptr, d, valid, c01_ptr, c23_ptr,
                       scale_ptr, inv_h, num_intervals, H, KP, DT, PREC, TABLE, False)
        m_mu = w * tl.load(xrow + 2 * H, mask=rows, other=0.0)
        acc_x += tl.sum(m_r * (rx * inv_d)[:, None]
                        + m_mu * tl.load(vrow, mask=rows, other=0.0), axis=0)
        acc_y += tl.sum(m_r * (ry * inv_d)[:, None]
                        + m_mu * tl.load(vrow + H, mask=rows, other=0.0), axis=0)
        acc_z += tl.sum(m_r * (rz * inv_d)[:, None]
                        + m_mu * tl.load(vrow + 2 * H, mask=rows, other=0.0), axis=0)
    row = node.to(tl.int64)
    tl.store(dq_ptr + row * H + h, acc_q)
    tl.store(dmu_ptr + row * (3 * H) + h, acc_x)
    tl.store(dmu_ptr + row * (3 * H) + H + h, acc_y)
    tl.store(dmu_ptr + row * (3 * H) + 2 * H + h, acc_z)


@autotune(_CONFIGS, ["num_nodes", "H", "KP", "PREC", "TABLE"])
@triton.jit
def _message_bwd_kernel(pos_ptr, x_ptr, vec_ptr, gq_ptr, gmu_ptr, dst_ptr, ptr_ptr, perm_ptr,
                        w_ptr, b_ptr, c01_ptr, c23_ptr, scale_ptr, inv_h, num_intervals,
                        gx_ptr, gvec_ptr, v_ptr, num_nodes, mu_ptr, gamma_ptr, K, alpha,
                        basis_lower, env_a, env_b, env_upper, env_lower,
                        EXP_NORMAL: tl.constexpr, ENV_LOWER: tl.constexpr,
                        ENV_IN_BASIS: tl.constexpr, ENV_ON_FILTER: tl.constexpr,
                        H: tl.constexpr, KP: tl.constexpr, DT: tl.constexpr,
                        PREC: tl.constexpr, TABLE: tl.constexpr, BLOCK_E: tl.constexpr):
    """Gradients of the source node owned by this program, and each of its edges' position
    gradient vector.

    Parameters
    ----------
    pos_ptr, x_ptr, vec_ptr, w_ptr, b_ptr, c01_ptr, c23_ptr, scale_ptr, inv_h,
    num_intervals, num_nodes, mu_ptr ... ENV_ON_FILTER, H, KP, DT, PREC, TABLE, BLOCK_E
        As for `_message_fwd_kernel` (``TABLE``: ``w`` and ``w'`` from the table's cubic).
    gq_ptr, gmu_ptr : pointers to float32 [N, H], [N, 3, H]
        Incoming gradients ``dL/d(dq)``, ``dL/d(dmu)``, read at destinations.
    dst_ptr : pointer to int64 [E]
        Destination of every edge.
    ptr_ptr, perm_ptr : pointers to int32 [N + 1], [E]
        Source-grouped CSR (`kernels.csr.GraphCSR.src_ptr`, ``src_perm``).
    gx_ptr, gvec_ptr : pointers to float32 [P', 3H], [P', 3, H]
        ``dL/dx``, ``dL/dmu``; row ``n`` written by program ``n``.
    v_ptr : pointer to float32 [E, 3]
        ``dL/dr_e`` of every visited edge (``r_e = r_dst - r_src``); other rows untouched.
    """
    h = tl.arange(0, H)
    node = tl.program_id(0)
    start = tl.load(ptr_ptr + node)
    end = tl.load(ptr_ptr + node + 1)
    row = node.to(tl.int64) * (3 * H)
    owner = tl.full([BLOCK_E], node, tl.int64)
    xq = tl.load(x_ptr + row + h)[None, :]  # the source's rows, once
    xr = tl.load(x_ptr + row + H + h)[None, :]
    xm = tl.load(x_ptr + row + 2 * H + h)[None, :]
    mux = tl.load(vec_ptr + row + h)[None, :]
    muy = tl.load(vec_ptr + row + H + h)[None, :]
    muz = tl.load(vec_ptr + row + 2 * H + h)[None, :]
    acc_q = tl.zeros([H], dtype=tl.float32)
    acc_r = tl.zeros([H], dtype=tl.float32)
    acc_m = tl.zeros([H], dtype=tl.float32)
    acc_x = tl.zeros([H], dtype=tl.float32)
    acc_y = tl.zeros([H], dtype=tl.float32)
    acc_z = tl.zeros([H], dtype=tl.float32)
    for p0 in range(start, end, BLOCK_E):
        e, i, pmask, rx, ry, rz, s, d, inv_d = _edge_frame(pos_ptr, perm_ptr, dst_ptr, owner,
                                                           p0, end, False, BLOCK_E)
        valid, basis, dbasis, cf, dcf = _tile_filter_inputs(
            d, pmask, mu_ptr, gamma_ptr, K, alpha, basis_lower, env_a, env_b, env_upper,
            env_lower, EXP_NORMAL, ENV_LOWER, ENV_IN_BASIS, ENV_ON_FILTER, KP, TABLE)
        rows = valid[:, None]
        ux = rx * inv_d  # the direction n_e
        uy = ry * inv_d
        uz = rz * inv_d
        nx = ux[:, None]
        ny = uy[:, None]
        nz = uz[:, None]
        gq = tl.load(gq_ptr + i[:, None] * H + h[None, :], mask=rows, other=0.0)
        grow = gmu_ptr + i[:, None] * (3 * H) + h[None, :]
        gx = tl.load(grow, mask=rows, other=0.0)
        gy = tl.load(grow + H, mask=rows, other=0.0)
        gz = tl.load(grow + 2 * H, mask=rows, other=0.0)
        g_r = gx * nx + gy * ny + gz * nz  # dL/d(dmu^R)
        g_m = gx * mux + gy * muy + gz * muz  # dL/d(dmu^mu)
        # channel block 0 (dq)
        w, dw = _filter(0, basis, dbasis, cf, dcf, w_ptr, b_ptr, d, valid, c01_ptr, c23_ptr,
                        scale_ptr, inv_h, num_intervals, H, KP, DT, PREC, TABLE, True)
        acc_q += tl.sum(gq * w, axis=0)
        gd = tl.sum(gq * xq * dw, axis=1)
        # channel block 1 (dmu^R)
        w, dw = _filter(1, basis, dbasis, cf, dcf, w_ptr, b_ptr, d, valid, c01_ptr, c23_ptr,
                        scale_ptr, inv_h, num_intervals, H, KP, DT, PREC, TABLE, True)
        acc_r += tl.sum(g_r * w, axis=0)
        gd += tl.sum(g_r * xr * dw, axis=1)
        m_r = w * xr
        gnx = tl.sum(gx * m_r, axis=1)  # dL/dn_e
        gny = tl.sum(gy * m_r, axis=1)
        gnz = tl.sum(gz * m_r, axis=1)
        # channel block 2 (dmu^mu)
        w, dw = _filter(2, basis, dbasis, cf, dcf, w_ptr, b_ptr, d, valid, c01_ptr, c23_ptr,
                        scale_ptr, inv_h, num_intervals, H, KP, DT, PREC, TABLE, True)
        acc_m += tl.sum(g_m * w, axis=0)
        gd += tl.sum(g_m * xm * dw, axis=1)
        m_mu = w * xm
        acc_x += tl.sum(gx * m_mu, axis=0)
        acc_y += tl.sum(gy * m_mu, axis=0)
        acc_z += tl.sum(gz * m_mu, axis=0)
        # dL/dr = (dL/dd - (n . dL/dn) / d) r / s + dL/dn / d
        radial = (gd - (ux * gnx + uy * gny + uz * gnz) * inv_d) / s
        v = v_ptr + e * 3
        tl.store(v, radial * rx + gnx * inv_d, mask=pmask)
        tl.store(v + 1, radial * ry + gny * inv_d, mask=pmask)
        tl.store(v + 2, radial * rz + gnz * inv_d, mask=pmask)
    tl.store(gx_ptr + row + h, acc_q)
    tl.store(gx_ptr + row + H + h, acc_r)
    tl.store(gx_ptr + row + 2 * H + h, acc_m)
    tl.store(gvec_ptr + row + h, acc_x)
    tl.store(gvec_ptr + row + H + h, acc_y)
    tl.store(gvec_ptr + row + 2 * H + h, acc_z)


def _hidden(params: PaiNNFilterParams | FilterTable) -> int:
    """H of a packed filter network or of a filter table (3H columns)."""
    return params.num_features // 3 if isinstance(params, FilterTable) else params.hidden


def _check_filter(params: PaiNNFilterParams | FilterTable, spec: RadialSpec) -> None:
    """ValueError for a filter that does not fit ``spec`` or the kernels."""
    if not isinstance(params, FilterTable):
        if params.num_basis != spec.num_basis:
            raise ValueError(f"painn_message: the filter expects K={params.num_basis}, the "
                             f"basis has {spec.num_basis}")
        return
    H = params.num_features // 3
    if params.num_features != 3 * H or H < 16 or H & (H - 1):
        raise ValueError(f"painn_message needs a table of 3H columns, H a power of two >= 16; "
                         f"got {params.num_features} columns")
    if not math.isclose(params.cutoff, spec.cutoff_upper, rel_tol=1e-6):
        raise ValueError(f"painn_message: the table ends at {params.cutoff}, the cutoff is "
                         f"{spec.cutoff_upper}")
    for name, dtype in (("coeffs01", torch.float32), ("coeffs23", torch.float16),
                        ("scale23", torch.float32)):
        t = getattr(params, name)
        if t.dtype != dtype or not t.is_contiguous():
            raise ValueError(f"painn_message: table {name} must be contiguous {dtype} (build "
                             f"it with build_filter_table)")
    check_no_grad("painn_message", coeffs01=params.coeffs01, coeffs23=params.coeffs23,
                  scale23=params.scale23)


def _check_inputs(pos, x, vec, src, dst, csr: GraphCSR, params: PaiNNFilterParams | FilterTable,
                  spec: RadialSpec, precision: str) -> None:
    """ValueError for any input `painn_message` cannot take."""
    H, n = _hidden(params), csr.num_nodes
    _check_filter(params, spec)
    if precision not in PRECISIONS:
        raise ValueError(f"painn_message precision must be one of {PRECISIONS}, "
                         f"got {precision!r}")
    if pos.ndim != 2 or pos.shape[1] != 3 or pos.shape[0] < n:
        raise ValueError(f"painn_message: positions must be [P >= {n}, 3], "
                         f"got {tuple(pos.shape)}")
    if x.ndim != 2 or x.shape[1] != 3 * H or x.shape[0] < n:
        raise ValueError(f"painn_message: x must be [P' >= {n}, 3H = {3 * H}], "
                         f"got {tuple(x.shape)}")
    if vec.shape[1:] != (3, H) or vec.shape[0] < n:
        raise ValueError(f"painn_message: mu must be [P' >= {n}, 3, H = {H}], "
                         f"got {tuple(vec.shape)}")
    for name, t in (("positions", pos), ("x", x), ("mu", vec)):
        if t.dtype != torch.float32:
            raise ValueError(f"painn_message takes float32 {name}, got {t.dtype}")
    if src.shape != dst.shape or src.ndim != 1 or csr.dst_perm.numel() != src.numel():
        raise ValueError(f"painn_message: src and dst must be [E] like the CSR's "
                         f"{csr.dst_perm.numel()} edges, got {tuple(src.shape)}, "
                         f"{tuple(dst.shape)}")


def _kernel_args(params: PaiNNFilterParams | FilterTable, spec: RadialSpec,
                 precision: str) -> dict:
    """The kernels' filter and basis arguments: the packed network (the table's pointers
    stand in for it, unread), or a table (``TABLE``; the network's likewise)."""
    if isinstance(params, FilterTable):
        return dict(w_ptr=params.coeffs01, b_ptr=params.scale23, c01_ptr=params.coeffs01,
                    c23_ptr=params.coeffs23, scale_ptr=params.scale23,
                    inv_h=1.0 / params.spacing, num_intervals=params.num_intervals,
                    H=_hidden(params), KP=16, DT=tl.float32, PREC=precision, TABLE=True,
                    **spec.kernel_args())
    return dict(w_ptr=params.w, b_ptr=params.bias, c01_ptr=params.bias, c23_ptr=params.bias,
                scale_ptr=params.bias, inv_h=0.0, num_intervals=0, H=params.hidden,
                KP=params.w.shape[1], DT=torch_to_tl_dtype(params.dtype), PREC=precision,
                TABLE=False, **spec.kernel_args())


class _PaiNNMessage(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pos, x, vec, src, dst, csr, params, spec, precision):
        _check_inputs(pos, x, vec, src, dst, csr, params, spec, precision)
        pos, x, vec = pos.contiguous(), x.contiguous(), vec.contiguous()
        n, H = csr.num_nodes, _hidden(params)
        args = _kernel_args(params, spec, precision)
        dq = torch.empty(n, H, dtype=torch.float32, device=x.device)
        dmu = torch.empty(n, 3, H, dtype=torch.float32, device=x.device)
        if n:
            _message_fwd_kernel[(n,)](pos, x, vec, src, csr.dst_ptr, csr.dst_perm, dq_ptr=dq,
                                      dmu_ptr=dmu, num_nodes=n, **args)
        ctx.save_for_backward(pos, x, vec, src, dst, *csr)
        ctx.args = args
        return dq, dmu

    @staticmethod
    def backward(ctx, grad_dq, grad_dmu):
        pos, x, vec, src, dst, *csr = ctx.saved_tensors
        csr = GraphCSR(*csr)
        n, H = csr.num_nodes, ctx.args["H"]
        gq = (torch.zeros(n, H, dtype=torch.float32, device=x.device) if grad_dq is None
              else grad_dq.contiguous().float())
        gmu = (torch.zeros(n, 3, H, dtype=torch.float32, device=x.device) if grad_dmu is None
               else grad_dmu.contiguous().float())
        grad_x = torch.zeros_like(x)  # rows beyond the graph's nodes: 0
        grad_vec = torch.zeros_like(vec)
        v = torch.zeros(src.numel(), 3, dtype=torch.float32, device=x.device)
        if n:
            _message_bwd_kernel[(n,)](pos, x, vec, gq, gmu, dst, csr.src_ptr, csr.src_perm,
                                      gx_ptr=grad_x, gvec_ptr=grad_vec, v_ptr=v, num_nodes=n,
                                      **ctx.args)
        grad_pos = edge_vectors_to_positions(v, pos, src, dst, csr)
        return grad_pos, grad_x, grad_vec, None, None, None, None, None, None


def painn_message(pos, x, mu, src, dst, csr: GraphCSR,
                  params: PaiNNFilterParams | FilterTable, spec: RadialSpec,
                  precision: str = "tf32x3"):
    """Fused PaiNN message block: summed scalar and vector messages per node (Triton).

    Parameters
    ----------
    pos : Tensor, float32 [P, 3]
        Flattened positions, ``P >= csr.num_nodes`` (extra rows, e.g. a padding node, are
        ignored and get zero gradient). May require grad.
    x : Tensor, float32 [P', 3H]
        Context ``interatomic_context_net(q)``, ``P' >= csr.num_nodes``, H a power of two
        >= 16. May require grad.
    mu : Tensor, float32 [P', 3, H]
        Vector features. May require grad.
    src, dst : Tensor, int64 [E]
        Edge endpoints (message ``src -> dst``).
    csr : GraphCSR
        Both CSR layouts of these edges (`kernels.csr.build_csr`); padding edges are in no
        segment and contribute nothing. Any graph (symmetry is not assumed).
    params : PaiNNFilterParams or FilterTable
        Packed filter network (`pack_painn_filter`; its dtype selects FP32 or 16-bit GEMM
        operands), or the block's enveloped filter ``w(d)`` tabulated (3H columns,
        `kernels.tabulated.build_filter_table`, ending at ``spec.cutoff_upper``): the
        kernels then read ``w`` and ``w'`` from its cubic instead of computing the basis and
        the GEMMs, and edges at or beyond the cutoff load nothing.
    spec : RadialSpec
        Basis and envelopes; without `RadialSpec.envelope_on_filter` the filter's envelope
        is 1 inside ``spec.cutoff_upper`` and 0 at and beyond it (mlcg's identity cutoff).
        With a table only the cutoff is read.
    precision : {"tf32x3", "tf32", "ieee"}
        Product mode of the FP32 GEMMs (`kernels.cfconv.PRECISIONS`): three TF32 products
        (about FP32's accuracy, the default), one TF32 product of rounded operands, or
        CUDA-core FMA; ignored by 16-bit weights and by a table. Sums onto nodes are FP32 in
        every mode.

    Returns
    -------
    dq : Tensor, float32 [csr.num_nodes, H]
        ``sum_{e: dst_e = i} dq_e``.
    dmu : Tensor, float32 [csr.num_nodes, 3, H]
        ``sum_{e: dst_e = i} dmu^R_e n_e + dmu^mu_e mu[src_e]``. Gradients flow to ``pos``,
        ``x`` and ``mu`` only (recomputing the filter per tile; see the module docstring);
        weights and basis parameters get none.

    Raises
    ------
    ValueError
        Shapes or dtypes that do not fit ``params``, a basis of another size, a table that
        ends elsewhere than the cutoff, or an unknown precision.
    """
    return _PaiNNMessage.apply(pos, x, mu, src, dst, csr, params, spec, precision)


def painn_message_reference(pos, x, mu, src, dst, csr: GraphCSR,
                            params: PaiNNFilterParams | FilterTable, spec: RadialSpec,
                            precision: str = "ieee"):
    """PyTorch reference of `painn_message` (materialises E x 3H; computes in ``pos.dtype``).

    Plain autograd, so it also differentiates float64 inputs for finite-difference checks.
    Uses the packed weights (rounded to 16 bits if packed so) in ``pos.dtype``, or the
    table's stored cubic (`kernels.tabulated.evaluate_table`) evaluated in ``pos.dtype``;
    ``precision`` is accepted for the same signature and changes nothing.
    """
    valid = valid_edge_mask(csr)
    n, dtype, H = csr.num_nodes, pos.dtype, _hidden(params)
    s, t = torch.where(valid, src, 0), torch.where(valid, dst, 0)
    unit = torch.tensor([1.0, 0.0, 0.0], dtype=dtype, device=pos.device)
    r = torch.where(valid[:, None], pos[t] - pos[s], unit)
    dist = torch.sqrt((r * r).sum(1) + NORM_EPS) - NORM_SHIFT
    normdir = r / torch.where(dist > 0, dist, torch.ones_like(dist))[:, None]
    if isinstance(params, FilterTable):  # enveloped, zero beyond the cutoff
        filt = evaluate_table(params, dist).reshape(-1, 3, H)
    else:
        basis, env = radial_reference_terms(dist, spec)
        env = env * (dist < spec.cutoff_upper)  # the identity envelope ends at the cutoff too
        w = params.w[:, : params.num_basis].to(dtype)  # [3, K, H]
        filt = (torch.einsum("ek,skh->esh", basis, w) + params.bias.to(dtype)) * env[:, None,
                                                                                      None]
    m = filt * x.to(dtype)[s].reshape(-1, 3, H)
    dmu = m[:, 1, None, :] * normdir[:, :, None] + m[:, 2, None, :] * mu.to(dtype)[s]
    seg = torch.where(valid, dst, n)
    dq = torch.zeros(n + 1, H, dtype=dtype, device=pos.device).index_add(0, seg, m[:, 0])
    out = torch.zeros(n + 1, 3, H, dtype=dtype, device=pos.device).index_add(0, seg, dmu)
    return dq[:n], out[:n]
