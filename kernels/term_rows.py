"""Prior terms over fixed bead lists: one kernel writes energies and gradient rows, one
segment sum puts the rows on the beads.

A prior term ``p`` of order ``k`` (a pair, an angle, a dihedral) touches the beads
``index[p, 0..k-1]`` of every replica. Its kernel (`kernels.pair_terms`,
`kernels.bonded_terms`) evaluates a block of terms of one replica per program and writes

* the block's energy into ``partial[r, block]`` (summed over blocks afterwards, in a fixed
  order), and
* ``dE_p/dx`` of each of the term's beads into a row of ``grad [P, k, R, 3]``: entry
  ``(p, c)`` is row ``p k + c`` of ``grad`` viewed as ``[P k, R 3]``.

The backward sums those rows onto the beads with `segment_sum` over one layout of all
entries of ``index`` grouped by bead (`entries_by_bead`): no atomics, bitwise repeatable,
one launch however many columns the term has.
"""

from __future__ import annotations

import torch

from kernels._triton import triton
from kernels.segment_reduce import segment_sum

__all__ = ["TERM_BLOCK", "entries_by_bead", "term_energies"]

#: Terms per program of the term kernels.
TERM_BLOCK = 256


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
    perm = torch.argsort(beads, stable=True)
    bounds = torch.arange(n_beads + 1, device=index.device, dtype=beads.dtype)
    ptr = torch.searchsorted(beads[perm], bounds)
    return ptr.to(torch.int32), perm.to(torch.int32)


class _TermEnergies(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pos, launch, order, num_terms, ptr, perm):
        r_count = pos.shape[0]
        blocks = triton.cdiv(num_terms, TERM_BLOCK)
        partial = torch.empty(r_count, blocks, dtype=pos.dtype, device=pos.device)
        grad = torch.empty(num_terms, order, r_count, 3, dtype=pos.dtype, device=pos.device)
        launch(pos.contiguous(), partial, grad, (blocks, r_count))
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
        per_bead = segment_sum(grad.reshape(-1, r_count * 3), ptr, perm)
        per_bead = per_bead.reshape(n, r_count, 3) * grad_energy[None, :, None]
        return per_bead.transpose(0, 1), None, None, None, None, None


def term_energies(pos, launch, order: int, num_terms: int, layout) -> torch.Tensor:
    """Energy per replica from a term kernel (differentiable w.r.t. ``pos`` once).

    Parameters
    ----------
    pos : Tensor, float32 or float64 [R, n, 3]
    launch : callable
        ``launch(pos, partial, grad, grid)`` runs the term kernel on ``grid = (blocks, R)``,
        filling ``partial [R, blocks]`` and ``grad [P, order, R, 3]`` (module docstring).
    order : int
        Beads per term, ``k``.
    num_terms : int
        ``P`` (> 0).
    layout : tuple of two Tensors, int32
        `entries_by_bead` of the term list.

    Returns
    -------
    Tensor, dtype of ``pos`` [R]
    """
    return _TermEnergies.apply(pos, launch, order, num_terms, *layout)
