"""Fused pair prior terms: energy and gradient of a fixed pair list in one kernel.

The pair priors of a coarse-grained protein (repulsion between non-bonded beads, native
contact wells) run over fixed lists of bead pairs, tens of thousands per molecule (1ENH:
33,005 repulsive pairs). Evaluated with tensor operations they cost a gather, a
difference, a norm, a power and a sum forward and as many kernels again backward, each
over ``R·P`` pairs. Here one program handles a tile of pairs × replicas: it reads both
beads, computes the pair energy and ``dE/dx_j`` and writes that gradient row once, with
each replica's energy summed per tile (then over tiles, in a fixed order). The backward
adds the row to bead ``j`` and subtracts it from bead ``i`` with one signed segment sum
(`kernels.term_rows`): no atomics, bitwise repeatable.

Forms (``E`` in kcal/mol, ``d`` the pair distance in Å, per-pair parameters ``a``, ``b``):

* ``"power6"``: ``E = (a/d)⁶`` (``a = σ``; ``b`` unused),
* ``"cutoff_power6"``: ``(a/d)⁶ − (a/b)⁶ + 6 (a/b)⁶ (d − b)/b`` for ``d < b``, else 0
  (``a = σ``, ``b = r_x``; energy and force continuous at ``r_x``),
* ``"lj12_10"``: ``E = b [5 (a/d)¹² − 6 (a/d)¹⁰]`` (``a = r0``, ``b = ε``),
* ``"harmonic"``: ``E = b (d − a)²`` (``a = x0``, ``b = k``; the bonds),
* ``"gaussian"``: ``E = b exp(−(d − a)² / (2 w²))`` with ``w = BARRIER_WIDTH`` (``a`` the
  centre, ``b`` the height; the desolvation barriers of a teacher's contacts).
"""

from __future__ import annotations

import torch

from kernels._triton import sqrt_rounded, tl, triton
from kernels.term_rows import (
    TermSpec,
    single_term_energies,
    store_term_row,
    store_tile_energy,
    term_bead,
    term_tile,
)

__all__ = ["BARRIER_WIDTH", "PAIR_FORMS", "pair_term", "pair_energies",
           "pair_energies_reference"]

#: Names of the forms and their code in the kernel.
PAIR_FORMS = {"power6": 0, "cutoff_power6": 1, "lj12_10": 2, "harmonic": 3, "gaussian": 4}

#: Width ``w`` of the ``"gaussian"`` form, Å.
BARRIER_WIDTH = 0.5


@triton.jit
def _pair_kernel(pos_ptr, index_ptr, a_ptr, b_ptr, partial_ptr, partial_stride, grad_ptr, P, R, n,
                 FORM: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_R: tl.constexpr,
                 F64: tl.constexpr, WIDTH: tl.constexpr):
    """One tile of pairs × replicas (`kernels.term_rows`).

    pos_ptr : [R, n, 3]; index_ptr : int [P, 2] (pairs ``(i, j)``, row-major); a_ptr, b_ptr : [P];
    partial_ptr, partial_stride : [R, p-blocks] and its row stride (energy of the tile's
    pairs per replica);
    grad_ptr : [P, 1, R, 3] (``dE/dx_j`` of each pair; ``dE/dx_i`` is its negative).
    P, R, n : pairs, replicas, beads per replica. FORM : code of `PAIR_FORMS`.
    BLOCK_P, BLOCK_R : tile shape. F64 : float64 positions (tests), else float32.
    WIDTH : ``BARRIER_WIDTH`` (the ``"gaussian"`` form's width, Å).
    """
    p, r, pmask, mask = term_tile(P, R, BLOCK_P, BLOCK_R)
    xi, yi, zi = term_bead(pos_ptr, index_ptr, p, r, n, pmask, mask, 0, 2)
    xj, yj, zj = term_bead(pos_ptr, index_ptr, p, r, n, pmask, mask, 1, 2)
    a = tl.load(a_ptr + p, mask=pmask, other=1.0)[:, None]
    b = tl.load(b_ptr + p, mask=pmask, other=1.0)[:, None]
    dx = tl.where(mask, xj - xi, 1.0)  # masked lanes: a unit distance
    dy = yj - yi
    dz = zj - zi
    d = sqrt_rounded(dx * dx + dy * dy + dz * dz, F64)
    if FORM == 4:
        z = (d - a) / WIDTH
        energy = b * tl.exp(-0.5 * z * z)
        de_dd = -energy * z / WIDTH
    elif FORM == 3:
        energy = b * (d - a) * (d - a)
        de_dd = 2.0 * b * (d - a)
    elif FORM == 2:
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
    coef = tl.where(mask, de_dd / d, 0.0)
    store_term_row(grad_ptr, p, r, R, coef * dx, coef * dy, coef * dz, mask, 0, 1)
    store_tile_energy(partial_ptr, partial_stride, energy, r, R, mask)


def pair_term(index, a, b, form: str) -> TermSpec:
    """A pair list for `kernels.term_rows.term_energies` (one gradient row per pair).

    Parameters as in `pair_energies`.
    """
    if form not in PAIR_FORMS:
        raise ValueError(f"unknown pair form {form!r}; one of {sorted(PAIR_FORMS)}")
    index, a, b = index.contiguous(), a.contiguous(), b.contiguous()

    def launch(x, partial, stride, grad, grid, meta):
        _pair_kernel[grid](x, index, a, b, partial, stride, grad, index.shape[0], x.shape[0],
                           x.shape[1], FORM=PAIR_FORMS[form], WIDTH=BARRIER_WIDTH, **meta)

    return TermSpec(launch, index, 1)


def pair_energies(pos, index, a, b, form: str, layout):
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
    layout : tuple of two Tensors, int32
        `kernels.term_rows.pair_rows_by_bead` of ``index`` (``ptr`` [n + 1], ``perm`` [2 P]).

    Returns
    -------
    Tensor, dtype of ``pos`` [R]
        Sum of the pair energies of each replica, kcal/mol (summed per tile of pairs,
        then over the tiles, in a fixed order).
    """
    return single_term_energies(pos, pair_term(index, a, b, form), layout, "pair_energies")


def pair_energies_reference(pos, index, a, b, form: str, layout=None):
    """PyTorch reference of `pair_energies` (same signature; ``layout`` unused)."""
    if form not in PAIR_FORMS:
        raise ValueError(f"unknown pair form {form!r}; one of {sorted(PAIR_FORMS)}")
    d = (pos[:, index[:, 1]] - pos[:, index[:, 0]]).norm(dim=-1)
    if form == "harmonic":
        return (b * (d - a) ** 2).sum(-1)
    if form == "gaussian":
        return (b * torch.exp(-0.5 * ((d - a) / BARRIER_WIDTH) ** 2)).sum(-1)
    if form == "lj12_10":
        x2 = (a / d) ** 2
        return (b * x2**5 * (5.0 * x2 - 6.0)).sum(-1)
    x6 = (a / d) ** 6
    if form == "power6":
        return x6.sum(-1)
    edge6 = (a / b) ** 6
    shifted = x6 - edge6 + 6.0 * edge6 * (d - b) / b
    return torch.where(d < b, shifted, torch.zeros_like(d)).sum(-1)
