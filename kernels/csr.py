"""Destination- and source-grouped CSR layouts of an edge list, built on the device.

A graph is a pair of int64 tensors ``src``, ``dst`` of shape ``[E]`` over node ids
``0 .. num_nodes - 1`` (the message of edge ``e`` flows from ``src[e]`` into ``dst[e]``). An
edge is *valid* when both endpoints lie in ``[0, num_nodes)`` and, if a device-side count
``num_edges`` (1-element integer tensor) is given, ``e < num_edges[0]``. Padding edges of a
fixed-capacity neighbour list (for instance ``src = dst = num_nodes``, a padding row) are
therefore invalid: they sit in no segment, so every segmented kernel ignores them.

The CSR over key ``k`` (``dst`` or ``src``) is a pair ``ptr [num_nodes + 1]`` and
``perm [E]`` (both int32) such that the valid edges with key ``n`` are
``perm[ptr[n]:ptr[n + 1]]`` in increasing edge id (a stable sort), and the invalid edges
fill ``perm[ptr[num_nodes]:]``, also in increasing edge id. It equals
``torch.argsort(where(valid, key, num_nodes), stable=True)``.

Construction (`build_csr`) is a counting sort with no host synchronisation:

1. one pass over the edges counts each bucket with integer atomics (exact and
   order-independent) and flags valid edges;
2. ``torch.cumsum`` on the device turns counts into ``ptr`` (and the valid flags into the
   running count used to place invalid edges stably);
3. one pass scatters each valid edge into its bucket at ``ptr[key] + atomic cursor`` (an
   arbitrary order inside the bucket) and each invalid edge straight to its stable tail slot;
4. one program per bucket ranks its edges by id (``rank = #{edges in the bucket with a
   smaller id}``, O(degree^2) comparisons in registers, no atomics) and writes each edge to
   ``ptr[key] + rank``, which restores the stable order deterministically.

Both CSRs are built by the same launches (a second grid axis / a second row).

Neighbour lists give more: their valid edges are sorted by ``(dst, src)`` and come in
pairs (``j → i`` valid exactly when ``i → j`` is, both lengths being computed from the same
squared coordinate differences). `build_csr_sorted_pairs` uses that to build the same two
layouts without atomics or ranking: the destination layout is a prefix sum and a scatter,
the source layout has the same bounds, and its ``k``-th edge is the reverse of the
destination layout's ``k``-th edge, found by a binary search over the sorted
``(dst, src)`` keys.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels._triton import tl, triton

__all__ = [
    "GraphCSR",
    "build_csr",
    "build_csr_reference",
    "build_csr_sorted_pairs",
    "edge_segment_ids",
    "valid_edge_mask",
]


class GraphCSR(NamedTuple):
    """Both CSR layouts of one graph.

    Attributes
    ----------
    dst_ptr : Tensor, int32 [num_nodes + 1]
        Segment bounds of the destination-grouped layout.
    dst_perm : Tensor, int32 [E]
        Edge ids grouped by destination (stable), invalid edges last.
    src_ptr : Tensor, int32 [num_nodes + 1]
        Segment bounds of the source-grouped layout.
    src_perm : Tensor, int32 [E]
        Edge ids grouped by source (stable), invalid edges last.
    """

    dst_ptr: torch.Tensor
    dst_perm: torch.Tensor
    src_ptr: torch.Tensor
    src_perm: torch.Tensor

    @property
    def num_nodes(self) -> int:
        return self.dst_ptr.numel() - 1


def edge_segment_ids(ptr, perm) -> torch.Tensor:
    """Segment of every edge, int64 ``[E]``; ``num_nodes`` for edges in no segment (padding).

    Computed on the device with ``searchsorted`` (no host synchronisation).
    """
    pos = torch.arange(perm.numel(), device=perm.device, dtype=torch.int32)
    seg_of_pos = torch.searchsorted(ptr[1:], pos, right=True)
    return torch.empty_like(seg_of_pos).index_put_((perm.long(),), seg_of_pos)


def valid_edge_mask(csr: GraphCSR) -> torch.Tensor:
    """Bool ``[E]``: True for edges that sit in a segment (computed on the device, no sync)."""
    return edge_segment_ids(csr.dst_ptr, csr.dst_perm) < csr.num_nodes


def _edge_validity(src, dst, num_nodes, num_edges):
    ids = torch.arange(src.numel(), device=src.device)
    ok = (src >= 0) & (src < num_nodes) & (dst >= 0) & (dst < num_nodes)
    if num_edges is not None:
        ok &= ids < num_edges.reshape(-1)[:1].to(ids.dtype)
    return ok


def build_csr_reference(src, dst, num_nodes: int, num_edges=None) -> GraphCSR:
    """PyTorch reference of `build_csr` (a stable ``torch.sort``, segment bounds by
    ``searchsorted``: no data-dependent shapes, no host reads); same outputs."""
    ok = _edge_validity(src, dst, num_nodes, num_edges)
    nodes = torch.arange(num_nodes + 1, device=src.device)
    out = []
    for key in (dst, src):
        bucket = torch.where(ok, key, torch.full_like(key, num_nodes))
        sorted_bucket, perm = torch.sort(bucket, stable=True)
        ptr = torch.searchsorted(sorted_bucket, nodes.to(bucket.dtype))
        out += [ptr.to(torch.int32), perm.to(torch.int32)]
    return GraphCSR(*out)


@triton.jit(do_not_specialize=["E"])
def _csr_count_kernel(src_ptr, dst_ptr, num_edges_ptr, counts_ptr, valid_ptr, E, N,
                      HAS_COUNT: tl.constexpr, BLOCK: tl.constexpr):
    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inb = e < E
    s = tl.load(src_ptr + e, mask=inb, other=-1)
    d = tl.load(dst_ptr + e, mask=inb, other=-1)
    ok = inb & (s >= 0) & (s < N) & (d >= 0) & (d < N)
    if HAS_COUNT:
        ok = ok & (e < tl.load(num_edges_ptr))
    kd = tl.where(ok, d, N).to(tl.int32)
    ks = tl.where(ok, s, N).to(tl.int32)
    tl.atomic_add(counts_ptr + kd, 1, mask=inb)
    tl.atomic_add(counts_ptr + (N + 1) + ks, 1, mask=inb)
    tl.store(valid_ptr + e, ok.to(tl.int32), mask=inb)


@triton.jit(do_not_specialize=["E"])
def _csr_scatter_kernel(src_ptr, dst_ptr, valid_ptr, valid_incl_ptr, ptr_ptr, cursor_ptr,
                        tmp_ptr, perm_ptr, E, N, BLOCK: tl.constexpr):
    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inb = e < E
    ok = tl.load(valid_ptr + e, mask=inb, other=0) != 0
    # invalid edges: stable tail slot = ptr[N] + (number of invalid edges before e)
    tail = e - tl.load(valid_incl_ptr + e, mask=inb, other=0)
    bad = inb & (ok == 0)
    for row in tl.static_range(2):
        if row == 0:
            key = tl.load(dst_ptr + e, mask=inb & ok, other=0).to(tl.int32)
        else:
            key = tl.load(src_ptr + e, mask=inb & ok, other=0).to(tl.int32)
        base = row * (N + 2)
        start = tl.load(ptr_ptr + base + key, mask=inb & ok, other=0)
        rank = tl.atomic_add(cursor_ptr + row * (N + 1) + key, 1, mask=inb & ok)
        tl.store(tmp_ptr + row * E + start + rank, e.to(tl.int32), mask=inb & ok)
        tail_start = tl.load(ptr_ptr + base + N)
        tl.store(perm_ptr + row * E + tail_start + tail, e.to(tl.int32), mask=bad)


@triton.jit(do_not_specialize=["E"])
def _csr_rank_kernel(ptr_ptr, tmp_ptr, perm_ptr, E, N, BLOCK: tl.constexpr):
    node = tl.program_id(0)
    row = tl.program_id(1)
    start = tl.load(ptr_ptr + row * (N + 2) + node)
    end = tl.load(ptr_ptr + row * (N + 2) + node + 1)
    lanes = tl.arange(0, BLOCK)
    for c0 in range(start, end, BLOCK):
        m0 = c0 + lanes < end
        x = tl.load(tmp_ptr + row * E + c0 + lanes, mask=m0, other=0)
        rank = tl.zeros([BLOCK], dtype=tl.int32)
        for c1 in range(start, end, BLOCK):
            m1 = c1 + lanes < end
            y = tl.load(tmp_ptr + row * E + c1 + lanes, mask=m1, other=0)
            smaller = (y[None, :] < x[:, None]) & m1[None, :]
            rank += tl.sum(smaller.to(tl.int32), axis=1)
        tl.store(perm_ptr + row * E + start + rank, x, mask=m0)


def build_csr(src, dst, num_nodes: int, num_edges=None) -> GraphCSR:
    """Build both CSR layouts on the device by a stable counting sort (Triton).

    Parameters
    ----------
    src, dst : Tensor, int64 [E]
        Edge endpoints (flattened node ids), on the device. Any order.
    num_nodes : int
        Number of real nodes; ids outside ``[0, num_nodes)`` mark padding edges.
    num_edges : Tensor, integer [1], optional
        Device-side count of used slots; edges ``e >= num_edges[0]`` are padding.

    Returns
    -------
    GraphCSR
        int32 ``dst_ptr``/``src_ptr`` ``[num_nodes + 1]`` and ``dst_perm``/``src_perm``
        ``[E]``; identical to `build_csr_reference`. Deterministic; no host synchronisation.
    """
    device = src.device
    E = src.numel()
    N = int(num_nodes)
    counts = torch.zeros(2, N + 1, dtype=torch.int32, device=device)
    valid = torch.empty(E, dtype=torch.int32, device=device)
    block = 1024
    grid = (triton.cdiv(E, block),)
    if E:
        _csr_count_kernel[grid](src, dst, num_edges if num_edges is not None else src, counts,
                                valid, E, N, HAS_COUNT=num_edges is not None, BLOCK=block)
    ptr = torch.zeros(2, N + 2, dtype=torch.int32, device=device)
    ptr[:, 1:] = torch.cumsum(counts, dim=1, dtype=torch.int32)
    perm = torch.empty(2, E, dtype=torch.int32, device=device)
    if E:
        valid_incl = torch.cumsum(valid, 0, dtype=torch.int32)
        cursor = torch.zeros(2, N + 1, dtype=torch.int32, device=device)
        tmp = torch.empty(2, E, dtype=torch.int32, device=device)
        _csr_scatter_kernel[grid](src, dst, valid, valid_incl, ptr, cursor, tmp, perm, E, N,
                                  BLOCK=block)
        _csr_rank_kernel[(N, 2)](ptr, tmp, perm, E, N, BLOCK=64, num_warps=2)
    return GraphCSR(ptr[0, : N + 1], perm[0], ptr[1, : N + 1], perm[1])


def build_csr_sorted_pairs(src, dst, num_nodes: int) -> GraphCSR:
    """Both CSR layouts of a neighbour list's edges, without atomics (PyTorch operations).

    Same result as `build_csr` (and `build_csr_reference`) for graphs whose valid edges
    (both ends in ``[0, num_nodes)``) are sorted by ``(dst, src)`` and closed under reversal;
    invalid edges may sit anywhere. No host synchronisation (capturable in a CUDA graph).

    Parameters
    ----------
    src, dst : Tensor, int64 [E]
        Edge endpoints; padding and dropped edges point outside ``[0, num_nodes)``.
    num_nodes : int

    Returns
    -------
    GraphCSR
        int32 ``dst_ptr = src_ptr`` ``[num_nodes + 1]``, ``dst_perm``/``src_perm`` ``[E]``.
    """
    n = int(num_nodes)
    ids = torch.arange(src.numel(), device=src.device)
    ok = (src >= 0) & (src < n) & (dst >= 0) & (dst < n)
    real_before = torch.cumsum(ok, 0)  # real edges up to and including each edge
    count = real_before[-1:] if src.numel() else ids.new_zeros(1)
    # valid edges keep their (sorted) order at the front; the others follow by id
    slot = torch.where(ok, real_before - 1, count + ids - real_before)
    dst_perm = torch.empty_like(ids).scatter_(0, slot, ids)
    # (dst, src) keys in that order, non-decreasing (the others after every valid key)
    key = torch.empty_like(ids).scatter_(0, slot, torch.where(ok, dst * (n + 1) + src, n * (n + 2)))
    reverse = torch.empty_like(ids).scatter_(0, slot, src * (n + 1) + dst)
    ptr = torch.searchsorted(key, torch.arange(n + 1, device=src.device) * (n + 1))
    # k-th edge of source segment s: the reverse of the k-th edge of destination segment s
    front = ids < count  # the valid edges' slots
    partner = torch.searchsorted(key, torch.where(front, reverse, key))
    partner.clamp_(max=max(src.numel() - 1, 0))
    src_perm = torch.where(front, dst_perm[partner], dst_perm)
    ptr = ptr.to(torch.int32)
    return GraphCSR(ptr, dst_perm.to(torch.int32), ptr, src_perm.to(torch.int32))
