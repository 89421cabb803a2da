"""Fused EGNN edge block: basis, edge MLP, envelope and the sum of messages in one kernel.

For one EGNN layer and every edge ``e = (src j -> dst i)`` of length ``d_e``::

    z1_e = xa[i] + xb[j] + s(d_e) wd + e(d_e) Wr^T                    [F]
    m_e  = act(act(z1_e) W2^T + b2) * C(d_e)                          [F]
    u_i  = sum_{e: dst_e = i} m_e                                     [N, F]

with ``s(d) = d^2 / r_c^2``, ``e(d)`` the radial basis (K functions) and ``C`` the cosine
envelope (`kernels.radial_basis`). This is the edge MLP ``phi_e(h_i, h_j, d^2, e(d))`` of
EGNN (Satorras et al. 2021) with its first layer's weight split by input blocks: the node
parts ``xa = h Wi^T + b1`` and ``xb = h Wj^T`` are per-node products ``[N, F]`` made before
the kernel (N rows instead of E), so the kernel gathers rows of them instead of ``h``.

What depends on the edge's length alone is made once per step for every layer: the lengths
by `kernels.edge_distances` (differentiable: each layer's backward returns ``dL/dd_e``,
autograd adds the layers' vectors and one position-gradient pass turns the sum into
forces) and the envelope ``C(d)``, ``C'(d)`` by `edge_envelopes` (``[2, E]``). The kernels
read three floats per edge where they would otherwise gather six coordinates and evaluate a
square root and a cosine, each in several register layouts of the tile.

Forward (`_edge_fwd_kernel`): one program owns one destination node, one segment of the
destination-grouped CSR, loads ``xa[i]`` once and streams the segment's edges in tiles of
``BLOCK_E`` (the next tile's edge ids are asked for before this tile's work; with
``sorted_edges``, a searched graph's identity permutation is not read at all). Per tile, on
chip only: gather ``xb[j]`` rows, read lengths and envelope, basis ``[BLOCK_E, KP]``, the
basis GEMM and the second layer's GEMM (``tl.dot`` with FP32 accumulation; FP32 operands,
or float16 / bfloat16 operands with the weights stored so), both activations, the
envelope, added into a
``[BLOCK_E, F]`` FP32 register accumulator summed once at the end and written once: no
atomics, deterministic, nothing of size E x F or E x K in memory (but the pre-activations
with ``saved="activations"``, below).

Backward, given ``gu = dL/du [N, F]``, in one of two ways (``egnn_edge(..., saved=)``):

``saved="none"`` (the default): nothing per edge is kept; `_edge_bwd_kernel` evaluates each
tile anew and is launched twice:

* over the destination layout (the program owns ``i``): ``grad_xa[i] = sum_e dL/dz1_e``,
  and per edge ``g_e = dL/dd_e = C'(d) <gu[i], t2_e> + <dL/dz1_e, s'(d) wd + e'(d) Wr^T>``
  (``e'`` includes the derivative of an envelope inside the basis), written once per edge;
* over the source layout (the program owns ``j``): ``grad_xb[j] = sum_e dL/dz1_e``.

That is three evaluations of the edge MLP per edge (forward and two backward passes), nine
GEMMs per edge tile in all (two forward, seven backward).

``saved="activations"``: the forward (``STORE``) also writes each edge's pre-activations
``z1_e``, ``z2_e`` (``[E, 2, F]`` in the GEMM operands' type: FP32, or float16 / bfloat16
with 16-bit weights; row ``e = perm[p]``, so any layout can read them),
and the backward is one launch over the destination layout (``STORED``): per tile it reads
``z1``, ``z2``, forms ``t2 = act(z2)``, ``act'(z2)``, ``act'(z1)`` elementwise, reads
``d, C, C'`` and evaluates ``e'(d)``, and writes ``grad_xa``, ``g_e`` as above and
``dL/dz1_e`` per edge (``[E, F]``: FP32 with FP32 operands; with 16-bit ones in the operand
type, each row divided by its scale, below, the scales ``[E]`` FP32 beside them); ``grad_xb``
is then the source layout's `kernels.segment_reduce.segment_sum` of those rows
(`kernels.segment_reduce.scaled_segment_sum` for 16-bit rows). Four GEMMs per edge tile in all (the
forward's two; ``dL/dz2 W2`` and ``e'(d) Wr^T``), no gather of ``xb`` in the backward.
Why this set: ``z1`` and ``z2`` give every activation and derivative at one exponential per
element, where recomputing ``z2`` needs the ``W2`` product and ``z1`` the basis product and
the ``xb`` gather; storing ``t2, act'(z1), act'(z2)`` instead would be 12 F bytes per edge,
not 8 F. The basis terms are K exponentials from 3 loaded floats per edge, cheaper to
recompute than K stored floats are to read. With FP32 operands the stored ``z1``,
``z2`` are those of the recomputing path, and values and gradients agree with it to the
order of the sums over edges. With 16-bit operands they are stored rounded to the operand
type, half the bytes: the forward's ``act(z1)`` is rounded so anyway before its product,
and the gradients move by the rounding of ``z2``, ``act'(z1)`` and of the scaled
``dL/dz1`` rows (tests/model/test_egnn.py gives the force error against float64).
Memory (per edge slot of ``src``, per layer): ``z`` 8 F bytes (FP32) or 4 F bytes (16-bit)
kept from the forward to the backward (512 B or 256 B at F = 64), and ``dL/dz1`` 4 F bytes
(FP32) or 2 F + 4 bytes (16-bit) only while one layer's backward runs; 1ENH x 64 (about
1.13 million edges, F = 64) with 4 layers keeps 4 x 580 MB = 2.3 GB (FP32) or 1.2 GB
(16-bit), plus 290 MB or 150 MB at a time in the backward. The forward stores nothing
when autograd does not record or no input requires grad (energies only).

In both ways ``dL/dz1_e = act'(z1_e) * ((act'(z2_e) * gu[i] C(d_e)) W2)`` is formed per
tile in registers (one ``tl.dot`` with ``W2``; with 16-bit operands each row of ``dL/dz2`` is
first divided by its largest magnitude, so small gradients keep their precision, and
multiplied back after the product). ``g`` is the gradient of the lengths (see above).
Weights and basis parameters get no gradient.

Exponentials and reciprocals are single special-function instructions on the GPU
(`kernels._triton.exp_f32`, `kernels._triton.rcp_f32`, about 2 ulp).

Padding: edges outside every CSR segment (see `kernels.csr`) are never visited; edges at or
beyond the cutoff have ``C = C' = 0``, so they add nothing to ``u`` or to any gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels._triton import (
    activation_f32,
    autotune,
    check_no_grad,
    mma,
    next_pow2,
    pick_configs,
    rcp_f32,
    tl,
    torch_to_tl_dtype,
    triton,
)
from kernels.cfconv import PRECISIONS, _load_weight
from kernels.csr import GraphCSR, valid_edge_mask
from kernels.quantize import DTYPES
from kernels.radial_basis import (
    RadialSpec,
    edge_envelope,
    radial_features,
    radial_reference_terms,
)
from kernels.segment_reduce import scaled_segment_sum, segment_sum

__all__ = ["EdgeMLPParams", "pack_edge_mlp", "egnn_edge", "egnn_edge_reference",
           "edge_envelopes", "ACTIVATIONS", "SAVED"]

#: Activations of the edge MLP the kernels implement.
ACTIVATIONS = ("silu", "tanh")

#: What `egnn_edge` keeps per edge for its backward: ``"none"`` (the edge MLP is evaluated
#: anew, twice) or ``"activations"`` (its pre-activations ``z1``, ``z2``; see the module
#: docstring).
SAVED = ("none", "activations")


@dataclass(frozen=True)
class EdgeMLPParams:
    """The edge-side weights of one EGNN edge MLP, packed for `egnn_edge`.

    Attributes
    ----------
    wr_t : Tensor, GEMM dtype [KP, F]
        ``Wr^T``, the first layer's basis columns transposed, rows ``>= K`` zero
        (``KP`` a power of two >= 16).
    wd : Tensor, float32 [F]
        The first layer's column for ``s(d) = d^2 / r_c^2``.
    w2_t : Tensor, GEMM dtype [F, F]
        ``W2^T`` (forward: ``t1 @ W2^T``).
    w2 : Tensor, GEMM dtype [F, F]
        ``W2`` as stored by ``nn.Linear`` (backward: ``dL/dz2 @ W2``).
    b2 : Tensor, float32 [F]
        Second layer's bias.
    num_basis : int
        K.
    """

    wr_t: torch.Tensor
    wd: torch.Tensor
    w2_t: torch.Tensor
    w2: torch.Tensor
    b2: torch.Tensor
    num_basis: int

    @property
    def width(self) -> int:
        """F, the edge MLP's width (message size)."""
        return self.wd.numel()

    @property
    def dtype(self) -> torch.dtype:
        """Operand type of the GEMMs (float32, float16 or bfloat16)."""
        return self.w2.dtype


