"""One exact filter per unordered pair, on tensor cores, read by the convolution kernels.

A SchNet filter ``W(d) = (A2 tanh(A1 e(d) + a1) + b2) C(d)`` depends on the edge length
only, and the engine's graphs are symmetric with bit-identical lengths for both directions
of a pair. So each step, per block:

1. `pair_filter_rows` evaluates the filter network once per pair, in dense tiles of
   ``BLOCK_P`` pairs (`_pair_filter_kernel`): the lengths (`kernels.edge_distances`, shared
   by every block), the basis and envelope, the two filter GEMMs and, from the same tiles,
   the exact derivative ``W'(d) = C (A2 (tanh'(z) * A1 e'(d))) + C' (A2 tanh(z) + b2)`` (one
   more GEMM of each size), all on chip; it writes the rows ``W`` and ``W'`` of every pair,
   in FP32 (the GEMMs one TF32 product of rounded operands, as `kernels.cfconv`) or in
   FP16 (16-bit GEMMs with the calibrated scales; FP16 rows also for ``mlp_precision=bf16``,
   whose filter values are far inside FP16's range and resolved 8x finer).
2. `kernels.tabulated_cfconv` reads them instead of interpolating a table: the forward
   ``u_i = sum_e xs[src_e] * W[row_e]``, the backward ``grad_xs`` and ``dE/dd_e = <grad_u[dst_e]
   * xs[src_e], W'[row_e]>``, one destination-layout walk each, no atomics.

Against the per-edge recomputation of `kernels.cfconv`: half the filter evaluations, tiles
of 32-128 pairs instead of one node's 16-32 edges (tensor cores busier, the weights' fragments
reused across the tile), and a backward without any GEMM; for the price of writing the
pair rows once (``2 F`` values per pair and block) and reading them per edge. Nothing of
size E x F is written (the rows are per pair, ``E/2 x F``; in 16-bit half of that again).

Rows are laid out by `pair_layout`: the representative of a pair is its direction whose
edge id is not above its reverse's, and the rows follow the destination layout's order of
the representatives. The reverse of the edge in destination slot ``p`` is ``src_perm[p]``
on every symmetric layout the engine builds (`kernels.csr.build_csr_sorted_pairs`,
`kernels.pair_search_csr`: the ``k``-th edge out of a node is the reverse of the ``k``-th
edge into it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels._triton import autotune, mma, pick_configs, tl, triton
from kernels.cfconv import FilterParams, _hidden, _kernel_args, _load_weight
from kernels.csr import GraphCSR
from kernels.radial_basis import (
    RadialSpec,
    edge_envelope,
    radial_features,
    radial_reference_terms,
)

__all__ = ["PairLayout", "PairFilterRows", "pair_layout", "pair_layout_reference",
           "pair_filter_rows",
           "pair_filter_rows_reference", "ROW_DTYPES", "ROWS_BYTES", "rows_fit"]

#: Storage type of the rows per filter operand type.
ROW_DTYPES = {torch.float32: torch.float32, torch.float16: torch.float16,
              torch.bfloat16: torch.float16}


#: Largest size of one block's rows (``W`` and ``W'`` of every pair slot), bytes. The rows
#: of every block live until the backward pass; above this (1ENH x 1,024 replicas in FP32,
#: say) the per-edge kernel of `kernels.cfconv`, which writes nothing, is used instead.
ROWS_BYTES = 2 << 30


def rows_fit(num_edges: int, num_features: int, dtype: torch.dtype) -> bool:
    """Whether one block's pair rows for ``num_edges`` edge slots stay within `ROWS_BYTES`
    (``dtype``: the filter's operand type, `ROW_DTYPES` gives the rows')."""
    itemsize = torch.empty((), dtype=ROW_DTYPES[dtype]).element_size()
    return 2 * (num_edges // 2 + 1) * num_features * itemsize <= ROWS_BYTES


@dataclass(frozen=True)
class PairLayout:
    """The unordered pairs of a symmetric graph (no host synchronisation; capturable).

    Attributes
    ----------
    row : Tensor, int32 [E]
        Per edge id: the row of its pair (0 for edges in no segment; never read).
    edges : Tensor, int32 [C]
        Per row: the representative edge; ``C = E // 2 + 1`` rows of capacity.
    count : Tensor, int32 [1]
        Rows in use (on the device).
    """

    row: torch.Tensor
    edges: torch.Tensor
    count: torch.Tensor


_LAYOUT_BLOCK = 1024


@triton.jit
def _pair_slots(dst_perm_ptr, src_perm_ptr, live_ptr, E, BLOCK: tl.constexpr):
    """Slots ``p`` of this program, the edge ``e`` there, its reverse, whether the slot is in
    a segment and whether ``e`` represents its pair."""
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = p < tl.minimum(tl.load(live_ptr), E)
    e = tl.load(dst_perm_ptr + p, mask=live, other=0)
    rev = tl.load(src_perm_ptr + p, mask=live, other=0)
    return p, e, rev, live, live & (e <= rev)


@triton.jit(do_not_specialize=["E"])
def _pair_flag_kernel(dst_perm_ptr, src_perm_ptr, live_ptr, flag_ptr, E,
                      BLOCK: tl.constexpr):
    """``flag[p] = 1`` where destination slot ``p`` holds its pair's representative.

    dst_perm_ptr, src_perm_ptr: int32 [E] the layouts' edge ids per slot; live_ptr: int32 [1]
    slots in segments (``dst_ptr[-1]``); flag_ptr: int32 [E] out; E: slots; BLOCK: slots per
    program.
    """
    p, _, _, _, rep = _pair_slots(dst_perm_ptr, src_perm_ptr, live_ptr, E, BLOCK)
    tl.store(flag_ptr + p, rep.to(tl.int32), mask=p < E)


@triton.jit(do_not_specialize=["E"])
def _pair_row_kernel(dst_perm_ptr, src_perm_ptr, live_ptr, rank_ptr, row_ptr, edges_ptr, E,
                     capacity, REPRESENTATIVES: tl.constexpr, BLOCK: tl.constexpr):
    """Rows of the representatives (``REPRESENTATIVES``: ``row[e] = rank``, ``edges[rank] =
    e``), or of the other directions (``row[e] = row[reverse]``, a second launch).

    rank_ptr: int32 [E] inclusive prefix sum of the flags; row_ptr: int32 [E], edges_ptr:
    int32 [capacity] out; capacity: rows (ranks above it are clamped: only a truncated
    graph, grown and redone, has more); the rest as `_pair_flag_kernel`.
    """
    p, e, rev, live, rep = _pair_slots(dst_perm_ptr, src_perm_ptr, live_ptr, E, BLOCK)
    if REPRESENTATIVES:
        rank = tl.minimum(tl.load(rank_ptr + p, mask=rep, other=1) - 1, capacity - 1)
        tl.store(row_ptr + e, rank, mask=rep)
        tl.store(edges_ptr + rank, e, mask=rep)
    else:
        other = live & ~rep
        tl.store(row_ptr + e, tl.load(row_ptr + rev, mask=other, other=0), mask=other)


def pair_layout(csr: GraphCSR, num_edges: int) -> PairLayout:
    """Rows of the pairs of a symmetric graph laid out by the engine (see the module notes).

    Three small kernels and one prefix sum (`pair_layout_reference` does the same with
    PyTorch indexing: 295 against 93 us on 1ENH x 64, H200).

    Parameters
    ----------
    csr : GraphCSR
        Both layouts; ``csr.src_perm[p]`` must be the reverse of edge ``csr.dst_perm[p]``
        (`kernels.csr.build_csr_sorted_pairs`, `kernels.pair_search_csr`).
    num_edges : int
        E, the length of the edge arrays.

    Returns
    -------
    PairLayout
    """
    E = int(num_edges)
    device = csr.dst_perm.device
    capacity = E // 2 + 1
    row = torch.zeros(E, dtype=torch.int32, device=device)
    edges = torch.zeros(capacity, dtype=torch.int32, device=device)
    if E == 0:
        return PairLayout(row, edges, edges[:1].clone())
    args = (csr.dst_perm, csr.src_perm, csr.dst_ptr[-1:])
    grid = (triton.cdiv(E, _LAYOUT_BLOCK),)
    flag = torch.empty(E, dtype=torch.int32, device=device)
    _pair_flag_kernel[grid](*args, flag, E, BLOCK=_LAYOUT_BLOCK)
    rank = torch.cumsum(flag, 0, dtype=torch.int32)
    for representatives in (True, False):
        _pair_row_kernel[grid](*args, rank, row, edges, E, capacity,
                               REPRESENTATIVES=representatives, BLOCK=_LAYOUT_BLOCK)
    return PairLayout(row, edges, rank[-1:].clamp(max=capacity))


def pair_layout_reference(csr: GraphCSR, num_edges: int) -> PairLayout:
    """PyTorch reference of `pair_layout` (the same rows)."""
    E = int(num_edges)
    device = csr.dst_perm.device
    capacity = E // 2 + 1
    row = torch.zeros(E + 1, dtype=torch.int32, device=device)  # slot E: a sink
    edges = torch.zeros(capacity + 1, dtype=torch.int32, device=device)  # slot C: a sink
    if E == 0:
        return PairLayout(row[:0], edges[:capacity], edges[:1].clone())
    e = csr.dst_perm.long()
    rev = csr.src_perm.long()
    live = torch.arange(E, device=device) < csr.dst_ptr[-1]
    rep = live & (e <= rev)
    rank = torch.cumsum(rep, 0, dtype=torch.int32) - 1
    rank.clamp_(max=capacity - 1)
    sink = torch.full_like(e, E)
    row.index_put_((torch.where(rep, e, sink),), rank)
    other = live & ~rep
    row.index_put_((torch.where(other, e, sink),), row[torch.where(other, rev, sink)])
    edges.index_put_((torch.where(rep, rank.long(), capacity),), e.int())
    count = (rank[-1:] + 1).clamp(max=capacity)
    return PairLayout(row[:E], edges[:capacity], count)


@dataclass(frozen=True)
class PairFilterRows:
    """One block's filter and its derivative per pair, for `kernels.tabulated_cfconv`.

    Attributes
    ----------
    w, dw : Tensor, float32 or float16 [C, F]
        ``W(d)`` and ``dW/dd`` of each pair row (0 for ``d >= r_c``; rows from ``count`` on
        are never read and are left unwritten).
    row : Tensor, int32 [E]
        Per edge id: its row (`PairLayout.row`).
    """

    w: torch.Tensor
    dw: torch.Tensor
    row: torch.Tensor

    @property
    def num_features(self) -> int:
        return self.w.shape[1]


def _cfg(p, w, nc, hc=128):
    return triton.Config({"BLOCK_P": p, "NC": nc, "HC": hc}, num_warps=w, num_stages=1)


# Two ways to keep the live tiles small: output columns in chunks of NC (the second
# layer's two [BLOCK_P, NC] accumulators), or hidden units in chunks of HC (both outputs
# accumulated over them; HC = F: no hidden chunks). Every shape is checked on CPU by
# `tests/kernels/test_pair_filter.py`; the autotuner picks per GPU (one H200, the 585,728
# pairs of a 1ENH x 64 step, F = 128, K = 50: FP16 447 us a block). With 16-bit operands,
# 64- and 128-row tiles whose products have a 32-wide dimension stop with an illegal
# address on sm_90 (Triton 3.6): those shapes are offered to FP32 only.
_FP16_TILES = (_cfg(64, 4, 128, 64), _cfg(128, 8, 128, 64), _cfg(32, 4, 128, 128))
_FP32_TILES = (_cfg(64, 4, 32, 128), _cfg(128, 8, 128, 64), _cfg(32, 4, 128, 128))
_CONFIGS = pick_configs(list({str(c): c for c in (*_FP16_TILES, *_FP32_TILES)}.values()),
                        _cfg(16, 4, 16))


def _prune(configs, named_args, **kwargs):
    """The tiles of the operand type (`_FP16_TILES` or `_FP32_TILES`; the interpreter's one
    config otherwise), chunks no wider than F."""
    F = kwargs.get("F", named_args.get("F"))
    fp32 = kwargs.get("DT", named_args.get("DT")) == tl.float32
    tiles = [c.kwargs for c in (_FP32_TILES if fp32 else _FP16_TILES)]
    chosen = [c for c in configs if c.kwargs in tiles] or configs
    return [triton.Config({**c.kwargs, "NC": min(c.kwargs["NC"], F),
                           "HC": min(c.kwargs["HC"], F)}, num_warps=c.num_warps, num_stages=1)
            for c in chosen]


@autotune(_CONFIGS, ["F", "KP", "PREC"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _pair_filter_kernel(dist_ptr, edge_ptr, count_ptr, w1_ptr, s1_ptr, b1_ptr, w2_ptr,
                        s2_ptr, b2_ptr, w_out_ptr, dw_out_ptr, capacity, cutoff, mu_ptr,
                        gamma_ptr, K, alpha, basis_lower, env_a, env_b, env_upper, env_lower,
                        EXP_NORMAL: tl.constexpr, ENV_LOWER: tl.constexpr,
                        ENV_IN_BASIS: tl.constexpr, ENV_ON_FILTER: tl.constexpr,
                        F: tl.constexpr, KP: tl.constexpr, DT: tl.constexpr,
                        PREC: tl.constexpr, BLOCK_P: tl.constexpr, NC: tl.constexpr,
                        HC: tl.constexpr):
    """``w_out[k] = W(d)``, ``dw_out[k] = W'(d)`` at ``d = dist[edge[k]]`` for the rows ``k``
    of this tile below ``count[0]``.

    dist_ptr: float32 [E] edge lengths; edge_ptr: int32 [C] representative edges;
    count_ptr: int32 [1] rows in use; w1..b2: the packed filter (`kernels.cfconv.FilterParams`:
    ``A1^T [KP, F]``, ``A2^T [F, F]`` in ``DT``, FP32 scales and biases); w_out_ptr,
    dw_out_ptr: [C, F] rows (float32 or float16); capacity: C (the grid); cutoff: ``r_c``
    (rows at ``d >= r_c`` are 0); mu_ptr .. env_lower and the envelope flags: the basis and
    envelope (`kernels.radial_basis.RadialSpec.kernel_args`); F, KP: widths; DT, PREC: GEMM
    operand type and FP32 product mode (`kernels._triton.mma`); BLOCK_P: rows per program;
    NC: output columns per chunk of the second layer (a power of two dividing F).
    """
    f = tl.arange(0, F)
    k0 = tl.program_id(0) * BLOCK_P
    count = tl.load(count_ptr)
    for first in range(k0, tl.minimum(count, k0 + BLOCK_P), BLOCK_P):  # one tile, or none
        k = first + tl.arange(0, BLOCK_P)
        mask = k < count
        e = tl.load(edge_ptr + k, mask=mask, other=0).to(tl.int64)
        d = tl.load(dist_ptr + e, mask=mask, other=1.0)
        c, dc = edge_envelope(d, env_a, env_b, env_upper, env_lower, ENV_LOWER, ENV_IN_BASIS,
                              ENV_ON_FILTER)
        basis, dbasis = radial_features(d, c, dc, mu_ptr, gamma_ptr, K, alpha, basis_lower,
                                        KP, EXP_NORMAL, ENV_IN_BASIS)
        inside = (mask & (d < cutoff))[:, None]
        ty = w_out_ptr.dtype.element_ty
        if HC < F:  # hidden units in chunks, both outputs accumulated over them
            w = tl.zeros([BLOCK_P, F], dtype=tl.float32)
            dw = tl.zeros([BLOCK_P, F], dtype=tl.float32)
            for hc in tl.static_range(F // HC):
                h = hc * HC + tl.arange(0, HC)
                w1 = _load_weight(w1_ptr, tl.arange(0, KP), h, F, 1, DT, PREC)
                s1 = tl.load(s1_ptr + h)
                t = _hidden(basis, w1, s1, tl.load(b1_ptr + h), DT, PREC)
                r = (1.0 - t * t) * mma(dbasis, w1, DT, PREC) * s1[None, :]  # dt/dd
                w2 = _load_weight(w2_ptr, h, f, F, 1, DT, PREC)  # rows h of A2^T
                w += mma(t, w2, DT, PREC)
                dw += mma(r, w2, DT, PREC)
            s2 = tl.load(s2_ptr + f)[None, :]
            w = w * s2 + tl.load(b2_ptr + f)[None, :]
            dw = dw * s2
            if ENV_ON_FILTER:
                dw = dw * c[:, None] + w * dc[:, None]
                w = w * c[:, None]
            rows = k.to(tl.int64)[:, None] * F + f[None, :]
            tl.store(w_out_ptr + rows, tl.where(inside, w, 0.0).to(ty), mask=mask[:, None])
            tl.store(dw_out_ptr + rows, tl.where(inside, dw, 0.0).to(ty), mask=mask[:, None])
        else:
            w1 = _load_weight(w1_ptr, tl.arange(0, KP), f, F, 1, DT, PREC)
            s1 = tl.load(s1_ptr + f)
            t = _hidden(basis, w1, s1, tl.load(b1_ptr + f), DT, PREC)
            r = (1.0 - t * t) * mma(dbasis, w1, DT, PREC) * s1[None, :]  # dt/dd
            for ch in tl.static_range(F // NC):
                cols = ch * NC + tl.arange(0, NC)
                w2 = _load_weight(w2_ptr, f, cols, F, 1, DT, PREC)
                s2 = tl.load(s2_ptr + cols)[None, :]
                w = mma(t, w2, DT, PREC) * s2 + tl.load(b2_ptr + cols)[None, :]
                dw = mma(r, w2, DT, PREC) * s2
                if ENV_ON_FILTER:
                    dw = dw * c[:, None] + w * dc[:, None]
                    w = w * c[:, None]
                rows = k.to(tl.int64)[:, None] * F + cols[None, :]
                tl.store(w_out_ptr + rows, tl.where(inside, w, 0.0).to(ty),
                         mask=mask[:, None])
                tl.store(dw_out_ptr + rows, tl.where(inside, dw, 0.0).to(ty),
                         mask=mask[:, None])


def pair_filter_rows(dist, layout: PairLayout, filt: FilterParams, spec: RadialSpec,
                     precision: str = "tf32") -> PairFilterRows:
    """``W`` and ``W'`` of one block for every pair of ``layout`` (Triton).

    Parameters
    ----------
    dist : Tensor, float32 [E]
        Edge lengths (`kernels.edge_distances`; read without gradient: the convolution
        returns ``dE/dd`` through ``W'``).
    layout : PairLayout
    filt : FilterParams
        The packed filter network; its dtype selects FP32 (TF32 products, FP32 rows) or
        16-bit GEMMs (FP16 rows, `ROW_DTYPES`).
    spec : RadialSpec
        Basis and envelope.
    precision : {"tf32", "tf32x3", "ieee"}
        FP32 product mode (`kernels.cfconv.PRECISIONS`).

    Returns
    -------
    PairFilterRows
    """
    if dist.dtype != torch.float32 or dist.ndim != 1:
        raise ValueError(f"pair_filter_rows needs float32 edge lengths [E]; got {dist.dtype} "
                         f"{tuple(dist.shape)}")
    F = filt.lin1.weight_t.shape[1]
    args = _kernel_args(filt, spec, precision, F)
    capacity = layout.edges.numel()
    dtype = ROW_DTYPES[filt.dtype]
    w = torch.empty(capacity, F, dtype=dtype, device=dist.device)
    dw = torch.empty_like(w)
    if capacity:
        _pair_filter_kernel[lambda meta: (triton.cdiv(capacity, meta["BLOCK_P"]),)](
            dist.detach(), layout.edges, layout.count, w_out_ptr=w, dw_out_ptr=dw,
            capacity=capacity, cutoff=spec.cutoff_upper, **args)
    return PairFilterRows(w, dw, layout.row)


def pair_filter_rows_reference(dist, layout: PairLayout, filt: FilterParams,
                               spec: RadialSpec, precision: str = "ieee") -> PairFilterRows:
    """PyTorch reference of `pair_filter_rows`: rows in ``dist.dtype``.

    The dequantized weights (exact for FP32 packing), the reference basis and envelope, and
    ``W'`` by forward-mode differentiation; rows past ``count`` and at ``d >= r_c`` are 0.
    ``precision`` is accepted for the same signature and changes nothing.
    """
    dtype = dist.dtype
    d = dist.detach()[layout.edges.long()]
    w1, b1 = (t.to(dtype) for t in filt.lin1.dequantized())
    w2, b2 = (t.to(dtype) for t in filt.lin2.dequantized())

    def filter_fn(x):
        basis, env = radial_reference_terms(x, spec)
        return (torch.tanh(basis @ w1.t() + b1) @ w2.t() + b2) * env[:, None]

    w, dw = torch.func.jvp(filter_fn, (d,), (torch.ones_like(d),))
    keep = ((torch.arange(d.numel(), device=d.device) < layout.count)
            & (d < spec.cutoff_upper))[:, None]
    return PairFilterRows(torch.where(keep, w, 0.0), torch.where(keep, dw, 0.0), layout.row)

