"""Flash aggregation: deterministic segmented reductions over CSR layouts (no atomics).

Three operations:

* `segment_sum` - ``out[n] = sum of m[e] over the edges e of segment n`` (a ``scatter_add``
  over ``dst`` without atomics). One program owns one (node, feature block) pair, accumulates
  in registers in CSR order and writes its row once. Its backward is the gather
  ``grad_m[e] = grad_out[dst_e]`` (zero for padding edges), written by the same ownership.
* `edge_grad_to_positions` - turns per-edge scalars ``g_e = dE/dd_e`` into position
  gradients ``grad_r[i] = sum_{e: dst_e = i} g_e (r_i - r_src)/d_e
  + sum_{e: src_e = i} g_e (r_i - r_dst)/d_e`` using both CSRs, so that each node's sum is
  owned by one program (deterministic, no atomics). Distances are recomputed from positions
  (3 floats per edge end) rather than stored. Used by every fused backward (the tabulated
  path reaches it through `kernels.edge_distances`, once per step).
* `edge_vectors_to_positions` - the same sums for per-edge gradient *vectors*
  ``g_e = dE/d(r_dst - r_src)`` (``+g_e`` onto the destination, ``-g_e`` onto the source),
  for edge terms that read a direction as well as a length (PaiNN, `kernels.painn_message`).

Summation order is fixed by the CSR, so results are bitwise reproducible run to run.
"""

from __future__ import annotations

import torch

from kernels._triton import check_no_grad, next_pow2, tl, triton
from kernels.csr import GraphCSR, edge_segment_ids, valid_edge_mask

__all__ = [
    "segment_sum",
    "segment_sum_reference",
    "scaled_segment_sum",
    "scaled_segment_sum_reference",
    "signed_segment_sum",
    "signed_segment_sum_reference",
    "edge_grad_to_positions",
    "edge_grad_to_positions_reference",
    "edge_vectors_to_positions",
    "edge_vectors_to_positions_reference",
]


@triton.jit
def _segment_sum_kernel(m_ptr, ptr_ptr, perm_ptr, out_ptr, F, scale_ptr,
                        BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr, SIGNED: tl.constexpr,
                        SCALED: tl.constexpr):
    """``out[n] = sum_e m[e]`` over the entries of segment ``n`` (``SIGNED``: entry ``-1 - e``
    subtracts row ``e``; ``SCALED``: row ``e`` is multiplied by ``scale_ptr[e]`` first, else
    ``scale_ptr`` is not read), summed in FP32."""
    node = tl.program_id(0)
    f = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    fmask = f < F
    start = tl.load(ptr_ptr + node)
    end = tl.load(ptr_ptr + node + 1)
    acc = tl.zeros([BLOCK_F], dtype=tl.float32)
    for p0 in range(start, end, BLOCK_E):
        p = p0 + tl.arange(0, BLOCK_E)
        pmask = p < end
        e = tl.load(perm_ptr + p, mask=pmask, other=0).to(tl.int64)
        if SIGNED:  # entry -1 - e: subtract row e
            negative = e < 0
            e = tl.where(negative, -1 - e, e)
        tile = tl.load(m_ptr + e[:, None] * F + f[None, :],
                       mask=pmask[:, None] & fmask[None, :], other=0.0).to(tl.float32)
        if SIGNED:
            tile = tl.where(negative[:, None], -tile, tile)
        if SCALED:
            tile *= tl.load(scale_ptr + e, mask=pmask, other=0.0)[:, None]
        acc += tl.sum(tile, axis=0)
    tl.store(out_ptr + node.to(tl.int64) * F + f, acc.to(out_ptr.dtype.element_ty), mask=fmask)


@triton.jit
def _segment_gather_kernel(grad_ptr, ptr_ptr, perm_ptr, out_ptr, F,
                           BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr):
    node = tl.program_id(0)
    f = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    fmask = f < F
    start = tl.load(ptr_ptr + node)
    end = tl.load(ptr_ptr + node + 1)
    row = tl.load(grad_ptr + node.to(tl.int64) * F + f, mask=fmask, other=0.0)
    for p0 in range(start, end, BLOCK_E):
        p = p0 + tl.arange(0, BLOCK_E)
        pmask = p < end
        e = tl.load(perm_ptr + p, mask=pmask, other=0).to(tl.int64)
        tile = tl.zeros([BLOCK_E, BLOCK_F], dtype=row.dtype) + row[None, :]
        tl.store(out_ptr + e[:, None] * F + f[None, :], tile,
                 mask=pmask[:, None] & fmask[None, :])