def pack_edge_mlp(Wr, wd, W2, b2, dtype=torch.float32) -> EdgeMLPParams:
    """Pack the edge-side weights of an EGNN edge MLP for `egnn_edge`.

    Parameters
    ----------
    Wr : Tensor [F, K]
        First layer's columns acting on the radial basis.
    wd : Tensor [F]
        First layer's column acting on ``d^2 / r_c^2``.
    W2 : Tensor [F, F]
        Second layer's weight (``nn.Linear`` layout: out x in).
    b2 : Tensor [F]
        Second layer's bias.
    dtype : torch.dtype or {"fp32", "fp16", "bf16"}
        Operand type of the GEMMs: ``Wr`` and ``W2`` are stored rounded to it, and the
        kernel rounds the other operand to it (FP32 accumulation in every case); ``wd``,
        ``b2`` and everything outside the products stay FP32.

    The node columns and the first bias are not packed: they make ``xa``, ``xb``.

    Raises
    ------
    ValueError
        A weight requires grad while autograd records (the fused op returns no weight
        gradients): pack under ``torch.no_grad()`` or pass detached weights.
    """
    check_no_grad("egnn_edge", Wr=Wr, wd=wd, W2=W2, b2=b2)
    dtype = DTYPES.get(dtype, dtype)
    F, K = Wr.shape
    if F < 16 or F & (F - 1) or W2.shape != (F, F) or wd.shape != (F,) or b2.shape != (F,):
        raise ValueError(f"egnn_edge needs F a power of two >= 16, W2 [F, F], wd and b2 [F]; got "
                         f"Wr {tuple(Wr.shape)}, W2 {tuple(W2.shape)}")
    wr_t = Wr.new_zeros(next_pow2(K), F, dtype=dtype)
    wr_t[:K] = Wr.t().to(dtype)
    W2 = W2.to(dtype)
    return EdgeMLPParams(wr_t.contiguous(), wd.float().contiguous(), W2.t().contiguous(),
                         W2.contiguous(), b2.float().contiguous(), K)


