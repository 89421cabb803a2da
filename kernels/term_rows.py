"""Prior terms over fixed bead lists: one kernel writes energies and gradient rows, one
segment sum puts the rows on the beads.

A prior term ``p`` of order ``k`` (a pair, an angle, a dihedral) touches the beads
``index[p, 0..k-1]`` of every replica. Its kernel (`kernels.pair_terms`,
`kernels.bonded_terms`) evaluates a tile of ``BLOCK_P`` terms × ``BLOCK_R`` replicas per
program (`term_tile`) and writes

* the energy of its terms for each of its replicas into ``partial[r, p-block]`` (summed
  over the blocks afterwards, in a fixed order), and
* gradient rows ``grad [P, rows, R, 3]``: for angles and dihedrals ``dE_p/dx`` of each of
  the term's ``k`` beads (``rows = k``; entry ``(p, c)`` is row ``p k + c`` of ``grad`` viewed
  as ``[P k, R 3]``); for pairs only ``dE_p/dx_j`` (``rows = 1``), since ``dE_p/dx_i`` is its
  negative: half the memory of the largest tensor of a step with many replicas. Replicas
  run along the fast axis of a tile, so rows are written in contiguous runs
  (`store_term_row`).

The backward sums those rows onto the beads with one `signed_segment_sum` over a layout
of the entries of ``index`` grouped by bead (`entries_by_bead`, or `pair_rows_by_bead`
whose entries for column 0 subtract the pair's row): no atomics, bitwise repeatable, one
launch however many columns the term has.

Several term lists (`TermSpec`: bonds, angles, dihedrals, repulsion, contacts) can run as
one differentiable op (`term_energies` with a `term_layout`): each kernel writes into its
slice of one row buffer and one partial-energy buffer, and one segment sum and one
reduction serve them all. A step then pays one backward launch for all priors instead of
a segment sum, a scaling, a transpose and an accumulation per prior.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from kernels._triton import next_pow2, tl, triton
from kernels.segment_reduce import signed_segment_sum

__all__ = ["TermSpec", "check_positions", "entries_by_bead", "pair_rows_by_bead", "term_layout",
           "single_term_energies", "term_energies", "term_tile", "term_bead", "store_term_row",
           "store_tile_energy"]

#: Term-replica pairs per program of the term kernels.
TILE = 256


@triton.jit
def term_tile(P, R, BLOCK_P: tl.constexpr, BLOCK_R: tl.constexpr):
    """This program's terms ``p`` [BLOCK_P], replicas ``r`` [BLOCK_R], and masks: ``pmask``
    [BLOCK_P] and ``mask`` [BLOCK_P, BLOCK_R]."""
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    r = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    pmask = p < P
    return p, r, pmask, pmask[:, None] & (r < R)[None, :]


@triton.jit
def term_bead(pos_ptr, index_ptr, p, r, n, pmask, mask, column: tl.constexpr,
              order: tl.constexpr):
    """Coordinates of bead ``index[p, column]`` in replicas ``r`` ([BLOCK_P, BLOCK_R] each;
    0 where masked). ``pos_ptr``: [R, n, 3]; ``index_ptr``: int [P, order]."""
    bead = tl.load(index_ptr + order * p + column, mask=pmask, other=0).to(tl.int64)
    off = r.to(tl.int64)[None, :] * n * 3 + bead[:, None] * 3
    return (tl.load(pos_ptr + off, mask=mask, other=0.0),
            tl.load(pos_ptr + off + 1, mask=mask, other=0.0),
            tl.load(pos_ptr + off + 2, mask=mask, other=0.0))


@triton.jit
def store_term_row(grad_ptr, p, r, R, gx, gy, gz, mask, column: tl.constexpr,
                   order: tl.constexpr):
    """``dE/dx`` of bead ``column`` of terms ``p`` in replicas ``r`` into ``grad [P, order,
    R, 3]`` (each [BLOCK_P, BLOCK_R])."""
    off = ((p.to(tl.int64)[:, None] * order + column) * R + r[None, :]) * 3
    tl.store(grad_ptr + off, gx, mask=mask)
    tl.store(grad_ptr + off + 1, gy, mask=mask)
    tl.store(grad_ptr + off + 2, gz, mask=mask)


@triton.jit
def store_tile_energy(partial_ptr, partial_stride, energy, r, R, mask):
    """The tile's energy per replica (masked lanes count 0) into column ``program_id(0)`` of
    ``partial`` (row stride ``partial_stride``: several term lists share one buffer)."""
    total = tl.sum(tl.where(mask, energy, 0.0), axis=0)
    tl.store(partial_ptr + r * partial_stride + tl.program_id(0), total, mask=r < R)


def tile_shape(replicas: int) -> tuple[int, int]:
    """``(BLOCK_P, BLOCK_R)``: up to 32 replicas along the fast axis, 256 lanes in all."""
    block_r = min(32, next_pow2(replicas, minimum=1))
    return TILE // block_r, block_r


class TermSpec(NamedTuple):
    """One term list ready for its kernel (`kernels.pair_terms.pair_term`,
    `kernels.bonded_terms.angle_term`, `kernels.bonded_terms.dihedral_term`).

    Attributes
    ----------
    launch : callable
        ``launch(pos, partial, partial_stride, grad, grid, meta)`` runs the kernel on
        ``grid`` with the constexpr arguments ``meta`` (``BLOCK_P``, ``BLOCK_R``, ``F64``),
        filling ``partial`` (``[R, p-blocks]`` with row stride ``partial_stride``) and
        ``grad`` (``[P, rows, R, 3]``).
    index : Tensor, int [P, k]
        Beads of each term.
    rows : int
        Gradient rows per term: ``k``, or 1 for a pair (``dE/dx_j``; bead ``i`` gets minus).
    """

    launch: Callable
    index: torch.Tensor
    rows: int


def check_positions(pos, op: str) -> None:
    """Refuse positions that no term kernel takes (float32 or float64 ``[R, n, 3]``)."""
    if pos.dtype not in (torch.float32, torch.float64) or pos.ndim != 3 or pos.shape[2] != 3:
        raise ValueError(
            f"{op}: pos must be float32 or float64 [R, n, 3], got {pos.dtype} {tuple(pos.shape)}"
        )


def _grouped(beads, values, n_beads):
    order = torch.argsort(beads, stable=True)
    bounds = torch.arange(n_beads + 1, device=beads.device, dtype=beads.dtype)
    ptr = torch.searchsorted(beads[order], bounds)
    return ptr.to(torch.int32), values[order].to(torch.int32)


def entries_by_bead(index: torch.Tensor, n_beads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The entries of ``index`` grouped by bead: ``(ptr, perm)`` as `segment_sum` takes them.

    Parameters
    ----------
    index : Tensor, int [P, k]
        Beads of each term (row-major entry ``p k + c`` is column ``c`` of term ``p``).
    n_beads : int

    Returns
    -------
    ptr : Tensor, int32 [n_beads + 1]
    perm : Tensor, int32 [P k]
        Entry ids in increasing order within each bead's segment ``perm[ptr[b]:ptr[b+1]]``.
        Device operations only (no host synchronisation).
    """
    beads = index.reshape(-1)
    return _grouped(beads, torch.arange(beads.numel(), device=beads.device), n_beads)