def _segment_launch(kernel, src, ptr, perm, out, **constexprs):
    num_nodes = ptr.numel() - 1
    F = src.shape[1]
    block_f = min(128, next_pow2(F))
    if num_nodes:
        grid = (num_nodes, triton.cdiv(F, block_f))
        kernel[grid](src, ptr, perm, out, F, BLOCK_E=32, BLOCK_F=block_f, num_warps=4,
                     **constexprs)
    return out


class _SegmentSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, m, ptr, perm):
        ctx.save_for_backward(ptr, perm)
        ctx.num_edges = m.shape[0]
        out = torch.empty(ptr.numel() - 1, m.shape[1], dtype=m.dtype, device=m.device)
        return _segment_launch(_segment_sum_kernel, m.contiguous(), ptr, perm, out,
                               scale_ptr=m, SIGNED=False, SCALED=False)

    @staticmethod
    def backward(ctx, grad_out):
        ptr, perm = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_m = torch.zeros(ctx.num_edges, grad_out.shape[1], dtype=grad_out.dtype,
                             device=grad_out.device)
        return _segment_launch(_segment_gather_kernel, grad_out, ptr, perm, grad_m), None, None


def segment_sum(m, ptr, perm):
    """Sum edge rows into their segments (Triton, deterministic, no atomics).

    Parameters
    ----------
    m : Tensor, float [E, F]
        Per-edge messages (any float dtype; summed in FP32, returned in ``m.dtype``).
    ptr : Tensor, int32 [N + 1]
        Segment bounds, e.g. ``csr.dst_ptr``.
    perm : Tensor, int32 [E]
        Edge ids grouped by segment, e.g. ``csr.dst_perm``; edges outside every segment
        (padding) are ignored.

    Returns
    -------
    Tensor, [N, F]
        ``out[n] = sum(m[perm[ptr[n]:ptr[n+1]]])``. Differentiable w.r.t. ``m`` (the gradient
        is the gather ``grad_out[segment of e]``, zero for padding edges).
    """
    return _SegmentSum.apply(m, ptr, perm)


def signed_segment_sum(m, ptr, perm):
    """`segment_sum` whose entries may subtract a row: entry ``v >= 0`` adds ``m[v]``, entry
    ``v < 0`` subtracts ``m[-1 - v]`` (Triton, deterministic; not differentiable).

    Parameters
    ----------
    m : Tensor, float [E, F]
    ptr : Tensor, int32 [N + 1]
    perm : Tensor, int32 [K]
        Signed row ids grouped by segment (a row may appear in several segments).

    Returns
    -------
    Tensor, [N, F] in ``m.dtype`` (summed in FP32, in ``perm`` order).
    """
    out = torch.empty(ptr.numel() - 1, m.shape[1], dtype=m.dtype, device=m.device)
    return _segment_launch(_segment_sum_kernel, m.contiguous(), ptr, perm, out, scale_ptr=m,
                           SIGNED=True, SCALED=False)


def scaled_segment_sum(m, scale, ptr, perm):
    """`segment_sum` of rows stored with a scale each: ``out[n] = sum_e scale[e] m[e]``
    (Triton, deterministic; not differentiable). Rows of a wide range of magnitudes can so
    be kept in 16 bits, each divided by its own scale.

    Parameters
    ----------
    m : Tensor, float [E, F]
        Scaled rows (any float dtype, e.g. float16).
    scale : Tensor, float32 [E]
        Each row's scale.
    ptr : Tensor, int32 [N + 1]
    perm : Tensor, int32 [E]
        As `segment_sum`'s.

    Returns
    -------
    Tensor, float32 [N, F]
        Summed in FP32, in ``perm`` order.
    """
    out = torch.empty(ptr.numel() - 1, m.shape[1], dtype=torch.float32, device=m.device)
    return _segment_launch(_segment_sum_kernel, m.contiguous(), ptr, perm, out,
                           scale_ptr=scale.float().contiguous(), SIGNED=False, SCALED=True)


def scaled_segment_sum_reference(m, scale, ptr, perm):
    """PyTorch reference of `scaled_segment_sum` (in float64 when ``scale`` is)."""
    dtype = torch.promote_types(scale.dtype, torch.float32)
    return segment_sum_reference(m.to(dtype) * scale.to(dtype)[:, None], ptr, perm)


