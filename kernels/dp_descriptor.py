"""Fused Deep Potential (se_e2_a) descriptor: environment matrix, tabulated embedding and the
``A_i`` accumulation in one kernel per destination, and its backward.

For every edge ``e = (src j -> dst i)`` within the cutoff, with ``d_e = r_j - r_i``,
``r = |d_e|``::

    u      = clamp((r - r_s) / (r_c - r_s), 0, 1),   sw = u^3 (-6 u^2 + 15 u - 10) + 1
    s      = sw / r
    R_e    = s [1, d_x / r, d_y / r, d_z / r]                               [4]
    G_e    = g_{n_e}(s)                  read from the table, n_e = t_i T + t_j (or t_j)  [M1]
    A_i    = (1 / N_c) sum_{e: dst_e = i} G_e R_e^T                            [N, M1, 4]

With deepmd-kit's padded lists and statistics (`SlotStatistics`, the model's ``sel``) the
rows are normalised by the centre type's mean and deviation, the embedding reads the
normalised first column, and every empty slot of the lists adds the embedding of a zero
row (`workbench.model.deep_potential.CGDeepPotential.empty_slots`)::

    R^_e   = (R_e - mu_{t_i}) / sigma_{t_i},   x_e = R^_e[0]                    [4]
    O_t    = -mu_t / sigma_t                the normalised zero row of centre type t   [4]
    G0_e   = g_{n_e}(O_{t_i}[0])            `SlotStatistics.empty` row t_i T + t_j     [M1]
    L_t    = sum_u sel_u g_{n(t, u)}(O_t[0])                 `SlotStatistics.lists`   [M1]
    A_i    = (1 / N_c) [sum_e G_e(x_e) R^_e^T + (L_{t_i} - sum_e G0_e) O_{t_i}^T]

(the edges within the cutoff only). Without statistics ``x = s`` and ``R^ = R``: the
embedding networks' input is `CGDeepPotential.embedding_input` on either path.

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

    gG   = (1/N_c) gA_i R^_e                dE/dG_e                            [M1]
    gR   = (1/N_c) gA_i^T G_e / sigma_{t_i} dE/dR_e                            [4]
    gx   = < gG, G' > / sigma_{t_i,0}       dE/dx_e dx_e/ds
    dE/dd_e = ((gR_0 + gx) s' + <gR_{1:3}, d> q') d / r + q gR_{1:3},   q = s / r

with ``s' = (sw' - s) / r`` and ``q' = (s' - q) / r`` (``sigma = 1`` without statistics);
the empty slots' terms do not depend on the positions. The ``v [E, 3]`` rows are the only
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

__all__ = ["DescriptorSpec", "SlotStatistics", "dp_descriptor", "dp_descriptor_reference"]


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


class SlotStatistics(NamedTuple):
    """deepmd-kit's environment statistics and empty slots, as the descriptor kernels read
    them (float32, contiguous, on the positions' device; see the module docstring).

    Attributes
    ----------
    mean, std : Tensor, float32 [T, 4]
        ``mu`` and ``sigma`` per centre type (the model's ``env_mean``, ``env_std``).
    empty : Tensor, float32 [T * T, M1], optional
        ``G0``: row ``t_i T + t_j``, the table's embedding of an empty slot for type ``t_j``
        around a centre of type ``t_i``, at ``x = -mu_{t_i,0} / sigma_{t_i,0}``. None (with
        ``lists``) where ``mu`` is zero: an empty slot's row ``-mu / sigma`` is then zero and
        adds nothing, and the kernels skip the slots' work.
    lists : Tensor, float32 [T, M1], optional
        ``L``: row ``t``, ``sum_u sel_u G0[t T + u]``.
    """

    mean: torch.Tensor
    std: torch.Tensor
    empty: torch.Tensor | None = None
    lists: torch.Tensor | None = None


@triton.jit
def _edge_terms(pos_ptr, types_ptr, src_ptr, perm_ptr, p, pmask, xi, yi, zi, ti, num_types,
                cutoff_smooth, cutoff, shift, inv_scale, lower, inv_h, num_intervals,
                c01_ptr, c23_ptr, scale_ptr, f, F: tl.constexpr, M1: tl.constexpr,
                ONE_SIDE: tl.constexpr):
    """Per edge of the CSR slots ``p`` ([BLOCK_E], mask ``pmask``) of destination ``i``:
    edge id, the vector ``d = r_j - r_i``, ``1/r``, ``s``, ``s'``, the embedding input
    ``x = (s - shift) inv_scale``, the embedding ``G`` with its slope ``G'`` in ``x``
    ([BLOCK_E, M1] each, zero where the edge is masked or at or beyond the cutoff), the
    neighbour's type and whether the edge counts (in the segment, within the cutoff).

    pos_ptr: float32 [N', 3]; types_ptr: int64 [N]; src_ptr: int64 [E]; perm_ptr: int32
    destination CSR permutation; xi, yi, zi: ``r_i``; ti: ``t_i``; num_types: T;
    cutoff_smooth, cutoff: ``r_s``, ``r_c``; shift, inv_scale: ``mu_{t_i,0}`` and
    ``1/sigma_{t_i,0}`` (0 and 1 without statistics); lower, inv_h, num_intervals: the table's
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
    x = (s - shift) * inv_scale
    u = (x - lower) * inv_h
    inside = (u >= 0.0) & (u <= num_intervals)
    g, dg = _table_eval(c01_ptr, c23_ptr, scale, tl.maximum(x - lower, 0.0), valid, inv_h,
                        num_intervals, cols, F)
    return e, dx, dy, dz, inv_r, s, ds, x, g, tl.where(inside[:, None], dg, 0.0), tj, valid


@triton.jit
def _centre(ptr_ptr, pos_ptr, types_ptr, node):
    """Destination bead ``node``'s CSR segment ``[start, end)``, position and type."""
    return (tl.load(ptr_ptr + node), tl.load(ptr_ptr + node + 1), tl.load(pos_ptr + node * 3),
            tl.load(pos_ptr + node * 3 + 1), tl.load(pos_ptr + node * 3 + 2),
            tl.load(types_ptr + node))


@triton.jit
def _centre_statistics(mean_ptr, std_ptr, ti):
    """``mu_{t_i}`` and ``1/sigma_{t_i}`` (four scalars each) of the centre type ``ti``, from
    mean_ptr, std_ptr (float32 [T, 4]; zeros and ones without statistics)."""
    row = ti * 4
    return (tl.load(mean_ptr + row), tl.load(mean_ptr + row + 1), tl.load(mean_ptr + row + 2),
            tl.load(mean_ptr + row + 3), 1.0 / tl.load(std_ptr + row),
            1.0 / tl.load(std_ptr + row + 1), 1.0 / tl.load(std_ptr + row + 2),
            1.0 / tl.load(std_ptr + row + 3))


def _cfg(e, w):
    return triton.Config({"BLOCK_E": e}, num_warps=w)


# One destination per program; CG beads have tens of neighbours within the cutoff.
_CONFIGS = [_cfg(8, 1), _cfg(16, 2), _cfg(16, 4), _cfg(32, 4)]
_INTERPRET_CONFIG = _cfg(16, 4)


@autotune(pick_configs(_CONFIGS, _INTERPRET_CONFIG),
          ["num_nodes", "F", "M1", "ONE_SIDE", "EMPTY_SLOTS"])
@triton.jit
def _descriptor_fwd_kernel(pos_ptr, types_ptr, src_ptr, ptr_ptr, perm_ptr, c01_ptr, c23_ptr,
                           scale_ptr, mean_ptr, std_ptr, empty_ptr, lists_ptr, out_ptr,
                           num_nodes, num_types, cutoff_smooth, cutoff, lower, inv_h,
                           num_intervals, inv_nc, F: tl.constexpr, M1: tl.constexpr,
                           ONE_SIDE: tl.constexpr, EMPTY_SLOTS: tl.constexpr,
                           BLOCK_E: tl.constexpr):
    """``A_i`` for the destination ``i`` of this program (grid axis 0).

    pos_ptr: float32 [N', 3] positions; types_ptr: int64 [N] bead types; src_ptr: int64 [E]
    edge sources; ptr_ptr, perm_ptr: int32 destination CSR bounds [N + 1] and permutation
    [E] (`kernels.csr.GraphCSR`); c01_ptr: float32 [G-1, 2, F], c23_ptr: float16
    [G-1, 2, F], scale_ptr: float32 [F]: the table (`FilterTable`); mean_ptr, std_ptr:
    float32 [T, 4], the statistics (zeros and ones without); empty_ptr: float32 [T*T, M1],
    lists_ptr: float32 [T, M1], the empty slots (`SlotStatistics`, read with
    ``EMPTY_SLOTS`` only); out_ptr: float32 [N, M1, 4], ``A`` (every row written);
    num_nodes: N (the autotuning key); num_types: T; cutoff_smooth, cutoff: ``r_s``,
    ``r_c`` (Å); lower: ``x_lo``; inv_h: ``1/h`` of the table; num_intervals: ``G - 1``;
    inv_nc: ``1/N_c``; F: ``P M1`` table columns; M1: embedding width (power of two);
    ONE_SIDE: one network per neighbour type; EMPTY_SLOTS: deepmd-kit's padded lists;
    BLOCK_E: edges per tile.
    """
    node = tl.program_id(0).to(tl.int64)
    start, end, xi, yi, zi, ti = _centre(ptr_ptr, pos_ptr, types_ptr, node)
    m0, m1, m2, m3, i0, i1, i2, i3 = _centre_statistics(mean_ptr, std_ptr, ti)
    f = tl.arange(0, M1)
    acc0 = tl.zeros([BLOCK_E, M1], dtype=tl.float32)
    acc1 = tl.zeros([BLOCK_E, M1], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_E, M1], dtype=tl.float32)
    acc3 = tl.zeros([BLOCK_E, M1], dtype=tl.float32)
    taken = tl.zeros([BLOCK_E, M1], dtype=tl.float32)  # sum of G0 over the edges
    for p0 in range(start, end, BLOCK_E):
        p = p0 + tl.arange(0, BLOCK_E)
        _e, dx, dy, dz, inv_r, s, _ds, x, g, _dg, tj, valid = _edge_terms(
            pos_ptr, types_ptr, src_ptr, perm_ptr, p, p < end, xi, yi, zi, ti, num_types,
            cutoff_smooth, cutoff, m0, i0, lower, inv_h, num_intervals, c01_ptr, c23_ptr,
            scale_ptr, f, F, M1, ONE_SIDE)
        q = s * inv_r
        acc0 += g * x[:, None]  # g = 0 where the edge does not count
        acc1 += g * ((q * dx - m1) * i1)[:, None]
        acc2 += g * ((q * dy - m2) * i2)[:, None]
        acc3 += g * ((q * dz - m3) * i3)[:, None]
        if EMPTY_SLOTS:
            rows = (ti * num_types + tj) * M1
            taken += tl.load(empty_ptr + rows[:, None] + f[None, :], mask=valid[:, None],
                             other=0.0)
    a0 = tl.sum(acc0, axis=0)
    a1 = tl.sum(acc1, axis=0)
    a2 = tl.sum(acc2, axis=0)
    a3 = tl.sum(acc3, axis=0)
    if EMPTY_SLOTS:  # the slots left empty hold the normalised zero row -mu / sigma
        held = tl.load(lists_ptr + ti * M1 + f) - tl.sum(taken, axis=0)
        a0 -= held * (m0 * i0)
        a1 -= held * (m1 * i1)
        a2 -= held * (m2 * i2)
        a3 -= held * (m3 * i3)
    row = out_ptr + node * M1 * 4 + f * 4
    tl.store(row, a0 * inv_nc)
    tl.store(row + 1, a1 * inv_nc)
    tl.store(row + 2, a2 * inv_nc)
    tl.store(row + 3, a3 * inv_nc)


@autotune(pick_configs(_CONFIGS, _INTERPRET_CONFIG), ["num_nodes", "F", "M1", "ONE_SIDE"])
@triton.jit
def _descriptor_bwd_kernel(pos_ptr, types_ptr, src_ptr, ptr_ptr, perm_ptr, c01_ptr, c23_ptr,
                           scale_ptr, mean_ptr, std_ptr, ga_ptr, v_ptr, num_nodes, num_types,
                           cutoff_smooth, cutoff, lower, inv_h, num_intervals, inv_nc,
                           F: tl.constexpr, M1: tl.constexpr, ONE_SIDE: tl.constexpr,
                           BLOCK_E: tl.constexpr):
    """``v_e = dE/dr_e`` for the edges into the destination of this program (grid axis 0).

    ga_ptr: float32 [N, M1, 4], ``dE/dA``; v_ptr: float32 [E, 3] (rows of the segment's
    edges written, zeros at or beyond the cutoff; other rows untouched); the other
    arguments as in `_descriptor_fwd_kernel` (the empty slots do not depend on the
    positions).
    """
    node = tl.program_id(0).to(tl.int64)
    start, end, xi, yi, zi, ti = _centre(ptr_ptr, pos_ptr, types_ptr, node)
    m0, m1, m2, m3, i0, i1, i2, i3 = _centre_statistics(mean_ptr, std_ptr, ti)
    f = tl.arange(0, M1)
    row = ga_ptr + node * M1 * 4 + f * 4
    ga0 = (tl.load(row) * inv_nc)[None, :]
    ga1 = (tl.load(row + 1) * inv_nc)[None, :]
    ga2 = (tl.load(row + 2) * inv_nc)[None, :]
    ga3 = (tl.load(row + 3) * inv_nc)[None, :]
    for p0 in range(start, end, BLOCK_E):
        p = p0 + tl.arange(0, BLOCK_E)
        pmask = p < end
        e, dx, dy, dz, inv_r, s, ds, x, g, dg, _tj, _valid = _edge_terms(
            pos_ptr, types_ptr, src_ptr, perm_ptr, p, pmask, xi, yi, zi, ti, num_types,
            cutoff_smooth, cutoff, m0, i0, lower, inv_h, num_intervals, c01_ptr, c23_ptr,
            scale_ptr, f, F, M1, ONE_SIDE)
        q = s * inv_r
        dq = (ds - q) * inv_r
        grad_g = (ga0 * x[:, None] + ga1 * ((q * dx - m1) * i1)[:, None]
                  + ga2 * ((q * dy - m2) * i2)[:, None] + ga3 * ((q * dz - m3) * i3)[:, None])
        gx = tl.sum(grad_g * dg, axis=1)
        gr0 = (tl.sum(ga0 * g, axis=1) + gx) * i0  # dE/ds
        gr1 = tl.sum(ga1 * g, axis=1) * i1  # dE/d(q d)
        gr2 = tl.sum(ga2 * g, axis=1) * i2
        gr3 = tl.sum(ga3 * g, axis=1) * i3
        radial = (gr0 * ds + (gr1 * dx + gr2 * dy + gr3 * dz) * dq) * inv_r
        out = v_ptr + e * 3  # v = dE/dr_e = -dE/dd_e
        tl.store(out, -(radial * dx + q * gr1), mask=pmask)
        tl.store(out + 1, -(radial * dy + q * gr2), mask=pmask)
        tl.store(out + 2, -(radial * dz + q * gr3), mask=pmask)


def _check(pos, types, table: FilterTable, spec: DescriptorSpec,
           statistics: SlotStatistics | None):
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
    if statistics is not None:
        types_ = spec.num_types
        shapes = {"mean": (types_, 4), "std": (types_, 4), "empty": (types_ * types_, width),
                  "lists": (types_, width)}
        for name, shape in shapes.items():
            tensor = getattr(statistics, name)
            if tensor is None and name in ("empty", "lists"):
                continue
            if tensor.dtype != torch.float32 or tuple(tensor.shape) != shape \
                    or not tensor.is_contiguous():
                raise ValueError(f"dp_descriptor needs SlotStatistics.{name} contiguous "
                                 f"float32 {shape}, got {tensor.dtype} {tuple(tensor.shape)}")
        check_no_grad("dp_descriptor", **{k: v for k, v in statistics._asdict().items()
                                          if v is not None})


def has_empty_slots(statistics: SlotStatistics | None) -> bool:
    """Whether the kernels add deepmd-kit's empty slots (`SlotStatistics.empty`)."""
    return statistics is not None and statistics.empty is not None


def _arguments(pos, types, src, csr: GraphCSR, table: FilterTable, spec: DescriptorSpec,
               statistics: SlotStatistics | None):
    if statistics is None:  # the identity: x = s, R^ = R (empty and lists are not read)
        mean = torch.zeros(spec.num_types, 4, dtype=torch.float32, device=pos.device)
        statistics = SlotStatistics(mean, torch.ones_like(mean), mean, mean)
    elif statistics.empty is None:  # no empty slots: their pointers are not read
        statistics = statistics._replace(empty=statistics.mean, lists=statistics.mean)
    return dict(pos_ptr=pos, types_ptr=types, src_ptr=src, ptr_ptr=csr.dst_ptr,
                perm_ptr=csr.dst_perm, c01_ptr=table.coeffs01, c23_ptr=table.coeffs23,
                scale_ptr=table.scale23, mean_ptr=statistics.mean, std_ptr=statistics.std,
                num_nodes=csr.num_nodes, num_types=spec.num_types,
                cutoff_smooth=spec.cutoff_smooth, cutoff=spec.cutoff, lower=spec.lower,
                inv_h=1.0 / table.spacing, num_intervals=table.num_intervals,
                inv_nc=1.0 / spec.num_neighbors, F=table.num_features, M1=spec.width,
                ONE_SIDE=bool(spec.type_one_side)), statistics


class _Descriptor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pos, types, src, dst, csr, table, spec, statistics):
        pos = pos.contiguous()
        _check(pos, types, table, spec, statistics)
        n = csr.num_nodes
        out = torch.empty(n, spec.width, 4, dtype=torch.float32, device=pos.device)
        if n:
            arguments, slots = _arguments(pos, types, src, csr, table, spec, statistics)
            _descriptor_fwd_kernel[(n,)](out_ptr=out, empty_ptr=slots.empty,
                                         lists_ptr=slots.lists,
                                         EMPTY_SLOTS=has_empty_slots(statistics),
                                         **arguments)
        ctx.save_for_backward(pos, types, src, dst, *csr)
        ctx.table, ctx.spec, ctx.statistics = table, spec, statistics
        return out

    @staticmethod
    def backward(ctx, grad_a):
        pos, types, src, dst, *csr = ctx.saved_tensors
        csr = GraphCSR(*csr)
        v = torch.empty(src.numel(), 3, dtype=torch.float32, device=pos.device)
        if csr.num_nodes:
            arguments, _ = _arguments(pos, types, src, csr, ctx.table, ctx.spec,
                                      ctx.statistics)
            _descriptor_bwd_kernel[(csr.num_nodes,)](
                ga_ptr=grad_a.contiguous().float(), v_ptr=v, **arguments)
        return (edge_vectors_to_positions(v, pos, src, dst, csr),
                *(None,) * 7)


def dp_descriptor(pos, types, src, dst, csr: GraphCSR, table: FilterTable,
                  spec: DescriptorSpec, statistics: SlotStatistics | None = None):
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
    statistics : SlotStatistics, optional
        deepmd-kit's statistics and empty slots (the model's ``sel``); never
        differentiated. None: ``x = s``, no empty slots.

    Returns
    -------
    Tensor, float32 [csr.num_nodes, M1, 4]
        ``A_i`` of the module docstring. Deterministic (no atomics); the gradient flows to
        ``pos`` only, and is not itself differentiable.
    """
    return _Descriptor.apply(pos, types, src, dst, csr, table, spec, statistics)


def dp_descriptor_reference(pos, types, src, dst, csr: GraphCSR, table: FilterTable,
                            spec: DescriptorSpec, statistics: SlotStatistics | None = None):
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
    pair = types[i] * spec.num_types + types[j]
    if statistics is not None:
        mean, std = statistics.mean.to(pos.dtype), statistics.std.to(pos.dtype)
        origin = -mean / std  # [T, 4], the normalised zero row
        env = (env - mean[types[i]]) / std[types[i]]
    net = types[j] if spec.type_one_side else pair
    cols = net[:, None] * width + torch.arange(width, device=pos.device)
    x = ((env[:, 0] - spec.lower) / table.spacing).clamp(0.0, table.num_intervals)
    k = x.detach().floor().long().clamp(max=table.num_intervals - 1)[:, None]
    t = (x - k[:, 0].to(x.dtype))[:, None]
    c0, c1 = table.coeffs01.to(pos.dtype)[k, :, cols].unbind(-1)
    scale = table.scale23.to(pos.dtype)[cols, None]
    c2, c3 = (table.coeffs23.to(pos.dtype)[k, :, cols] * scale).unbind(-1)
    g = ((c3 * t + c2) * t + c1) * t + c0
    outer = g[:, :, None] * env[:, None, :]
    if has_empty_slots(statistics):  # less the empty slot that the edge fills
        outer = outer - statistics.empty.to(pos.dtype)[pair][:, :, None] * origin[types[i]][
            :, None]
    outer = torch.where(inside[:, None, None], outer, 0.0)
    a = pos.new_zeros(n + 1, width, 4).index_add(0, torch.where(valid, dst, n), outer)
    if has_empty_slots(statistics):
        a[:n] += (statistics.lists.to(pos.dtype)[:, :, None] * origin[:, None])[types[:n]]
    return a[:n] / spec.num_neighbors