def pair_rows_by_bead(index: torch.Tensor, n_beads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`entries_by_bead` of a pair list ``[P, 2]`` for one gradient row per pair.

    Row ``p`` holds ``dE_p/dx_j`` (``j = index[p, 1]``); bead ``j`` adds it, bead
    ``i = index[p, 0]`` subtracts it: ``perm`` entry ``p`` or ``-1 - p`` (int32), in the
    order of `entries_by_bead`.
    """
    return term_layout([TermSpec(None, index, 1)], n_beads)


def term_layout(specs, n_beads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradient rows of several term lists grouped by bead, for one segment sum.

    The rows of ``specs[t]`` follow those of the lists before it in one buffer; within a
    bead, entries keep the order of the lists, then of the entries. One list with ``rows =
    k`` gives `entries_by_bead`, a pair list with ``rows = 1`` `pair_rows_by_bead`.

    Returns
    -------
    ptr : Tensor, int32 [n_beads + 1]
    perm : Tensor, int32
        Signed row ids (``-1 - row`` subtracts the row).
    """
    beads, values, offset = [], [], 0
    for spec in specs:
        terms, order = spec.index.shape
        entry = torch.arange(terms * order, device=spec.index.device)
        if spec.rows == order:
            value = entry + offset
        elif spec.rows == 1 and order == 2:
            row = entry // 2 + offset
            value = torch.where(entry % 2 == 1, row, -1 - row)
        else:
            raise ValueError(f"a term list of order {order} has {order} gradient rows per term "
                             f"(or 1 for pairs), not {spec.rows}")
        beads.append(spec.index.reshape(-1))
        values.append(value)
        offset += terms * spec.rows
    return _grouped(torch.cat(beads), torch.cat(values), n_beads)


class _TermEnergies(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pos, specs, ptr, perm):
        r_count = pos.shape[0]
        block_p, block_r = tile_shape(r_count)
        blocks = [triton.cdiv(spec.index.shape[0], block_p) for spec in specs]
        partial = torch.empty(r_count, sum(blocks), dtype=pos.dtype, device=pos.device)
        rows = [spec.index.shape[0] * spec.rows for spec in specs]
        grad = torch.empty(sum(rows), r_count, 3, dtype=pos.dtype, device=pos.device)
        meta = dict(BLOCK_P=block_p, BLOCK_R=block_r, F64=pos.dtype == torch.float64)
        x = pos.contiguous()
        column = row = 0
        for spec, count, height in zip(specs, blocks, rows, strict=True):
            if count:
                spec.launch(x, partial[:, column:], partial.shape[1], grad[row:row + height],
                            (count, triton.cdiv(r_count, block_r)), meta)
            column += count
            row += height
        ctx.save_for_backward(grad, ptr, perm)
        ctx.shape = pos.shape
        return partial.sum(1)

    @staticmethod
    def backward(ctx, grad_energy):
        if torch.is_grad_enabled():
            raise NotImplementedError(
                "second derivatives through the fused prior terms are not implemented; "
                "use the reference path (no kernel options) to differentiate forces"
            )
        grad, ptr, perm = ctx.saved_tensors
        r_count, n, _ = ctx.shape
        per_bead = signed_segment_sum(grad.reshape(-1, r_count * 3), ptr, perm)
        per_bead = per_bead.reshape(n, r_count, 3) * grad_energy[None, :, None]
        return per_bead.transpose(0, 1), None, None, None


def single_term_energies(pos, spec: TermSpec, layout, op: str) -> torch.Tensor:
    """`term_energies` of one term list, after checking ``pos`` (zeros for an empty list)."""
    check_positions(pos, op)
    if spec.index.shape[0] == 0:
        return pos.new_zeros(pos.shape[0])
    return term_energies(pos, [spec], layout)


def term_energies(pos, specs, layout) -> torch.Tensor:
    """Summed energy per replica of term lists, each by its kernel (differentiable w.r.t.
    ``pos`` once).

    Parameters
    ----------
    pos : Tensor, float32 or float64 [R, n, 3]
    specs : sequence of TermSpec
        The term lists (any may be empty).
    layout : tuple of two Tensors, int32
        `term_layout` of ``specs`` (build it once, outside a captured step).

    Returns
    -------
    Tensor, dtype of ``pos`` [R]
        Summed per kernel tile, then over the tiles of all lists, in a fixed order.
    """
    return _TermEnergies.apply(pos, tuple(specs), *layout)