def signed_segment_sum_reference(m, ptr, perm):
    """PyTorch reference of `signed_segment_sum`."""
    seg = edge_segment_ids(ptr, torch.arange(perm.numel(), device=perm.device,
                                             dtype=torch.int32))
    v = perm.long()
    rows = torch.where((v < 0)[:, None], -m[torch.where(v < 0, -1 - v, v)],
                       m[torch.where(v < 0, -1 - v, v)])
    out = torch.zeros(ptr.numel(), m.shape[1], dtype=m.dtype, device=m.device)
    return out.index_add(0, seg, rows)[:-1]


def segment_sum_reference(m, ptr, perm):
    """PyTorch reference of `segment_sum` (``index_add_``); same signature and result."""
    num_nodes = ptr.numel() - 1
    seg = edge_segment_ids(ptr, perm)  # padding edges land in a scratch row that is dropped
    out = torch.zeros(num_nodes + 1, m.shape[1], dtype=m.dtype, device=m.device)
    return out.index_add(0, seg, m)[:num_nodes]


@triton.jit
def _pos_grad_segment(acc_x, acc_y, acc_z, rx, ry, rz, g_ptr, pos_ptr, other_ptr, ptr_ptr,
                      perm_ptr, node, SIGN: tl.constexpr, VECTORS: tl.constexpr,
                      BLOCK_E: tl.constexpr):
    """Add one segment's edges to the node's position gradient: ``VECTORS`` adds
    ``SIGN * g[e, :]``; otherwise ``g[e] (r_node - r_other) / d`` (the sign is in the
    direction, ``SIGN`` unused)."""
    start = tl.load(ptr_ptr + node)
    end = tl.load(ptr_ptr + node + 1)
    for p0 in range(start, end, BLOCK_E):
        p = p0 + tl.arange(0, BLOCK_E)
        pmask = p < end
        e = tl.load(perm_ptr + p, mask=pmask, other=0).to(tl.int64)
        if VECTORS:
            acc_x += SIGN * tl.load(g_ptr + e * 3 + 0, mask=pmask, other=0.0)
            acc_y += SIGN * tl.load(g_ptr + e * 3 + 1, mask=pmask, other=0.0)
            acc_z += SIGN * tl.load(g_ptr + e * 3 + 2, mask=pmask, other=0.0)
        else:
            j = tl.load(other_ptr + e, mask=pmask, other=0)
            vx = rx - tl.load(pos_ptr + j * 3 + 0, mask=pmask, other=0.0)
            vy = ry - tl.load(pos_ptr + j * 3 + 1, mask=pmask, other=0.0)
            vz = rz - tl.load(pos_ptr + j * 3 + 2, mask=pmask, other=0.0)
            d = tl.sqrt_rn(vx * vx + vy * vy + vz * vz)
            g = tl.load(g_ptr + e, mask=pmask, other=0.0)
            coef = tl.where(d > 0, g / d, 0.0)
            acc_x += coef * vx
            acc_y += coef * vy
            acc_z += coef * vz
    return acc_x, acc_y, acc_z


@triton.jit
def _pos_grad_kernel(g_ptr, pos_ptr, src_ptr, dst_ptr, dptr_ptr, dperm_ptr, sptr_ptr, sperm_ptr,
                     out_ptr, VECTORS: tl.constexpr, BLOCK_E: tl.constexpr):
    """``out[node]``: the node's position gradient from per-edge scalars ``g [E]`` along the
    edges (``VECTORS`` False) or per-edge vectors ``g [E, 3]`` (``VECTORS``: ``+g`` from
    edges into the node, ``-g`` from edges out of it)."""
    node = tl.program_id(0).to(tl.int64)
    rx = tl.load(pos_ptr + node * 3 + 0)
    ry = tl.load(pos_ptr + node * 3 + 1)
    rz = tl.load(pos_ptr + node * 3 + 2)
    acc_x = tl.zeros([BLOCK_E], dtype=tl.float32)
    acc_y = tl.zeros([BLOCK_E], dtype=tl.float32)
    acc_z = tl.zeros([BLOCK_E], dtype=tl.float32)
    # edges into the node: the other end is src; edges out of it: the other end is dst
    acc_x, acc_y, acc_z = _pos_grad_segment(acc_x, acc_y, acc_z, rx, ry, rz, g_ptr, pos_ptr,
                                            src_ptr, dptr_ptr, dperm_ptr, node, 1.0, VECTORS,
                                            BLOCK_E)
    acc_x, acc_y, acc_z = _pos_grad_segment(acc_x, acc_y, acc_z, rx, ry, rz, g_ptr, pos_ptr,
                                            dst_ptr, sptr_ptr, sperm_ptr, node, -1.0, VECTORS,
                                            BLOCK_E)
    tl.store(out_ptr + node * 3 + 0, tl.sum(acc_x, axis=0))
    tl.store(out_ptr + node * 3 + 1, tl.sum(acc_y, axis=0))
    tl.store(out_ptr + node * 3 + 2, tl.sum(acc_z, axis=0))