@triton.jit
def _edge_geometry(dist_ptr, c_ptr, dc_ptr, e, pmask, mu_ptr, gamma_ptr, K, alpha, basis_lower,
                   EXP_NORMAL: tl.constexpr, ENV_IN_BASIS: tl.constexpr, KP: tl.constexpr):
    """One tile's lengths and radial terms ``(d, c, dc, basis, dbasis)`` for the edges ``e``,
    the envelope ``c = C(d)``, ``dc = C'(d)`` read as `edge_envelopes` wrote it; ``c`` and
    ``dc`` are zero on masked rows, so those rows add nothing to any sum."""
    d = tl.load(dist_ptr + e, mask=pmask, other=1.0)
    c = tl.load(c_ptr + e, mask=pmask, other=0.0)
    dc = tl.load(dc_ptr + e, mask=pmask, other=0.0)
    basis, dbasis = radial_features(d, c, dc, mu_ptr, gamma_ptr, K, alpha, basis_lower, KP,
                                    EXP_NORMAL, ENV_IN_BASIS)
    return d, c, dc, basis, dbasis


@triton.jit
def _edge_tile(dist_ptr, c_ptr, dc_ptr, xa, xb, e, pmask, wr, wd, w2t, b2, inv_rc2, mu_ptr,
               gamma_ptr, K, alpha, basis_lower, EXP_NORMAL: tl.constexpr,
               ENV_IN_BASIS: tl.constexpr, ACT: tl.constexpr, KP: tl.constexpr,
               DT: tl.constexpr, PREC: tl.constexpr):
    """Evaluate one tile of edges: ``(d, c, dc, dbasis, z1, z2, t2, dact1, dact2)`` with the
    pre-activations ``z1``, ``z2`` and ``t2 = act(z2)`` (`_edge_geometry` for the rest)."""
    d, c, dc, basis, dbasis = _edge_geometry(dist_ptr, c_ptr, dc_ptr, e, pmask, mu_ptr,
                                             gamma_ptr, K, alpha, basis_lower, EXP_NORMAL,
                                             ENV_IN_BASIS, KP)
    z1 = xa + xb + (d * d * inv_rc2)[:, None] * wd[None, :] + mma(basis, wr, DT, PREC)
    t1, dact1 = activation_f32(z1, ACT)
    z2 = mma(t1, w2t, DT, PREC) + b2[None, :]
    t2, dact2 = activation_f32(z2, ACT)
    return d, c, dc, dbasis, z1, z2, t2, dact1, dact2


@triton.jit
def _tile_edges(other_ptr, perm_ptr, p, end, SORTED: tl.constexpr):
    """Lanes ``p`` of a layout's segment ending at ``end``: ``(pmask, e, other)`` with the
    edge ids ``e`` (``p`` itself when ``SORTED``: the layout's permutation is the identity)
    and their other endpoints ``other_ptr[e]`` (int64)."""
    pmask = p < end
    if SORTED:  # noqa: SIM108 - a constexpr if/else
        e = p.to(tl.int64)
    else:
        e = tl.load(perm_ptr + p, mask=pmask, other=0).to(tl.int64)
    return pmask, e, tl.load(other_ptr + e, mask=pmask, other=0).to(tl.int64)


def _cfg(e, w, maxnreg=None):
    return triton.Config({"BLOCK_E": e}, num_warps=w, num_stages=1, maxnreg=maxnreg)


# One node per program; small edge tiles keep the two GEMMs' accumulators in registers (as
# for cfconv, docs/kernels.md). The 16-bit kernels take 110 to 132 registers a thread, three
# or four programs of 128 threads per SM: capped at 128 or 96 they fit one more, at the cost
# of a few spills, which the autotuner weighs; 8 warps keep the FP32 stored backward (255
# registers at 4 warps) from spilling.
_CONFIGS = pick_configs([_cfg(16, 4), _cfg(16, 4, 128), _cfg(16, 4, 96), _cfg(16, 8),
                         _cfg(32, 4), _cfg(32, 8)], _cfg(16, 4))


