"""Fused Deep Potential (se_e2_a) descriptor: environment matrix, tabulated embedding and the
``A_i`` accumulation in one kernel per destination, and its backward.

For every edge ``e = (src j -> dst i)`` within the cutoff, with ``d_e = r_j - r_i``,
``r = |d_e|``::

    u      = clamp((r - r_s) / (r_c - r_s), 0, 1),   sw = u^3 (-6 u^2 + 15 u - 10) + 1
    s      = sw / r                      (the embedding networks' input x = s)
    R_e    = s [1, d_x / r, d_y / r, d_z / r]                               [4]
    G_e    = g_{n_e}(s)                  read from the table, n_e = t_i T + t_j (or t_j)  [M1]
    A_i    = (1 / N_c) sum_{e: dst_e = i} G_e R_e^T                            [N, M1, 4]

``g_n`` is read from one `kernels.tabulated.FilterTable` holding all ``P`` networks side by
side (``F = P M1`` columns, network ``n`` in columns ``n M1 .. (n+1) M1``) over
``u = x - lower``; inputs outside ``[lower, lower + (G-1) h]`` are clamped to it (zero
slope), as `workbench.model.dp_tables` does in PyTorch. The table (values and slopes of the
exact networks, cubic Hermite pieces, ``c2``, ``c3`` in scaled float16) is the machinery of
CGSchNet's tabulated filters (`kernels.tabulated._table_eval` reads it).

Forward (`_descriptor_fwd_kernel`): one program owns one destination node, i.e. its segment
of the destination-grouped CSR (`kernels.csr`), and streams it in tiles of ``BLOCK_E``
edges: positions, ``r``, ``s``, ``R``, the four coefficient rows of each edge's network and
interval, Horner, and ``G R^T`` added into four ``[BLOCK_E, M1]`` FP32 register
accumulators (one per column of ``R``), summed over their lanes once at the end and written
once: no atomics, deterministic, nothing of size ``E x M1`` in memory.

Backward (`_descriptor_bwd_kernel`), given ``gA = dE/dA [N, M1, 4]``: the same walk, one
program per destination holding ``gA_i`` in registers; per edge it recomputes ``G`` and
``G' = dG/dx`` from the table and writes ``v_e = dE/dr_e`` (``r_e = r_i - r_j = -d_e``, the
convention of `kernels.segment_reduce.edge_vectors_to_positions`)::

    gG   = (1/N_c) gA_i R_e                 dE/dG_e                            [M1]
    gR   = (1/N_c) gA_i^T G_e               dE/dR_e                            [4]
    gx   = < gG, G' >                       dE/dx_e
    dE/dd_e = ((gR_0 + gx) s' + <gR_{1:3}, d> q') d / r + q gR_{1:3},   q = s / r

with ``s' = (sw' - s) / r`` and ``q' = (s' - q) / r``. The ``v [E, 3]`` rows are the only
per-edge memory; `edge_vectors_to_positions` sums them onto both endpoints without atomics.
The table gets no gradient; types and the graph none.

Padding: edges outside every CSR segment are never visited; edges in a segment at or beyond
the cutoff (candidates of a neighbour list) have ``s = s' = 0`` and contribute nothing, and
their ``v`` rows are written as zeros.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels._triton import autotune, check_no_grad, pick_configs, sqrt_rounded, tl, triton
from kernels.csr import GraphCSR, valid_edge_mask
from kernels.segment_reduce import edge_vectors_to_positions
from kernels.tabulated import FilterTable, _table_eval

__all__ = ["DescriptorSpec", "dp_descriptor", "dp_descriptor_reference"]


class DescriptorSpec(NamedTuple):
    """The model's constants that the descriptor kernels read.

    Attributes
    ----------
    cutoff_smooth : float
        ``r_s`` (Å), where the switching starts.
    cutoff : float
        ``r_c`` (Å); edges at or beyond it contribute nothing.
    num_types : int
        ``T``, the bead types (network ``t_i T + t_j`` per ordered pair).
    type_one_side : bool
        One network per neighbour type (network ``t_j``).
    num_neighbors : float
        ``N_c``, the normalisation of ``A``.
    lower : float
        ``x_lo``: the table's grid starts at ``x = lower``.
    width : int
        ``M1``, the embedding width: a power of two >= 16.
    """

    cutoff_smooth: float
    cutoff: float
    num_types: int
    type_one_side: bool
    num_neighbors: float
    lower: float
    width: int


@triton.jit
def _edge_terms(pos_ptr, types_ptr, src_ptr, perm_ptr, p, pmask, xi, yi, zi, ti, num_types,
                cutoff_smooth, cutoff, lower, inv_h, num_intervals, c01_ptr, c23_ptr,
                scale_ptr, f, F: tl.constexpr, M1: tl.constexpr, ONE_SIDE: tl.constexpr):
    """Per edge of the CSR slots ``p`` ([BLOCK_E], mask ``pmask``) of destination ``i``:
    edge id, the vector ``d = r_j - r_i``, ``1/r``, ``s``, ``s'`` and the embedding ``G``
    with its slope ``G'`` in ``x`` ([BLOCK_E, M1] each, zero where the edge is masked or at
    or beyond the cutoff).

    pos_ptr: float32 [N', 3]; types_ptr: int64 [N]; src_ptr: int64 [E]; perm_ptr: int32
    destination CSR permutation; xi, yi, zi: ``r_i``; ti: ``t_i``; num_types: T;
    cutoff_smooth, cutoff: ``r_s``, ``r_c``; lower, inv_h, num_intervals: the table's
    ``x_lo``, ``1/h`` and ``G - 1``; c01_ptr, c23_ptr, scale_ptr: the table
    (`kernels.tabulated.FilterTable`, ``F = P M1`` columns); f: int [M1] column offsets
    ``0 .. M1-1``; F, M1: table columns and embedding width; ONE_SIDE: network ``t_j``
    instead of ``t_i T + t_j``.
    """
    e = tl.load(perm_ptr + p, mask=pmask, other=0).to(tl.int64)
    j = tl.load(src_ptr + e, mask=pmask, other=0)
    dx = tl.load(pos_ptr + j * 3, mask=pmask, other=0.0) - xi
    dy = tl.load(pos_ptr + j * 3 + 1, mask=pmask, other=0.0) - yi
    dz = tl.load(pos_ptr + j * 3 + 2, mask=pmask, other=0.0) - zi
    r2 = dx * dx + dy * dy + dz * dz
    valid = pmask & (r2 < cutoff * cutoff) & (r2 > 0.0)
    r = sqrt_rounded(tl.where(valid, r2, 1.0), False)
    inv_r = 1.0 / r
    span = cutoff - cutoff_smooth
    u = tl.minimum(tl.maximum((r - cutoff_smooth) / span, 0.0), 1.0)
    sw = u * u * u * (u * (-6.0 * u + 15.0) - 10.0) + 1.0
    dsw = -30.0 * u * u * (1.0 - u) * (1.0 - u) / span
    s = tl.where(valid, sw * inv_r, 0.0)
    ds = tl.where(valid, (dsw - s) * inv_r, 0.0)
    tj = tl.load(types_ptr + j, mask=pmask, other=0)
    if ONE_SIDE:  # noqa: SIM108 - a constexpr if/else
        net = tj
    else:
        net = ti * num_types + tj
    cols = (net * M1)[:, None] + f[None, :]
    scale = tl.load(scale_ptr + cols, mask=valid[:, None], other=0.0)
    x = (s - lower) * inv_h
    inside = (x >= 0.0) & (x <= num_intervals)
    g, dg = _table_eval(c01_ptr, c23_ptr, scale, tl.maximum(s - lower, 0.0), valid, inv_h,
                        num_intervals, cols, F)
    return e, dx, dy, dz, inv_r, s, ds, g, tl.where(inside[:, None], dg, 0.0)


def _cfg(e, w):
    return triton.Config({"BLOCK_E": e}, num_warps=w)


# One destination per program; CG beads have tens of neighbours within the cutoff.
_CONFIGS = [_cfg(8, 1), _cfg(16, 2), _cfg(16, 4), _cfg(32, 4)]
_INTERPRET_CONFIG = _cfg(16, 4)


@autotune(pick_configs(_CONFIGS, _INTERPRET_CONFIG), ["num_nodes", "F", "M1", "ONE_SIDE"])
@triton.jit
def _descriptor_fwd_kernel(pos_ptr, types_ptr, src_ptr, ptr_ptr, perm_ptr, c01_ptr, c23_ptr,
                           scale_ptr, out_ptr, num_nodes, num_types, cutoff_smooth, cutoff,
                           lower, inv_h, num_intervals, inv_nc, F: tl.constexpr,
                           M1: tl.constexpr, ONE_SIDE: tl.constexpr, BLOCK_E: tl.constexpr):
    """``A_i`` for the destination ``i`` of this program (grid axis 0).

    pos_ptr: float32 [N', 3] positions; types_ptr: int64 [N] bead types; src_ptr: int64 [E]
    edge sources; ptr_ptr, perm_ptr: int32 destination CSR bounds [N + 1] and permutation
    [E] (`kernels.csr.GraphCSR`); c01_ptr: float32 [G-1, 2, F], c23_ptr: float16
    [G-1, 2, F], scale_ptr: float32 [F]: the table (`FilterTable`); out_ptr: float32
    [N, M1, 4], ``A`` (every row written); num_nodes: N (the autotuning key); num_types: T;
    cutoff_smooth, cutoff: ``r_s``, ``r_c`` (Å); lower: ``x_lo``; inv_h: ``1/h`` of the
    table; num_intervals: ``G - 1``; inv_nc: ``1/N_c``; F: ``P M1`` table columns; M1:
    embedding width (power of two); ONE_SIDE: one network per neighbour type; BLOCK_E:
    edges per tile.
    """
    node = tl.program_id(0).to(tl.int64)
    start = tl.load(ptr_ptr + node)
    end = tl.load(ptr_ptr + node + 1)
    xi = tl.load(pos_ptr + node * 3)
    yi = tl.load(pos_ptr + node * 3 + 1)
    zi = tl.load(pos_ptr + node * 3 + 2)
    ti = tl.load(types_ptr + node)
    f = tl.arange(0, M1)
    acc0 = tl.zeros([BLOCK_E, M1], dtype=tl.float32)
    acc1 = tl.zeros([BLOCK_E, M1], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_E, M1], dtype=tl.float32)
    acc3 = tl.zeros([BLOCK_E, M1], dtype=tl.float32)
    for p0 in range(start, end, BLOCK_E):
        p = p0 + tl.arange(0, BLOCK_E)
        _e, dx, dy, dz, inv_r, s, _ds, g, _dg = _edge_terms(
            pos_ptr, types_ptr, src_ptr, perm_ptr, p, p < end, xi, yi, zi, ti, num_types,
            cutoff_smooth, cutoff, lower, inv_h, num_intervals, c01_ptr, c23_ptr, scale_ptr,
            f, F, M1, ONE_SIDE)
        q = s * inv_r
        acc0 += g * s[:, None]
        acc1 += g * (q * dx)[:, None]
        acc2 += g * (q * dy)[:, None]
        acc3 += g * (q * dz)[:, None]
    row = out_ptr + node * M1 * 4 + f * 4
    tl.store(row, tl.sum(acc0, axis=0) * inv_nc)
    tl.store(row + 1, tl.sum(acc1, axis=0) * inv_nc)
    tl.store(row + 2, tl.sum(acc2, axis=0) * inv_nc)
    tl.store(row + 3, tl.sum(acc3, axis=0) * inv_nc)


@autotune(pick_configs(_CONFIGS, _INTERPRET_CONFIG), ["num_nodes", "F", "M1", "ONE_SIDE"])
@triton.jit
def _descriptor_bwd_kernel(pos_ptr, types_ptr, src_ptr, ptr_ptr, perm_ptr, c01_ptr, c23_ptr,
                           scale_ptr, ga_ptr, v_ptr, num_nodes, num_types, cutoff_smooth,
                           cutoff, lower, inv_h, num_intervals, inv_nc, F: tl.constexpr,
                           M1: tl.constexpr, ONE_SIDE: tl.constexpr, BLOCK_E: tl.constexpr):
    """``v_e = dE/dr_e`` for the edges into the destination of this program (grid axis 0).

    ga_ptr: float32 [N, M1, 4], ``dE/dA``; v_ptr: float32 [E, 3] (rows of the segment's
    edges written, zeros at or beyond the cutoff; other rows untouched); the other
    arguments as in `_descriptor_fwd_kernel`.
    """
    node = tl.program_id(0).to(tl.int64)
    start = tl.load(ptr_ptr + node)
    end = tl.load(ptr_ptr + node + 1)
    xi = tl.load(pos_ptr + node * 3)
    yi = tl.load(pos_ptr + node * 3 + 1)
    zi = tl.load(pos_ptr + node * 3 + 2)
    ti = tl.load(types_ptr + node)
    f = tl.arange(0, M1)
    row = ga_ptr + node * M1 * 4 + f * 4
    ga0 = (tl.load(row) * inv_nc)[None, :]
    ga1 = (tl.load(row + 1) * inv_nc)[None, :]
    ga2 = (tl.load(row + 2) * inv_nc)[None, :]
    ga3 = (tl.load(row + 3) * inv_nc)[None, :]
    for p0 in range(start, end, BLOCK_E):
        p = p0 + tl.arange(0, BLOCK_E)
        pmask = p < end
        e, dx, dy, dz, inv_r, s, ds, g, dg = _edge_terms(
            pos_ptr, types_ptr, src_ptr, perm_ptr, p, pmask, xi, yi, zi, ti, num_types,
            cutoff_smooth, cutoff, lower, inv_h, num_intervals, c01_ptr, c23_ptr, scale_ptr,
            f, F, M1, ONE_SIDE)
        q = s * inv_r
        dq = (ds - q) * inv_r
        grad_g = (ga0 * s[:, None] + ga1 * (q * dx)[:, None] + ga2 * (q * dy)[:, None]
                  + ga3 * (q * dz)[:, None])
        gx = tl.sum(grad_g * dg, axis=1)
        gr0 = tl.sum(ga0 * g, axis=1)
        gr1 = tl.sum(ga1 * g, axis=1)
        gr2 = tl.sum(ga2 * g, axis=1)
        gr3 = tl.sum(ga3 * g, axis=1)
        radial = ((gr0 + gx) * ds + (gr1 * dx + gr2 * dy + gr3 * dz) * dq) * inv_r
        out = v_ptr + e * 3  # v = dE/dr_e = -dE/dd_e
        tl.store(out, -(radial * dx + q * gr1), mask=pmask)
        tl.store(out + 1, -(radial * dy + q * gr2), mask=pmask)
        tl.store(out + 2, -(radial * dz + q * gr3), mask=pmask)


def _check(pos, types, table: FilterTable, spec: DescriptorSpec):
    width = spec.width
    if pos.dtype != torch.float32 or pos.ndim != 2 or pos.shape[1] != 3:
        raise ValueError(f"dp_descriptor needs float32 positions [N, 3], got {pos.dtype} "
                         f"{tuple(pos.shape)}")
    if types.dtype != torch.int64:
        raise ValueError(f"dp_descriptor needs int64 types, got {types.dtype}")
    if width < 16 or width & (width - 1) or table.num_features % width:
        raise ValueError(f"dp_descriptor needs M1 a power of two >= 16 dividing the table's "
                         f"{table.num_features} columns, got {width}")
    check_no_grad("dp_descriptor", coeffs01=table.coeffs01, coeffs23=table.coeffs23,
                  scale23=table.scale23)


def _arguments(pos, types, src, csr: GraphCSR, table: FilterTable, spec: DescriptorSpec):
    return dict(pos_ptr=pos, types_ptr=types, src_ptr=src, ptr_ptr=csr.dst_ptr,
                perm_ptr=csr.dst_perm, c01_ptr=table.coeffs01, c23_ptr=table.coeffs23,
                scale_ptr=table.scale23, num_nodes=csr.num_nodes, num_types=spec.num_types,
                cutoff_smooth=spec.cutoff_smooth, cutoff=spec.cutoff, lower=spec.lower,
                inv_h=1.0 / table.spacing, num_intervals=table.num_intervals,
                inv_nc=1.0 / spec.num_neighbors, F=table.num_features, M1=spec.width,
                ONE_SIDE=bool(spec.type_one_side))


class _Descriptor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pos, types, src, dst, csr, table, spec):
        pos = pos.contiguous()
        _check(pos, types, table, spec)
        n = csr.num_nodes
        out = torch.empty(n, spec.width, 4, dtype=torch.float32, device=pos.device)
        if n:
            _descriptor_fwd_kernel[(n,)](out_ptr=out,
                                         **_arguments(pos, types, src, csr, table, spec))
        ctx.save_for_backward(pos, types, src, dst, *csr)
        ctx.table, ctx.spec = table, spec
        return out

    @staticmethod
    def backward(ctx, grad_a):
        pos, types, src, dst, *csr = ctx.saved_tensors
        csr = GraphCSR(*csr)
        v = torch.empty(src.numel(), 3, dtype=torch.float32, device=pos.device)
        if csr.num_nodes:
            _descriptor_bwd_kernel[(csr.num_nodes,)](
                ga_ptr=grad_a.contiguous().float(), v_ptr=v,
                **_arguments(pos, types, src, csr, ctx.table, ctx.spec))
        return edge_vectors_to_positions(v, pos, src, dst, csr), None, None, None, None, None, \
            None


def dp_descriptor(pos, types, src, dst, csr: GraphCSR, table: FilterTable,
                  spec: DescriptorSpec):
    """The se_e2_a matrices ``A_i`` with the embedding read from its table, fused forward and
    backward (see the module docstring).

    Parameters
    ----------
    pos : Tensor, float32 [N', 3]
        Positions (Å), ``N' >= csr.num_nodes``; may require grad (the backward returns
        ``dE/dpos``).
    types : Tensor, int64 [N]
        Bead types, in ``[0, spec.num_types)``.
    src, dst : Tensor, int64 [E]
        Edge endpoints: ``j = src`` is the neighbour, ``i = dst`` the centre.
    csr : GraphCSR
        Both CSR layouts of these edges (`kernels.csr.build_csr`); the forward and backward
        walk the destination layout, `edge_vectors_to_positions` both. Padding edges are in
        no segment and contribute nothing.
    table : FilterTable
        All ``P`` embedding networks side by side (``P · M1`` columns) over ``x - lower``
        (`workbench.model.dp_tables`); never differentiated.
    spec : DescriptorSpec
        The model's constants.

    Returns
    -------
    Tensor, float32 [csr.num_nodes, M1, 4]
        ``A_i = (1/N_c) Σ_{e: dst_e = i} G_e R_e^T``. Deterministic (no atomics); the
        gradient flows to ``pos`` only, and is not itself differentiable.
    """
    return _Descriptor.apply(pos, types, src, dst, csr, table, spec)


def dp_descriptor_reference(pos, types, src, dst, csr: GraphCSR, table: FilterTable,
                            spec: DescriptorSpec):
    """PyTorch reference of `dp_descriptor` (autograd; materialises ``E x M1``).

    Computes in ``pos.dtype`` (float64 positions evaluate the same stored table in float64,
    for finite-difference checks); same arguments and result shape.
    """
    n, width = csr.num_nodes, spec.width
    valid = valid_edge_mask(csr)
    j, i = torch.where(valid, src, 0), torch.where(valid, dst, 0)
    d = pos[j] - pos[i]
    r2 = (d * d).sum(-1)
    inside = valid & (r2 < spec.cutoff**2) & (r2 > 0)
    r = torch.where(inside, r2, 1.0).sqrt()
    u = ((r - spec.cutoff_smooth) / (spec.cutoff - spec.cutoff_smooth)).clamp(0.0, 1.0)
    s = torch.where(inside, (u**3 * (u * (-6.0 * u + 15.0) - 10.0) + 1.0) / r, 0.0)
    env = torch.cat([s[:, None], d * (s / r)[:, None]], 1)
    net = types[j] if spec.type_one_side else types[i] * spec.num_types + types[j]
    cols = net[:, None] * width + torch.arange(width, device=pos.device)
    x = ((s - spec.lower) / table.spacing).clamp(0.0, table.num_intervals)
    k = x.detach().floor().long().clamp(max=table.num_intervals - 1)[:, None]
    t = (x - k[:, 0].to(x.dtype))[:, None]
    c0, c1 = table.coeffs01.to(pos.dtype)[k, :, cols].unbind(-1)
    scale = table.scale23.to(pos.dtype)[cols, None]
    c2, c3 = (table.coeffs23.to(pos.dtype)[k, :, cols] * scale).unbind(-1)
    g = ((c3 * t + c2) * t + c1) * t + c0
    outer = torch.where(inside[:, None, None], g[:, :, None] * env[:, None, :], 0.0)
    a = pos.new_zeros(n + 1, width, 4).index_add(0, torch.where(valid, dst, n), outer)
    return a[:n] / spec.num_neighbors
