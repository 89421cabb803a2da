"""Fused pair prior terms: energy and gradient of a fixed pair list in one kernel.

The pair priors of a coarse-grained protein (repulsion between non-bonded beads, native
contact wells) run over fixed lists of bead pairs, tens of thousands per molecule (1ENH:
33,005 repulsive pairs). Evaluated with tensor operations they cost a gather, a
difference, a norm, a power and a sum forward and as many kernels again backward, each
over ``R·P`` pairs. Here one program handles a block of pairs of one replica: it reads
both beads, computes the pair energy and ``dE/dx_j`` and writes the gradient row once,
with the replica's energy summed per block (then over blocks, in a fixed order). The
backward sums the gradient rows onto the beads with `segment_sum` over the bead layouts
of the two index columns: no atomics, bitwise repeatable.

Forms (``E`` in kcal/mol, ``d`` the pair distance in Å, per-pair parameters ``a``, ``b``):

* ``"power6"``: ``E = (a/d)⁶`` (``a = σ``; ``b`` unused),
* ``"cutoff_power6"``: ``(a/d)⁶ − (a/b)⁶ + 6 (a/b)⁶ (d − b)/b`` for ``d < b``, else 0
  (``a = σ``, ``b = r_x``; energy and force continuous at ``r_x``),
* ``"lj12_10"``: ``E = b [5 (a/d)¹² − 6 (a/d)¹⁰]`` (``a = r0``, ``b = ε``).
"""

from __future__ import annotations

import torch

from kernels._triton import tl, triton
from kernels.segment_reduce import segment_sum

__all__ = ["PAIR_FORMS", "pair_energies", "pair_energies_reference"]

#: Names of the forms and their code in the kernel.
PAIR_FORMS = {"power6": 0, "cutoff_power6": 1, "lj12_10": 2}

_BLOCK = 256


@triton.jit
def _pair_kernel(pos_ptr, index_ptr, a_ptr, b_ptr, partial_ptr, grad_ptr, P, R, n,
                 FORM: tl.constexpr, BLOCK: tl.constexpr):
    """One block of pairs of one replica.

    pos_ptr : [R, n, 3]; index_ptr : int [P, 2] (pairs ``(i, j)``, row-major); a_ptr, b_ptr : [P];
    partial_ptr : [R, num_blocks] (energy of the block's pairs);
    grad_ptr : [P, R, 3] (``dE/dx_j`` of each pair; ``dE/dx_i`` is its negative).
    P, R, n : pairs, replicas, beads per replica. FORM : code of `PAIR_FORMS`.
    BLOCK : pairs per program. All float arguments share one dtype (float32 in MD).
    """
    block = tl.program_id(0)
    r = tl.program_id(1)
    p = block * BLOCK + tl.arange(0, BLOCK)
    mask = p < P
    i = tl.load(index_ptr + 2 * p, mask=mask, other=0).to(tl.int64)
    j = tl.load(index_ptr + 2 * p + 1, mask=mask, other=1).to(tl.int64)
    a = tl.load(a_ptr + p, mask=mask, other=1.0)
    b = tl.load(b_ptr + p, mask=mask, other=1.0)
    base = pos_ptr + r.to(tl.int64) * n * 3
    dx = tl.load(base + j * 3 + 0, mask=mask, other=1.0) - tl.load(base + i * 3 + 0, mask=mask,
                                                                     other=0.0)
    dy = tl.load(base + j * 3 + 1, mask=mask, other=0.0) - tl.load(base + i * 3 + 1, mask=mask,
                                                                     other=0.0)
    dz = tl.load(base + j * 3 + 2, mask=mask, other=0.0) - tl.load(base + i * 3 + 2, mask=mask,
                                                                     other=0.0)
    if pos_ptr.dtype.element_ty == tl.float64:
        d = tl.sqrt(dx * dx + dy * dy + dz * dz)
    else:  # correctly rounded, as the reference's norm
        d = tl.sqrt_rn(dx * dx + dy * dy + dz * dz)
    if FORM == 2:
        x2 = (a / d) * (a / d)
        x10 = x2 * x2 * x2 * x2 * x2
        energy = b * x10 * (5.0 * x2 - 6.0)
        de_dd = 60.0 * b * x10 * (1.0 - x2) / d
    else:
        x = a / d
        x6 = x * x * x * x * x * x
        energy = x6
        de_dd = -6.0 * x6 / d
        if FORM == 1:
            e = a / b
            edge6 = e * e * e * e * e * e
            inside = d < b
            energy = tl.where(inside, x6 - edge6 + 6.0 * edge6 * (d - b) / b, 0.0)
            de_dd = tl.where(inside, de_dd + 6.0 * edge6 / b, 0.0)
    energy = tl.where(mask, energy, 0.0)
    coef = tl.where(mask, de_dd / d, 0.0)
    row = grad_ptr + (p.to(tl.int64) * R + r) * 3
    tl.store(row + 0, coef * dx, mask=mask)
    tl.store(row + 1, coef * dy, mask=mask)
    tl.store(row + 2, coef * dz, mask=mask)
    tl.store(partial_ptr + r * tl.num_programs(0) + block, tl.sum(energy, axis=0))


