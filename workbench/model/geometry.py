"""Internal coordinates of bonded terms, batched over replicas, and the edge vectors of
the networks' graphs.

Every bonded-term function takes positions ``pos`` of shape ``(R, n, 3)`` and an index
tensor of shape ``(P, order)`` (bead indices within one molecule) and returns
one feature per replica and term, shape ``(R, P)``. All are differentiable.

Gathering the beads of a term list differentiates into a scatter-add of the term
gradients onto the beads. By default ``index_select`` gathers, whose backward is
``index_add_``: sequential (bitwise repeatable) on the CPU and atomic on a GPU, as
the reference path's SchNet scatter. Inside :func:`segment_gathers` the sum runs
through ``kernels.segment_sum`` over a bead-grouped layout of each index column,
built once per index tensor: no sort, no atomics, bitwise repeatable on a GPU. The
fused force paths, whose runs must repeat bitwise, switch that on for CUDA tensors;
bonds, angles, dihedrals and pair priors then run as one fused kernel each
(``kernels.pair_energies``, ``kernels.bonded_terms``; see
:meth:`~workbench.model.priors.PriorTerm.fused_term`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

_SEGMENT_GATHERS: ContextVar[bool] = ContextVar("segment_gathers", default=False)


@contextmanager
def segment_gathers(enabled: bool = True) -> Iterator[None]:
    """Within this block, bead gathers of tensors that require grad sum their gradients
    with the Triton segment sum (needs a CUDA device or ``TRITON_INTERPRET=1``)."""
    token = _SEGMENT_GATHERS.set(bool(enabled))
    try:
        yield
    finally:
        _SEGMENT_GATHERS.reset(token)


def segment_gathers_on() -> bool:
    """Whether the current block runs under :func:`segment_gathers` (a fused path)."""
    return _SEGMENT_GATHERS.get()


def bead_layout(
    index: torch.Tensor, column: int | str | None, n_beads: int
) -> tuple[torch.Tensor, ...]:
    """Entries of one column of ``index`` (or of all, ``column=None``) grouped by bead.

    Returns ``(ptr, perm)`` (`kernels.term_rows.entries_by_bead`): ``perm`` (int32) lists
    entry ids (term ids for one column, ``p * order + c`` for all) in increasing order
    within each bead's segment ``perm[ptr[b]:ptr[b + 1]]`` (``ptr`` int32, shape
    (n_beads + 1,)). ``column="pairs"``: the signed layout of a pair list with one gradient
    row per pair (`kernels.term_rows.pair_rows_by_bead`). Built with device operations that
    need no host synchronisation, and cached on ``index`` itself (keyed by column, bead
    count and the tensor's version), so it is made once, before any graph capture, and
    dies with the index.
    """
    from kernels.term_rows import entries_by_bead, pair_rows_by_bead

    key = (column, n_beads, index._version)
    cache = index.__dict__.setdefault("_bead_layouts", {})
    if key not in cache:
        if column == "pairs":
            cache[key] = pair_rows_by_bead(index, n_beads)
        else:
            cache[key] = entries_by_bead(index if column is None else index[:, column], n_beads)
    return cache[key]


class _SegmentGather(torch.autograd.Function):
    """``pos[:, beads]`` whose backward is a segment sum over a fixed layout."""

    @staticmethod
    def forward(ctx, pos, beads, ptr, perm):
        ctx.save_for_backward(beads, ptr, perm)
        ctx.n_beads = pos.shape[1]
        return pos.index_select(1, beads)

    @staticmethod
    def backward(ctx, grad):
        from kernels import segment_sum

        beads, ptr, perm = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: a differentiable (atomic) scatter-add
            zeros = grad.new_zeros(grad.shape[0], ctx.n_beads, grad.shape[2])
            return zeros.index_add(1, beads, grad), None, None, None
        r_count, terms, dims = grad.shape
        rows = grad.transpose(0, 1).reshape(terms, r_count * dims)
        summed = segment_sum(rows, ptr, perm)
        return summed.reshape(-1, r_count, dims).transpose(0, 1), None, None, None


def gather_beads(pos: torch.Tensor, index: torch.Tensor, column: int) -> torch.Tensor:
    """Positions of the beads in one column of ``index``, shape (R, P, 3) (see the module
    docstring for how the gradient is summed)."""
    if _SEGMENT_GATHERS.get() and pos.requires_grad:
        ptr, perm = bead_layout(index, column, pos.shape[1])
        return _SegmentGather.apply(pos, index[:, column], ptr, perm)
    return pos.index_select(1, index[:, column])


def bond_lengths(pos: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Distances ``|x_j − x_i|`` for pairs ``index[:, 0], index[:, 1]``, shape (R, P)."""
    diff = gather_beads(pos, index, 1) - gather_beads(pos, index, 0)
    return torch.linalg.vector_norm(diff, dim=-1)


def angle_cosines(pos: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """cos θ of triplets ``(i, apex j, k)``, shape (R, P)."""
    a = gather_beads(pos, index, 0) - gather_beads(pos, index, 1)
    b = gather_beads(pos, index, 2) - gather_beads(pos, index, 1)
    norms = torch.linalg.vector_norm(a, dim=-1) * torch.linalg.vector_norm(b, dim=-1)
    return (a * b).sum(-1) / norms


def torsions(pos: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Torsion angles φ in (−π, π] of quadruplets (IUPAC sign, trans = ±π), shape (R, P)."""
    b1 = gather_beads(pos, index, 1) - gather_beads(pos, index, 0)
    b2 = gather_beads(pos, index, 2) - gather_beads(pos, index, 1)
    b3 = gather_beads(pos, index, 3) - gather_beads(pos, index, 2)
    n1 = torch.linalg.cross(b1, b2)
    n2 = torch.linalg.cross(b2, b3)
    b2_unit = b2 / torch.linalg.vector_norm(b2, dim=-1, keepdim=True)
    x = (n1 * n2).sum(-1)
    y = (torch.linalg.cross(n1, n2) * b2_unit).sum(-1)
    return torch.atan2(y, x)


def edge_vectors(
    pos: torch.Tensor,
    src: torch.Tensor,
    dst: torch.Tensor,
    valid: torch.Tensor | None,
    cutoff: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x_dst − x_src`` of every edge of a graph, padding slots made harmless.

    Parameters
    ----------
    pos : torch.Tensor, shape (N, 3), float32 or float64
        Flattened positions of all replicas.
    src, dst : torch.Tensor, shape (E,), int64
        Edge endpoints; padding slots may hold any index.
    valid : torch.Tensor, shape (E,), bool, optional
        False for padding slots of a fixed-capacity graph; None when every slot is an edge.
    cutoff : float
        The network's cutoff. A padding slot's vector is ``(f, f, f)`` with
        ``f = 2 cutoff + 1``, longer than the cutoff, so its envelope, message and
        gradient are exactly zero (a scalar fill: no host-to-device copy, capturable).

    Returns
    -------
    diff : torch.Tensor, shape (E, 3), ``pos.dtype``
    src, dst : torch.Tensor, shape (E,), int64
        Indices safe to gather with (padding slots point at node 0).
    """
    if valid is not None:
        src = torch.where(valid, src, 0)
        dst = torch.where(valid, dst, 0)
    diff = pos.index_select(0, dst) - pos.index_select(0, src)
    if valid is not None:
        diff = torch.where(valid[:, None], diff, 2.0 * cutoff + 1.0)
    return diff, src, dst