@autotune(_CONFIGS, ["num_nodes", "F", "KP", "PREC", "ACT", "STORE", "SORTED"])
@triton.jit
def _edge_fwd_kernel(dist_ptr, c_ptr, dc_ptr, xa_ptr, xb_ptr, src_ptr, ptr_ptr, perm_ptr,
                     wr_ptr, wd_ptr, w2t_ptr, b2_ptr, out_ptr, z_ptr, num_nodes, inv_rc2, mu_ptr,
                     gamma_ptr, K, alpha, basis_lower, EXP_NORMAL: tl.constexpr,
                     ENV_IN_BASIS: tl.constexpr, ACT: tl.constexpr, STORE: tl.constexpr,
                     SORTED: tl.constexpr, F: tl.constexpr, KP: tl.constexpr,
                     DT: tl.constexpr, PREC: tl.constexpr, BLOCK_E: tl.constexpr):
    """``out[i] = sum_{p in segment i} m_{perm[p]}`` for the destination node ``i`` of this
    program (one program per node).

    Arguments: ``dist_ptr`` edge lengths ``[E]``; ``c_ptr``, ``dc_ptr`` their envelope
    ``C(d)`` and ``C'(d)`` ``[E]`` each (`edge_envelopes`); ``xa_ptr``, ``xb_ptr`` the node parts
    ``[P', F]``; ``src_ptr`` the edges' sources ``[E]``; ``ptr_ptr``, ``perm_ptr`` the
    destination layout (segment bounds ``[N + 1]``, edge ids grouped by destination ``[E]``);
    ``wr_ptr`` ``Wr^T [KP, F]``, ``wd_ptr`` ``wd [F]``, ``w2t_ptr`` ``W2^T [F, F]``,
    ``b2_ptr`` ``b2 [F]`` (`EdgeMLPParams`; ``DT`` the GEMM operands' type, ``PREC`` the
    FP32 product mode); ``out_ptr`` ``u [N, F]``; ``z_ptr`` ``[E, 2, F]`` (FP32 or ``DT``,
    rounded to its type), written only
    with ``STORE``: ``z1_e`` and ``z2_e`` of every visited edge ``e`` at row ``e`` (any
    pointer otherwise); ``num_nodes`` N (an autotuning key); ``inv_rc2`` ``1 / r_c^2``; the
    basis arguments and constexprs as `kernels.radial_basis.RadialSpec.kernel_args`;
    ``SORTED`` the destination layout's permutation is the identity (not read); ``ACT`` the
    activation; ``F``, ``KP`` widths; ``BLOCK_E`` edges per tile.
    """
    f = tl.arange(0, F)
    wr = _load_weight(wr_ptr, tl.arange(0, KP), f, F, 1, DT, PREC)
    w2t = _load_weight(w2t_ptr, f, f, F, 1, DT, PREC)
    wd = tl.load(wd_ptr + f)
    b2 = tl.load(b2_ptr + f)
    node = tl.program_id(0)
    start = tl.load(ptr_ptr + node)
    end = tl.load(ptr_ptr + node + 1)
    row = node.to(tl.int64) * F
    xa = tl.load(xa_ptr + row + f)[None, :]  # the destination's row, once
    acc = tl.zeros([BLOCK_E, F], dtype=tl.float32)
    lanes = tl.arange(0, BLOCK_E)
    pmask, e, j = _tile_edges(src_ptr, perm_ptr, start + lanes, end, SORTED)
    for p0 in range(start, end, BLOCK_E):
        # the next tile's edges are asked for before this tile's work
        next_mask, next_e, next_j = _tile_edges(src_ptr, perm_ptr, p0 + BLOCK_E + lanes, end,
                                                SORTED)
        xb = tl.load(xb_ptr + j[:, None] * F + f[None, :], mask=pmask[:, None], other=0.0)
        _, c, _, _, z1, z2, t2, _, _ = _edge_tile(
            dist_ptr, c_ptr, dc_ptr, xa, xb, e, pmask, wr, wd, w2t, b2, inv_rc2, mu_ptr,
            gamma_ptr, K, alpha, basis_lower, EXP_NORMAL, ENV_IN_BASIS, ACT, KP, DT, PREC)
        acc += t2 * c[:, None]
        if STORE:
            z_row = z_ptr + e[:, None] * (2 * F) + f[None, :]
            tl.store(z_row, z1.to(z_ptr.dtype.element_ty), mask=pmask[:, None])
            tl.store(z_row + F, z2.to(z_ptr.dtype.element_ty), mask=pmask[:, None])
        pmask, e, j = next_mask, next_e, next_j
    tl.store(out_ptr + row + f, tl.sum(acc, axis=0))