def _pos_grad_launch(g, pos, src, dst, csr: GraphCSR, vectors: bool):
    out = torch.zeros_like(pos)
    if csr.num_nodes:
        _pos_grad_kernel[(csr.num_nodes,)](g.contiguous(), pos.contiguous(), src, dst,
                                           csr.dst_ptr, csr.dst_perm, csr.src_ptr,
                                           csr.src_perm, out, VECTORS=vectors, BLOCK_E=64,
                                           num_warps=2)
    return out


def edge_grad_to_positions(g, pos, src, dst, csr: GraphCSR):
    """Position gradient from per-edge distance gradients (Triton, deterministic).

    Parameters
    ----------
    g : Tensor, float32 [E]
        ``dE/dd_e`` per edge; values of padding edges are never read.
    pos : Tensor, float32 [P, 3]
        Positions, ``P >= csr.num_nodes`` (rows beyond are padding).
    src, dst : Tensor, int64 [E]
        Edge endpoints.
    csr : GraphCSR
        Both layouts of the graph (`kernels.csr.build_csr`).

    Returns
    -------
    Tensor, float32 [P, 3]
        ``dE/dr``; rows ``>= csr.num_nodes`` are zero. Not itself differentiable.
    """
    check_no_grad("edge_grad_to_positions", g=g)
    return _pos_grad_launch(g, pos, src, dst, csr, vectors=False)


def edge_vectors_to_positions(g, pos, src, dst, csr: GraphCSR):
    """Position gradient from per-edge gradient vectors (Triton, deterministic, no atomics).

    For edge terms that depend on ``r_e = r_dst - r_src`` through more than its length (a
    direction, as PaiNN's messages): ``grad_r[n] = sum_{e: dst_e = n} g_e - sum_{e: src_e =
    n} g_e``, one program per node walking both CSR layouts.

    Parameters
    ----------
    g : Tensor, float32 [E, 3]
        ``dE/dr_e`` per edge; rows of padding edges are never read.
    pos : Tensor, float32 [P, 3]
        Positions, ``P >= csr.num_nodes`` (only the shape, dtype and device are used).
    src, dst : Tensor, int64 [E]
        Edge endpoints.
    csr : GraphCSR
        Both layouts of the graph (`kernels.csr.build_csr`).

    Returns
    -------
    Tensor, float32 [P, 3]
        ``dE/dr``; rows ``>= csr.num_nodes`` are zero. Not itself differentiable.

    Raises
    ------
    ValueError
        ``g`` not ``[E, 3]`` for the ``E`` edges of ``src``.
    """
    check_no_grad("edge_vectors_to_positions", g=g)
    if g.shape != (src.numel(), 3):
        raise ValueError(f"edge_vectors_to_positions needs g [E, 3] = [{src.numel()}, 3], "
                         f"got {tuple(g.shape)}")
    return _pos_grad_launch(g, pos, src, dst, csr, vectors=True)


def edge_vectors_to_positions_reference(g, pos, src, dst, csr: GraphCSR):
    """PyTorch reference of `edge_vectors_to_positions` (``index_add_``); same signature."""
    valid = valid_edge_mask(csr)
    n = csr.num_nodes
    contrib = torch.where(valid[:, None], g, 0.0).to(pos.dtype)
    s = torch.where(valid, src, 0)
    d = torch.where(valid, dst, 0)
    out = torch.zeros_like(pos)
    out[:n] = out[:n].index_add(0, d, contrib).index_add(0, s, -contrib)
    return out


def edge_grad_to_positions_reference(g, pos, src, dst, csr: GraphCSR):
    """PyTorch reference of `edge_grad_to_positions` (``index_add_``); same signature."""
    valid = valid_edge_mask(csr)
    vec = pos[torch.where(valid, dst, 0)] - pos[torch.where(valid, src, 0)]
    dist = vec.norm(dim=1, keepdim=True)
    coef = torch.where(valid[:, None] & (dist > 0), g[:, None] / dist.clamp_min(1e-30), 0.0)
    return edge_vectors_to_positions_reference(coef * vec, pos, src, dst, csr)
