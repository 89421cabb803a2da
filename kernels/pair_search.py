"""Neighbour pairs of many replicas, from positions straight into both CSR layouts.

A coarse-grained protein has a few hundred beads, so every step can afford all bead pairs
of every replica. `pair_search_csr` finds, for ``R`` replicas of ``n`` beads (node
``g = r n + i`` of the flattened positions), the directed edges ``j -> i`` (``src = r n + j``,
``dst = r n + i``) with ``allowed[i, j]`` and ``d_ij < cutoff``, where ``d_ij`` is computed
exactly as the message-passing kernels compute it (`kernels.radial_basis.edge_vector`:
the IEEE square root of ``|r_i - r_j|^2``). The kernels' own ``d < cutoff`` tests therefore
keep every edge, and ``d_ij`` and ``d_ji`` are the same number (negating a difference is
exact), so the edge set is closed under reversal.

Two kernels around a prefix sum, no atomics, no host synchronisation (capturable in a CUDA
graph):

1. `_count_kernel`, one program per node ``g`` (``BLOCK_J`` candidate beads per tile): its
   number of neighbours, and its neighbour set as a bitmask of ``W = ceil(n / 32)`` int32
   words, ``mask[g, w]`` (bit ``b``: bead ``32 w + b`` of the replica), with
   ``before[g, w]``, the neighbours in the words below ``w``. The rank of bead ``j`` among
   ``g``'s neighbours is then ``before[g, j // 32]`` plus the set bits of
   ``mask[g, j // 32]`` below bit ``j % 32`` (a popcount). The two tables take ``8 W``
   bytes per node: 72 for 1ENH (``n = 269``, ``W = 9``), 317 MB for 16,384 replicas.
2. A prefix sum (``torch.cumsum``) gives the segment bounds ``ptr``; the edges are laid out
   in slot order = ``(dst, src)`` order, compacted over all replicas, padding at the end.
3. `_fill_kernel`, one program per node, expands the mask of ``g`` (no distance is computed
   again) into its edges ``j -> g`` at ``p = ptr[g] + (rank of j among g's neighbours)``.
   The ``m``-th edge out of ``g`` is the reverse of the ``m``-th edge into ``g``, so the
   same program writes the source-grouped layout there: ``src_perm[p]`` is the slot of
   ``g -> j``, ``ptr[j] + (rank of g among j's neighbours)``. Further programs of the same
   launch pad the slots from ``ptr[N]`` on (read on the device) with ``src = dst = N``.

The result equals `kernels.csr.build_csr_reference` of that edge list (``dst_ptr`` is
``src_ptr``; ``dst_perm`` is the identity). More edges than ``capacity`` cannot be stored:
the segments are then cut at ``capacity`` (every index stays in bounds, so the consumers run
safely on the truncated graph; ``src_perm[p] = p`` where the reverse of edge ``p`` was cut
off), and ``needed`` tells the caller to grow and redo.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels._triton import INTERPRET, next_pow2, tl, triton
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
def _rank(word, before, below):
    """Rank of a bead among a node's neighbours: ``before`` (int32, the neighbours in the
    node's mask words below the bead's word ``word``, int32) plus the set bits of ``word``
    in ``below`` (uint32, the bits of the beads before it in the word). int32.

    The bits are counted SWAR-style on uint32 with logical shifts (no libdevice popcount,
    so the interpreter runs it too).
    """
    x = word.to(tl.uint32, bitcast=True) & below
    x = x - ((x >> 1) & 0x55555555)
    x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F
    return before + ((x * 0x01010101) >> 24).to(tl.int32)  # the four bytes summed


@triton.jit
def _count_kernel(pos_ptr, allowed_ptr, count_ptr, mask_ptr, before_ptr, n, words, cutoff,
                  BLOCK_J: tl.constexpr):
    """Neighbours of node ``g``: their number and their set as a bitmask; one program per
    node (``N = R n`` programs).

    Parameters
    ----------
    pos_ptr : float32 [N, 3]
        Positions (Å), node ``g = r n + i`` being bead ``i`` of replica ``r``.
    allowed_ptr : uint8 [n, n]
        1 where the pair may be an edge; 0 on the diagonal.
    count_ptr : int32 [N]
        Out: ``count[g]``, the neighbours of ``g``.
    mask_ptr : int32 [N, words]
        Out: bit ``b`` of ``mask[g, w]`` is set when bead ``32 w + b`` of ``g``'s replica is
        a neighbour of ``g`` (bits past ``n`` are 0).
    before_ptr : int32 [N, words]
        Out: ``before[g, w]``, the neighbours of ``g`` among beads ``< 32 w`` (exclusive
        prefix count of the words' bits).
    n : int
        Beads per replica.
    words : int
        Mask words per node, ``ceil(n / 32)``.
    cutoff : float
        r_c (Å): a neighbour has ``d < cutoff``.
    BLOCK_J : constexpr int
        Candidate beads per tile: a power of two ``>= 32``, so that a tile fills whole words.
    """
    node = tl.program_id(0).to(tl.int64)
    bead = node % n
    base = node - bead
    mask_row = mask_ptr + node * words
    before_row = before_ptr + node * words
    shift = tl.arange(0, 32).to(tl.uint32)[None, :]
    total = tl.zeros([], dtype=tl.int32)
    for j0 in range(0, n, BLOCK_J):
        jj = j0 + tl.arange(0, BLOCK_J)
        flag = _neighbor_mask(pos_ptr, allowed_ptr, node, bead, base, jj, n, cutoff).to(tl.int32)
        flag = tl.reshape(flag, [BLOCK_J // 32, 32])  # a word per row
        word = tl.sum(flag.to(tl.uint32) << shift, axis=1)  # distinct bits: the sum is an OR
        per_word = tl.sum(flag, axis=1)
        w = j0 // 32 + tl.arange(0, BLOCK_J // 32)
        inw = w < words
        tl.store(mask_row + w, word.to(tl.int32, bitcast=True), mask=inw)
        tl.store(before_row + w, total + tl.cumsum(per_word, axis=0) - per_word, mask=inw)
        total += tl.sum(per_word, axis=0)
    tl.store(count_ptr + node, total)


@triton.jit
def _fill_kernel(mask_ptr, before_ptr, ptr_ptr, src_ptr, dst_ptr, src_perm_ptr, n, words,
                 num_nodes, capacity, BLOCK_J: tl.constexpr, PAD: tl.constexpr):
    """Edges, source-grouped layout and padding from the masks: programs ``g < N`` one per
    node, then ``ceil(capacity / PAD)`` padding programs.

    Node ``g``'s program expands its mask into its edges ``j -> g``, in increasing ``j``, at
    ``p = ptr[g] + (rank of j among g's neighbours)`` while ``p < ptr[g + 1]`` (the capacity
    cut). The reverse edge ``g -> j`` is in ``j``'s segment at
    ``k = ptr[j] + (rank of g among j's neighbours)``: ``src_perm[p] = k`` when that edge
    exists (bit ``g`` of ``j``'s mask) and was stored (``k < ptr[j + 1]``), else ``p``. The
    ``m``-th edge into ``g`` being the reverse of the ``m``-th edge out of it, that is the
    source-grouped layout, written here in ``g``'s own segment. Padding programs write
    ``src = dst = N`` and ``src_perm[k] = k`` in the slots ``k >= ptr[N]``. Every slot is
    written once.

    Parameters
    ----------
    mask_ptr : int32 [N, words]
        Neighbour bitmasks, from `_count_kernel`.
    before_ptr : int32 [N, words]
        Neighbours before each mask word, from `_count_kernel`.
    ptr_ptr : int32 [N + 1]
        Segment bounds, cut at the capacity (``ptr[N]``: the slots used).
    src_ptr, dst_ptr : int64 [capacity]
        Out: the edges ``src[k] -> dst[k]``, ``N`` in the padding.
    src_perm_ptr : int32 [capacity]
        Out: the source-grouped layout's permutation.
    n : int
        Beads per replica.
    words : int
        Mask words per node, ``ceil(n / 32)``.
    num_nodes : int
        ``N = R n``, the node programs (the rest pad).
    capacity : int
        Slots.
    BLOCK_J : constexpr int
        Candidate beads per tile: a power of two ``>= 32``, so that tiles start at words.
    PAD : constexpr int
        Slots per padding program (power of two).
    """
    pid = tl.program_id(0)
    if pid < num_nodes:
        node = pid.to(tl.int64)
        bead = node % n
        base = node - bead
        mask_row = mask_ptr + node * words
        before_row = before_ptr + node * words
        start = tl.load(ptr_ptr + node)
        end = tl.load(ptr_ptr + node + 1)
        lane = tl.arange(0, BLOCK_J)
        bit = lane % 32  # the same in every tile: tiles start at multiples of 32
        below = (tl.full([BLOCK_J], 1, tl.uint32) << bit.to(tl.uint32)) - 1
        # node g in the neighbours' masks: its word, its bit, the bits below it
        g_word = (bead // 32).to(tl.int32)
        g_bit = (bead % 32).to(tl.int32)
        g_below = tl.zeros([BLOCK_J], dtype=tl.uint32) + ((1 << g_bit.to(tl.uint32)) - 1)
        dst = tl.zeros([BLOCK_J], dtype=tl.int64) + node
        for j0 in range(0, n, BLOCK_J):
            w = j0 // 32 + lane // 32
            inw = w < words
            word = tl.load(mask_row + w, mask=inw, other=0)
            where = start + _rank(word, tl.load(before_row + w, mask=inw, other=0), below)
            keep = (((word >> bit) & 1) != 0) & (where < end)
            j = base + j0 + lane
            tl.store(src_ptr + where, j, mask=keep)
            tl.store(dst_ptr + where, dst, mask=keep)
            # the reverse edge g -> j, in j's segment
            j_row = j * words + g_word
            j_word = tl.load(mask_ptr + j_row, mask=keep, other=0)
            k = tl.load(ptr_ptr + j, mask=keep, other=0) + _rank(
                j_word, tl.load(before_ptr + j_row, mask=keep, other=0), g_below)
            found = (((j_word >> g_bit) & 1) != 0) & (k < tl.load(ptr_ptr + j + 1, mask=keep,
                                                                   other=0))
            tl.store(src_perm_ptr + where, tl.where(found, k, where), mask=keep)
    else:
        k = (pid - num_nodes).to(tl.int64) * PAD + tl.arange(0, PAD)
        pad = (k >= tl.load(ptr_ptr + num_nodes)) & (k < capacity)
        tl.store(src_ptr + k, k * 0 + num_nodes, mask=pad)
        tl.store(dst_ptr + k, k * 0 + num_nodes, mask=pad)
        tl.store(src_perm_ptr + k, k.to(tl.int32), mask=pad)


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

    Notes
    -----
    Besides the outputs, a call allocates the neighbour bitmasks, ``8 ceil(n / 32)`` bytes
    per node (317 MB for 16,384 replicas of 1ENH), freed on return.
    """
    _check(pos, allowed, capacity)
    r_count, n, _ = pos.shape
    num_nodes = r_count * n
    words = -(-n // 32)
    device = pos.device
    pos = pos.contiguous()
    allowed = allowed.to(torch.uint8).contiguous()
    counts = torch.empty(num_nodes, dtype=torch.int32, device=device)
    masks = torch.empty(max(num_nodes * words, 1), dtype=torch.int32, device=device)
    before = torch.empty_like(masks)
    ptr = torch.zeros(num_nodes + 1, dtype=torch.int32, device=device)
    src = torch.empty(capacity, dtype=torch.int64, device=device)
    dst = torch.empty(capacity, dtype=torch.int64, device=device)
    src_perm = torch.empty(capacity, dtype=torch.int32, device=device)
    # H100, 1ENH x 64, captured: 53 us a search with 128-bead tiles, one counting warp, two
    # filling warps and 256-slot padding programs (1024 slots: 58; then 256-bead counting
    # tiles: +3, two counting warps: +6). The interpreter's cost goes by operations, so
    # there fewer, larger tiles.
    block_j = min(next_pow2(n, 32), 256 if INTERPRET else 128)
    if num_nodes:
        _count_kernel[(num_nodes,)](pos, allowed, counts, masks, before, n, words,
                                    float(cutoff), BLOCK_J=block_j, num_warps=1)
        torch.cumsum(counts, 0, dtype=torch.int32, out=ptr[1:])
    needed = ptr[-1].to(torch.int64)
    ptr.clamp_(max=capacity)
    pad = 256
    _fill_kernel[(num_nodes + triton.cdiv(capacity, pad),)](
        masks, before, ptr, src, dst, src_perm, n, words, num_nodes, capacity,
        BLOCK_J=block_j, PAD=pad, num_warps=2)
    return PairGraph(src, dst, GraphCSR(ptr, _identity(capacity, device), ptr, src_perm),
                     needed)


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