@autotune(_CONFIGS, ["num_nodes", "F", "KP", "PREC", "ACT", "BY_DST", "STORED", "SORTED"])
@triton.jit
def _edge_bwd_kernel(dist_ptr, c_ptr, dc_ptr, xa_ptr, xb_ptr, gu_ptr, src_ptr, dst_ptr, ptr_ptr,
                     perm_ptr, wr_ptr, wd_ptr, w2t_ptr, w2_ptr, b2_ptr, z_ptr, g_ptr, gz1_ptr,
                     gs_ptr, out_ptr, num_nodes, inv_rc2, mu_ptr, gamma_ptr, K, alpha, basis_lower,
                     EXP_NORMAL: tl.constexpr, ENV_IN_BASIS: tl.constexpr, ACT: tl.constexpr,
                     BY_DST: tl.constexpr, STORED: tl.constexpr, SORTED: tl.constexpr,
                     F: tl.constexpr, KP: tl.constexpr, DT: tl.constexpr, PREC: tl.constexpr,
                     BLOCK_E: tl.constexpr):
    """``out[n] = sum_{p in segment n} dL/dz1_{perm[p]}`` for this program's node ``n``.

    ``BY_DST``: the segments are the destination layout's (``n`` is every edge's ``i``;
    ``out`` is ``grad_xa``) and ``g[e] = dL/dd_e`` is written for every visited edge; else
    the source layout's (``n`` is every edge's ``j``; ``out`` is ``grad_xb``).

    ``STORED`` (with ``BY_DST`` only): ``z1``, ``z2`` are read from ``z_ptr`` (written by
    the forward with ``STORE``) instead of evaluated from ``xa``, ``xb`` (not used), and
    ``dL/dz1_e`` is written to row ``e`` of ``gz1_ptr [E, F]`` for the source layout's sums:
    in FP32 with FP32 operands; with 16-bit ones in ``DT`` divided by its scale (the row's
    largest ``|dL/dz2|``), the scale at ``gs_ptr [E]`` FP32. Otherwise ``z_ptr``,
    ``gz1_ptr`` and ``gs_ptr`` are not used (any pointer).

    The other arguments as `_edge_fwd_kernel`'s, with: ``gu_ptr`` ``dL/du [N, F]`` FP32;
    ``dst_ptr`` the edges' destinations ``[E]``; ``ptr_ptr``, ``perm_ptr`` the layout
    ``BY_DST`` selects; ``w2_ptr`` ``W2 [F, F]`` in ``DT``; ``g_ptr`` ``[E]`` FP32;
    ``out_ptr`` ``[N, F]`` FP32.
    """
    tl.static_assert(BY_DST or not STORED, "stored activations: destination layout only")
    f = tl.arange(0, F)
    wr = _load_weight(wr_ptr, tl.arange(0, KP), f, F, 1, DT, PREC)
    w2t = _load_weight(w2t_ptr, f, f, F, 1, DT, PREC)
    w2 = _load_weight(w2_ptr, f, f, F, 1, DT, PREC)
    wd = tl.load(wd_ptr + f)
    b2 = tl.load(b2_ptr + f)
    node = tl.program_id(0)
    start = tl.load(ptr_ptr + node)
    end = tl.load(ptr_ptr + node + 1)
    row = node.to(tl.int64) * F
    if BY_DST:  # the destination's rows, once
        xa = tl.load(xa_ptr + row + f)[None, :]
        gu = tl.load(gu_ptr + row + f)[None, :]
    else:
        xb = tl.load(xb_ptr + row + f)[None, :]
    acc = tl.zeros([BLOCK_E, F], dtype=tl.float32)
    if BY_DST:  # noqa: SIM108 - a constexpr if/else
        other_ptr = src_ptr
    else:
        other_ptr = dst_ptr
    lanes = tl.arange(0, BLOCK_E)
    pmask, e, other = _tile_edges(other_ptr, perm_ptr, start + lanes, end, SORTED)
    for p0 in range(start, end, BLOCK_E):
        # the next tile's edges are asked for before this tile's work
        next_mask, next_e, next_other = _tile_edges(other_ptr, perm_ptr, p0 + BLOCK_E + lanes,
                                                    end, SORTED)
        rows = pmask[:, None]
        if not BY_DST:  # other: the destinations
            xa = tl.load(xa_ptr + other[:, None] * F + f[None, :], mask=rows, other=0.0)
            gu = tl.load(gu_ptr + other[:, None] * F + f[None, :], mask=rows, other=0.0)
        if STORED:  # the MLP's pre-activations as the forward made them; radial terms anew
            z_row = z_ptr + e[:, None] * (2 * F) + f[None, :]
            _, dact1 = activation_f32(tl.load(z_row, mask=rows, other=0.0).to(tl.float32), ACT)
            t2, dact2 = activation_f32(tl.load(z_row + F, mask=rows, other=0.0).to(tl.float32),
                                       ACT)
            d, c, dc, _, dbasis = _edge_geometry(dist_ptr, c_ptr, dc_ptr, e, pmask, mu_ptr,
                                                 gamma_ptr, K, alpha, basis_lower, EXP_NORMAL,
                                                 ENV_IN_BASIS, KP)
        else:
            if BY_DST:  # other: the sources
                xb = tl.load(xb_ptr + other[:, None] * F + f[None, :], mask=rows, other=0.0)
            d, c, dc, dbasis, _, _, t2, dact1, dact2 = _edge_tile(
                dist_ptr, c_ptr, dc_ptr, xa, xb, e, pmask, wr, wd, w2t, b2, inv_rc2, mu_ptr,
                gamma_ptr, K, alpha, basis_lower, EXP_NORMAL, ENV_IN_BASIS, ACT, KP, DT, PREC)
        gz2 = gu * c[:, None] * dact2
        if DT != tl.float32:  # noqa: SIM300 - 16-bit: rows in the best-resolved range
            rmax = tl.max(tl.abs(gz2), axis=1)
            rmax = tl.where(rmax > 0, rmax, 1.0)
            gz1 = mma(gz2 * rcp_f32(rmax)[:, None], w2, DT, PREC) * dact1  # row / rmax
            if STORED:  # kept so, in 16 bits, with its scale
                tl.store(gz1_ptr + e[:, None] * F + f[None, :],
                         gz1.to(gz1_ptr.dtype.element_ty), mask=rows)
                tl.store(gs_ptr + e, rmax, mask=pmask)
            gz1 = gz1 * rmax[:, None]
        else:
            gz1 = mma(gz2, w2, DT, PREC) * dact1
            if STORED:
                tl.store(gz1_ptr + e[:, None] * F + f[None, :], gz1, mask=rows)
        acc += gz1
        if BY_DST:
            dz1 = (2.0 * d * inv_rc2)[:, None] * wd[None, :] + mma(dbasis, wr, DT, PREC)
            g = tl.sum(gu * t2, axis=1) * dc + tl.sum(gz1 * dz1, axis=1)
            tl.store(g_ptr + e, g, mask=pmask)
        pmask, e, other = next_mask, next_e, next_other
    tl.store(out_ptr + row + f, tl.sum(acc, axis=0))


