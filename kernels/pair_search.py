"""Neighbour pairs of many replicas, from positions straight into both CSR layouts.

A coarse-grained protein has a few hundred beads, so every step can afford all bead pairs
of every replica. `pair_search_csr` finds, for ``R`` replicas of ``n`` beads (node
``g = r n + i`` of the flattened positions), the directed edges ``j -> i`` (``src = r n + j``,
``dst = r n + i``) with ``allowed[i, j]`` and ``d_ij < cutoff``, where ``d_ij`` is computed
exactly as the message-passing kernels compute it (`kernels.radial_basis.edge_vector`:
the IEEE square root of ``|r_i - r_j|^2``). The kernels' own ``d < cutoff`` tests therefore
keep every edge, and ``d_ij`` and ``d_ji`` are the same number (negating a difference is
exact), so the edge set is closed under reversal.

Three launches, no atomics, no host synchronisation (capturable in a CUDA graph):

1. `_count_kernel`, one program per node ``g``: its number of neighbours (``BLOCK_J``
   candidate beads per tile).
2. A prefix sum (``torch.cumsum``) gives the segment bounds ``ptr``; the edges are laid out
   in slot order = ``(dst, src)`` order, compacted over all replicas, padding at the end.
   `_fill_kernel`, one program per node, repeats the test of (1) and writes its edges'
   ``src``, ``dst`` at ``ptr[g] + (rank of j among g's neighbours)`` (an in-tile prefix sum
   plus a running offset).
3. `_reverse_kernel`, one lane per slot: for edge ``k = (j -> i)`` a binary search in the
   sorted neighbour list of ``j`` finds the position of ``i`` there; that is where ``k``
   goes in the source-grouped layout (the ``m``-th edge out of ``j`` is the reverse of the
   ``m``-th edge into ``j``). Padding slots get ``src = dst = N``.

The result equals `kernels.csr.build_csr_reference` of that edge list (``dst_ptr`` is
``src_ptr``; ``dst_perm`` is the identity). More edges than ``capacity`` cannot be stored:
the segments are then cut at ``capacity`` (every index stays in bounds, so the consumers run
safely on the truncated graph), and ``needed`` tells the caller to grow and redo.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels._triton import next_pow2, tl, triton
from kernels.csr import GraphCSR
from kernels.radial_basis import edge_vector

__all__ = ["PairGraph", "pair_search_csr", "pair_search_csr_reference"]


class PairGraph(NamedTuple):
    """Edges within the cutoff in ``capacity`` slots, with both CSR layouts.

    Attributes
    ----------
    src, dst : Tensor, int64 [capacity]
        Edge ``k`` is ``src[k] -> dst[k]``; the real edges fill slots ``0 .. T-1`` in
        ``(dst, src)`` order, the rest are padding (``src = dst = N``).
    csr : GraphCSR
        Both layouts (int32); ``dst_ptr`` and ``src_ptr`` are the same tensor.
    needed : Tensor, int64 [] (device)
        Edges found, ``T``; more than ``capacity`` means some were cut off.
    """

    src: torch.Tensor
    dst: torch.Tensor
    csr: GraphCSR
    needed: torch.Tensor


@triton.jit
def _neighbor_mask(pos_ptr, allowed_ptr, node, bead, base, jj, n, cutoff):
    """Lanes ``jj`` (bead ids in the replica) that are neighbours of ``node``."""
    inb = jj < n
    ok = inb & (tl.load(allowed_ptr + bead * n + jj, mask=inb, other=0) != 0)
    _, _, _, d = edge_vector(pos_ptr, jj * 0 + node, base + jj, ok)
    return ok & (d < cutoff)


@triton.jit
def _count_kernel(pos_ptr, allowed_ptr, count_ptr, n, cutoff, BLOCK_J: tl.constexpr):
    """``count[g]`` = neighbours of node ``g``, one program per node.

    pos_ptr: float32 [R n, 3]; allowed_ptr: uint8 [n, n] (1: the pair may be an edge; the
    diagonal must be 0); count_ptr: int32 [R n]; n: beads per replica; cutoff: r_c (A);
    BLOCK_J: candidate beads per tile (power of two).
    """
    node = tl.program_id(0).to(tl.int64)
    bead = node % n
    base = node - bead
    total = tl.zeros([BLOCK_J], dtype=tl.int32)
    for j0 in range(0, n, BLOCK_J):
        jj = j0 + tl.arange(0, BLOCK_J)
        total += _neighbor_mask(pos_ptr, allowed_ptr, node, bead, base, jj, n, cutoff).to(tl.int32)
    tl.store(count_ptr + node, tl.sum(total, axis=0))


@triton.jit
def _fill_kernel(pos_ptr, allowed_ptr, ptr_ptr, src_ptr, dst_ptr, n, cutoff,
                 BLOCK_J: tl.constexpr):
    """Write the edges into node ``g``'s segment in increasing ``src``, one program per node.

    pos_ptr, allowed_ptr, n, cutoff, BLOCK_J: as in `_count_kernel`; ptr_ptr: int32
    [R n + 1] segment bounds (cut at the capacity); src_ptr, dst_ptr: int64 [capacity].
    """
    node = tl.program_id(0).to(tl.int64)
    bead = node % n
    base = node - bead
    slot = tl.load(ptr_ptr + node).to(tl.int64)
    end = tl.load(ptr_ptr + node + 1).to(tl.int64)
    for j0 in range(0, n, BLOCK_J):
        jj = j0 + tl.arange(0, BLOCK_J)
        m = _neighbor_mask(pos_ptr, allowed_ptr, node, bead, base, jj, n, cutoff)
        flag = m.to(tl.int32)
        where = slot + tl.cumsum(flag, axis=0) - flag
        keep = m & (where < end)
        tl.store(src_ptr + where, base + jj, mask=keep)
        tl.store(dst_ptr + where, jj.to(tl.int64) * 0 + node, mask=keep)
        slot += tl.sum(flag, axis=0)


@triton.jit
def _reverse_kernel(src_ptr, dst_ptr, ptr_ptr, src_perm_ptr, num_nodes, capacity,
                    STEPS: tl.constexpr, BLOCK: tl.constexpr):
    """Source-grouped layout by binary search, and padding; one lane per slot.

    src_ptr, dst_ptr: int64 [capacity] (slots ``< ptr[N]`` written by `_fill_kernel`, the
    rest set to ``N`` here); ptr_ptr: int32 [N + 1]; src_perm_ptr: int32 [capacity], holding
    the identity on entry (kept where nothing lands: padding, and a cut graph); num_nodes:
    N; capacity: slots; STEPS: binary-search steps, ``>= log2(largest degree + 1)``;
    BLOCK: slots per program.
    """
    k = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inb = k < capacity
    used = tl.load(ptr_ptr + num_nodes).to(tl.int64)
    real = inb & (k < used)
    s = tl.load(src_ptr + k, mask=real, other=0)
    t = tl.load(dst_ptr + k, mask=real, other=0)
    lo = tl.load(ptr_ptr + s, mask=real, other=0).to(tl.int64)
    end = tl.load(ptr_ptr + s + 1, mask=real, other=0).to(tl.int64)
    hi = end
    for _ in tl.static_range(STEPS):  # lower bound of t in the sorted src[lo:hi]
        active = real & (lo < hi)
        mid = (lo + hi) // 2
        v = tl.load(src_ptr + mid, mask=active, other=0)
        right = active & (v < t)
        lo = tl.where(right, mid + 1, lo)
        hi = tl.where(active & (v >= t), mid, hi)
    found = real & (lo < end)
    found = found & (tl.load(src_ptr + lo, mask=found, other=-1) == t)
    tl.store(src_perm_ptr + lo, k.to(tl.int32), mask=found)
    pad = inb & (k >= used)
    tl.store(src_ptr + k, k * 0 + num_nodes, mask=pad)
    tl.store(dst_ptr + k, k * 0 + num_nodes, mask=pad)


_IDENTITY: dict = {}


def _identity(capacity: int, device) -> torch.Tensor:
    """int32 ``0 .. capacity-1`` (the destination layout's permutation), kept per device and
    size: an ``arange`` of a million slots costs ~15 us per captured step on an H100.
    Callers never write to it. Inside a CUDA-graph capture a miss makes a fresh one (a
    tensor made there holds nothing until the graph is replayed), which is not kept."""
    key = (torch.device(device), capacity)
    ids = _IDENTITY.get(key)
    if ids is None:
        ids = torch.arange(capacity, dtype=torch.int32, device=device)
        if not (ids.is_cuda and torch.cuda.is_current_stream_capturing()):
            _IDENTITY.clear()  # one size at a time: capacities only grow
            _IDENTITY[key] = ids
    return ids


def _check(pos, allowed, capacity):
    if pos.ndim != 3 or pos.shape[2] != 3 or pos.dtype != torch.float32:
        raise ValueError(f"positions must be float32 [R, n, 3]; got {pos.dtype} "
                         f"{tuple(pos.shape)}")
    n = pos.shape[1]
    if tuple(allowed.shape) != (n, n):
        raise ValueError(f"allowed must be [{n}, {n}] for {n} beads; got {tuple(allowed.shape)}")
    if capacity < 1:
        raise ValueError(f"capacity must be positive, got {capacity}")


def pair_search_csr(pos, allowed, cutoff: float, capacity: int) -> PairGraph:
    """Edges within ``cutoff`` of every replica, sorted and laid out as both CSRs (Triton).

    Parameters
    ----------
    pos : Tensor, float32 [R, n, 3]
        Positions (Å); replicas never share an edge. Non-finite positions make no edge.
    allowed : Tensor, bool or uint8 [n, n]
        Pairs that may be edges, the same for every replica; symmetric and False on the
        diagonal (not checked here: that would cost a host synchronisation per call).
    cutoff : float
        r_c (Å): an edge has ``d < cutoff`` as the message-passing kernels compute ``d``.
    capacity : int
        Slots of the edge arrays (static, so that a captured step can replay).

    Returns
    -------
    PairGraph
        ``src``/``dst`` int64 ``[capacity]``, both CSR layouts over ``R n`` nodes, and the
        number of edges found (device tensor). Identical to `pair_search_csr_reference`
        whenever ``needed <= capacity``.
    """
    _check(pos, allowed, capacity)
    r_count, n, _ = pos.shape
    num_nodes = r_count * n
    device = pos.device
    pos = pos.contiguous()
    allowed = allowed.to(torch.uint8).contiguous()
    counts = torch.empty(num_nodes, dtype=torch.int32, device=device)
    ptr = torch.zeros(num_nodes + 1, dtype=torch.int32, device=device)
    src = torch.empty(capacity, dtype=torch.int64, device=device)
    dst = torch.empty(capacity, dtype=torch.int64, device=device)
    ids = _identity(capacity, device)
    block_j = min(next_pow2(n), 256)
    if num_nodes:
        _count_kernel[(num_nodes,)](pos, allowed, counts, n, float(cutoff), BLOCK_J=block_j,
                                    num_warps=4)
        torch.cumsum(counts, 0, dtype=torch.int32, out=ptr[1:])
    needed = ptr[-1].to(torch.int64)
    ptr.clamp_(max=capacity)
    if num_nodes:
        _fill_kernel[(num_nodes,)](pos, allowed, ptr, src, dst, n, float(cutoff),
                                   BLOCK_J=block_j, num_warps=4)
    src_perm = ids.clone()
    block = 1024
    _reverse_kernel[(triton.cdiv(capacity, block),)](
        src, dst, ptr, src_perm, num_nodes, capacity, STEPS=max(n, 1).bit_length(),
        BLOCK=block, num_warps=4)
    return PairGraph(src, dst, GraphCSR(ptr, ids, ptr, src_perm), needed)


def pair_search_csr_reference(pos, allowed, cutoff: float, capacity: int) -> PairGraph:
    """PyTorch reference of `pair_search_csr` (dense distances, ``nonzero``, sort-based CSR).

    Distances are computed in ``pos.dtype`` with ``torch.linalg.vector_norm``; at a
    distance within rounding of the cutoff the two may disagree about an edge.
    """
    from kernels.csr import build_csr_reference

    _check(pos, allowed, capacity)
    r_count, n, _ = pos.shape
    num_nodes = r_count * n
    d = torch.linalg.vector_norm(pos[:, :, None, :] - pos[:, None, :, :], dim=-1)
    rep, i, j = ((d < cutoff) & allowed.bool().to(pos.device)).nonzero(as_tuple=True)
    needed = torch.tensor(rep.numel(), device=pos.device)
    fill = torch.full((max(capacity - rep.numel(), 0),), num_nodes, device=pos.device)
    src = torch.cat([rep * n + j, fill])[:capacity]
    dst = torch.cat([rep * n + i, fill])[:capacity]
    return PairGraph(src, dst, build_csr_reference(src, dst, num_nodes), needed)