class _PairEnergies(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pos, index, a, b, form, layouts):
        r_count, n, _ = pos.shape
        pairs = index.shape[0]
        blocks = triton.cdiv(pairs, _BLOCK)
        partial = torch.empty(r_count, blocks, dtype=pos.dtype, device=pos.device)
        grad = torch.empty(pairs, r_count, 3, dtype=pos.dtype, device=pos.device)
        _pair_kernel[(blocks, r_count)](
            pos.contiguous(), index.contiguous(), a.contiguous(), b.contiguous(), partial,
            grad, pairs, r_count, n,
            FORM=PAIR_FORMS[form], BLOCK=_BLOCK,
        )
        ctx.save_for_backward(grad, *layouts)
        ctx.shape = pos.shape
        return partial.sum(1)

    @staticmethod
    def backward(ctx, grad_energy):
        if torch.is_grad_enabled():
            raise NotImplementedError(
                "second derivatives through the fused pair terms are not implemented; "
                "use the reference path (no kernel options) to differentiate forces"
            )
        grad, ptr_i, perm_i, ptr_j, perm_j = ctx.saved_tensors
        r_count, n, _ = ctx.shape
        rows = grad.reshape(grad.shape[0], r_count * 3)
        per_bead = segment_sum(rows, ptr_j, perm_j) - segment_sum(rows, ptr_i, perm_i)
        per_bead = per_bead.reshape(n, r_count, 3) * grad_energy[None, :, None]
        return per_bead.transpose(0, 1), None, None, None, None, None


def pair_energies(pos, index, a, b, form: str, layouts):
    """Energy per replica of a pair prior (Triton; differentiable w.r.t. ``pos`` once).

    Parameters
    ----------
    pos : Tensor, float32 (MD) or float64 (tests) [R, n, 3]
        Positions, Å.
    index : Tensor, int [P, 2]
        Bead pairs ``(i, j)`` within one molecule.
    a, b : Tensor, dtype of ``pos`` [P]
        Per-pair parameters of ``form`` (module docstring).
    form : str
        A key of `PAIR_FORMS`.
    layouts : tuple of four Tensors, int32
        ``(ptr_i, perm_i, ptr_j, perm_j)``: the pairs grouped by the bead of column 0 and
        of column 1 (``ptr`` [n + 1], ``perm`` [P], as `segment_sum` takes them).

    Returns
    -------
    Tensor, dtype of ``pos`` [R]
        Sum of the pair energies of each replica, kcal/mol (summed per block of pairs,
        then over the blocks, in a fixed order).
    """
    if form not in PAIR_FORMS:
        raise ValueError(f"unknown pair form {form!r}; one of {sorted(PAIR_FORMS)}")
    if pos.dtype not in (torch.float32, torch.float64) or pos.ndim != 3 or pos.shape[2] != 3:
        raise ValueError(
            f"pos must be float32 or float64 [R, n, 3], got {pos.dtype} {tuple(pos.shape)}"
        )
    if index.shape[0] == 0:
        return pos.new_zeros(pos.shape[0])
    return _PairEnergies.apply(pos, index, a, b, form, tuple(layouts))


def pair_energies_reference(pos, index, a, b, form: str, layouts=None):
    """PyTorch reference of `pair_energies` (same signature; ``layouts`` unused)."""
    if form not in PAIR_FORMS:
        raise ValueError(f"unknown pair form {form!r}; one of {sorted(PAIR_FORMS)}")
    d = (pos[:, index[:, 1]] - pos[:, index[:, 0]]).norm(dim=-1)
    if form == "lj12_10":
        x2 = (a / d) ** 2
        return (b * x2**5 * (5.0 * x2 - 6.0)).sum(-1)
    x6 = (a / d) ** 6
    if form == "power6":
        return x6.sum(-1)
    edge6 = (a / b) ** 6
    shifted = x6 - edge6 + 6.0 * edge6 * (d - b) / b
    return torch.where(d < b, shifted, torch.zeros_like(d)).sum(-1)