def _kernel_args(params: EdgeMLPParams, spec: RadialSpec, precision: str, activation: str,
                 F: int) -> dict:
    if params.num_basis != spec.num_basis:
        raise ValueError(f"edge MLP expects K={params.num_basis}, basis has {spec.num_basis}")
    if params.width != F:
        raise ValueError(f"edge MLP width {params.width} does not match xa, xb width {F}")
    if not spec.envelope_on_filter:
        raise ValueError("egnn_edge needs the cosine envelope on the messages "
                         "(RadialSpec.envelope_on_filter)")
    if precision not in PRECISIONS:
        raise ValueError(f"egnn_edge precision must be one of {PRECISIONS}, got {precision!r}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"egnn_edge activation must be one of {ACTIVATIONS}, "
                         f"got {activation!r}")
    args = spec.kernel_args()
    for name in _ENVELOPE_ARGS + ("ENV_ON_FILTER",):  # the envelope comes from edge_envelopes
        del args[name]
    return dict(wr_ptr=params.wr_t, wd_ptr=params.wd, w2t_ptr=params.w2_t, b2_ptr=params.b2,
                inv_rc2=1.0 / spec.cutoff_upper**2, ACT=activation, F=F,
                KP=params.wr_t.shape[0], DT=torch_to_tl_dtype(params.dtype), PREC=precision,
                **args)


#: `kernels.radial_basis.RadialSpec.kernel_args` of the envelope (`_envelope_kernel`'s).
_ENVELOPE_ARGS = ("env_a", "env_b", "env_upper", "env_lower", "ENV_LOWER")


@triton.jit(do_not_specialize=["E", "row_stride"])
def _envelope_kernel(dist_ptr, out_ptr, E, row_stride, env_a, env_b, env_upper, env_lower,
                     ENV_LOWER: tl.constexpr, BLOCK: tl.constexpr):
    """``out[0, e] = C(d_e)``, ``out[1, e] = C'(d_e)`` for ``e < E`` (``dist_ptr`` ``[E]``,
    ``out_ptr`` ``[2, E]`` with rows ``row_stride`` apart, FP32; the envelope's arguments as
    `kernels.radial_basis.edge_envelope`'s)."""
    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = e < E
    d = tl.load(dist_ptr + e, mask=inside, other=0.0)
    c, dc = edge_envelope(d, env_a, env_b, env_upper, env_lower, ENV_LOWER, False, True)
    tl.store(out_ptr + e, c, mask=inside)
    tl.store(out_ptr + row_stride + e, dc, mask=inside)


def edge_envelopes(dist, spec: RadialSpec):
    """The messages' envelope and its derivative at every edge length (Triton).

    Parameters
    ----------
    dist : Tensor, float32 [E]
        Edge lengths (`kernels.edge_distances`); not differentiated through (`egnn_edge`
        applies ``C'`` itself).
    spec : RadialSpec
        Its cosine envelope ``C`` on ``[cutoff_lower, cutoff_upper]``.

    Returns
    -------
    Tensor, float32 [2, E]
        ``C(d)`` and ``C'(d)``, zero at and beyond the cutoff, with the arithmetic of the
        kernels that evaluate it in place (`kernels.radial_basis.edge_envelope`). Each row
        starts on a 16-byte boundary (the row stride is E rounded up to 4): the kernels
        that read the rows are compiled for aligned pointers, and an edge count that moved
        the second row off that boundary would compile and autotune them again whenever a
        neighbour list is rebuilt.
    """
    args = spec.kernel_args()
    dist = dist.detach().contiguous()
    E = dist.numel()
    out = torch.empty(2, -(-E // 4) * 4, dtype=torch.float32, device=dist.device)[:, :E]
    if E:
        _envelope_kernel[(triton.cdiv(E, 1024),)](
            dist, out, E, out.stride(0), BLOCK=1024, **{k: args[k] for k in _ENVELOPE_ARGS})
    return out


class _EGNNEdge(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dist, envelope, xa, xb, src, dst, csr, params, spec, precision, activation,
                store, sorted_edges):
        dist, xa, xb = dist.contiguous(), xa.contiguous(), xb.contiguous()
        n, F = csr.num_nodes, xa.shape[1]
        args = _kernel_args(params, spec, precision, activation, F)
        out = torch.empty(n, F, dtype=torch.float32, device=xa.device)
        # rows of edges outside every segment are never written nor read
        z = torch.empty(src.numel() if store else 0, 2, F, dtype=params.dtype,
                        device=xa.device)
        if n:
            _edge_fwd_kernel[(n,)](dist, *envelope, xa, xb, src, csr.dst_ptr, csr.dst_perm,
                                   out_ptr=out, z_ptr=z if store else out, num_nodes=n, STORE=store,
                                   SORTED=sorted_edges, **args)
        ctx.save_for_backward(dist, envelope, xa, xb, src, dst, z, *csr)
        ctx.args, ctx.w2, ctx.stored, ctx.sorted = args, params.w2, store, sorted_edges
        return out

    @staticmethod
    def backward(ctx, grad_u):
        dist, envelope, xa, xb, src, dst, z, *csr = ctx.saved_tensors
        csr = GraphCSR(*csr)
        n = csr.num_nodes
        gu = grad_u.contiguous().float()
        g = torch.zeros(src.numel(), dtype=torch.float32, device=xa.device)
        grad_xa = torch.zeros_like(xa)  # rows beyond the graph's nodes: 0
        grad_xb = torch.zeros_like(xb)
        if n and ctx.stored:  # one pass: grad_xb is the source layout's sums of dL/dz1
            # dL/dz1 rows: FP32, or in 16 bits each divided by its scale (16-bit operands)
            gz1 = torch.empty(src.numel(), xa.shape[1], dtype=ctx.w2.dtype, device=xa.device)
            scales = torch.empty(src.numel() if ctx.w2.dtype != torch.float32 else 0,
                                 dtype=torch.float32, device=xa.device)
            _edge_bwd_kernel[(n,)](dist, *envelope, xa, xb, gu, src, dst, csr.dst_ptr,
                                   csr.dst_perm, w2_ptr=ctx.w2, z_ptr=z, g_ptr=g,
                                   gz1_ptr=gz1, gs_ptr=scales if scales.numel() else g,
                                   out_ptr=grad_xa, num_nodes=n, BY_DST=True, STORED=True,
                                   SORTED=ctx.sorted, **ctx.args)
            grad_xb[:n] = (scaled_segment_sum(gz1, scales, csr.src_ptr, csr.src_perm)
                           if scales.numel() else segment_sum(gz1, csr.src_ptr, csr.src_perm))
        elif n:  # two passes, each evaluating the edge MLP anew
            for by_dst, ptr, perm, out in ((True, csr.dst_ptr, csr.dst_perm, grad_xa),
                                           (False, csr.src_ptr, csr.src_perm, grad_xb)):
                _edge_bwd_kernel[(n,)](dist, *envelope, xa, xb, gu, src, dst, ptr, perm,
                                       w2_ptr=ctx.w2, z_ptr=g, g_ptr=g, gz1_ptr=g, gs_ptr=g,
                                       out_ptr=out, num_nodes=n,
                                       BY_DST=by_dst, STORED=False,
                                       SORTED=by_dst and ctx.sorted, **ctx.args)
        return g, None, grad_xa, grad_xb, *(None,) * 9


def egnn_edge(dist, xa, xb, src, dst, csr: GraphCSR, params: EdgeMLPParams, spec: RadialSpec,
              precision: str = "tf32x3", activation: str = "silu", saved: str = "none",
              sorted_edges: bool = False, envelope=None):
    """Fused EGNN edge block: summed, enveloped edge-MLP messages per node (Triton).

    Parameters
    ----------
    dist : Tensor, float32 [E]
        Edge lengths ``|r_dst - r_src|`` (`kernels.edge_distances`, computed once for every
        layer of a step); entries of padding edges are never read and get zero gradient.
        May require grad.
    xa, xb : Tensor, float32 [P', F]
        The first edge layer's destination part with its bias, ``h Wi^T + b1``, and source
        part, ``h Wj^T``; ``P' >= csr.num_nodes``, F a power of two >= 16. May require grad.
    src, dst : Tensor, int64 [E]
        Edge endpoints (message ``src -> dst``).
    csr : GraphCSR
        Both CSR layouts of these edges (`kernels.csr.build_csr`); padding edges are in no
        segment and contribute nothing. Any graph (symmetry is not assumed).
    params : EdgeMLPParams
        Packed edge-side weights (`pack_edge_mlp`); their dtype selects FP32 or 16-bit GEMM
        operands.
    spec : RadialSpec
        Basis and envelope; ``envelope_on_filter`` must be set (the messages' envelope).
    precision : {"tf32x3", "tf32", "ieee"}
        Product mode of the FP32 GEMMs (`kernels.cfconv.PRECISIONS`): three TF32 products
        (about FP32's accuracy, the default), one TF32 product of rounded operands, or
        CUDA-core FMA; ignored by 16-bit weights. Sums onto nodes are FP32 in every mode.
    activation : {"silu", "tanh"}
        The edge MLP's activation (after both layers).
    saved : {"none", "activations"}
        What the forward keeps per edge for the backward (`SAVED`): nothing, the backward
        evaluating the edge MLP anew in two passes (the default), or the pre-activations
        ``z1``, ``z2`` (``[E, 2, F]`` in the GEMM dtype, 8 F bytes per edge with FP32
        operands, 4 F with 16-bit ones; only when autograd records and ``dist``, ``xa`` or
        ``xb`` requires grad), the backward then a single pass that evaluates nothing
        twice. Values agree; gradients to round-off with FP32 operands, to the 16-bit
        rounding of ``z`` otherwise.
    sorted_edges : bool
        The destination layout's permutation is the identity (``csr.dst_perm[p] = p`` for
        every edge in a segment, as a searched graph's, `kernels.pair_search`): the kernels
        then skip reading it. Results are the same either way.
    envelope : Tensor, float32 [2, E], optional
        `edge_envelopes` of ``dist``, computed once for every layer of a step; None computes
        it here.

    Returns
    -------
    Tensor, float32 [csr.num_nodes, F]
        ``u_i = sum_{e: dst_e = i} act(act(z1_e) W2^T + b2) C(d_e)``. Gradients flow to
        ``pos``, ``xa`` and ``xb`` only (see the module docstring); weights and basis
        parameters get none.
    """
    if saved not in SAVED:
        raise ValueError(f"egnn_edge saved must be one of {SAVED}, got {saved!r}")
    # (inside the autograd function, grad mode is off and needs_input_grad ignores it)
    store = (saved == "activations" and torch.is_grad_enabled()
             and any(t.requires_grad for t in (dist, xa, xb)))
    if envelope is None:
        envelope = edge_envelopes(dist, spec)
    return _EGNNEdge.apply(dist, envelope, xa, xb, src, dst, csr, params, spec, precision,
                           activation, store, sorted_edges)


def egnn_edge_reference(dist, xa, xb, src, dst, csr: GraphCSR, params: EdgeMLPParams,
                        spec: RadialSpec, precision: str = "ieee", activation: str = "silu",
                        saved: str = "none", sorted_edges: bool = False, envelope=None):
    """PyTorch reference of `egnn_edge` (materialises E x F; computes in ``dist.dtype``).

    Plain autograd, so it also differentiates float64 inputs for finite-difference checks
    (with `kernels.edge_distances.edge_distances_reference` for the lengths). Uses the packed
    weights (rounded to 16 bits if packed so) in ``dist.dtype``; ``precision``, ``saved``,
    ``sorted_edges`` and ``envelope`` are accepted for the same signature and change nothing
    (the envelope is evaluated from ``dist`` by autograd).
    """
    act = torch.nn.functional.silu if activation == "silu" else torch.tanh
    valid = valid_edge_mask(csr)
    n, dtype = csr.num_nodes, dist.dtype
    dist = torch.where(valid, dist, 1.0)  # padding: a harmless length, no gradient
    basis, env = radial_reference_terms(dist, spec)
    wr = params.wr_t[: params.num_basis].to(dtype)
    z1 = (xa.to(dtype)[torch.where(valid, dst, 0)] + xb.to(dtype)[torch.where(valid, src, 0)]
          + (dist * dist / spec.cutoff_upper**2)[:, None] * params.wd.to(dtype) + basis @ wr)
    m = act(act(z1) @ params.w2_t.to(dtype) + params.b2.to(dtype)) * env[:, None]
    out = torch.zeros(n + 1, xa.shape[1], dtype=dtype, device=xa.device)
    return out.index_add(0, torch.where(valid, dst, n), m * valid[:, None])[:n]
