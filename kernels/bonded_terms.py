"""Fused angle and dihedral prior terms: energy and analytic gradient in one kernel each.

Written with tensor operations, a harmonic angle term costs about thirty kernels per step
(gathers, differences, norms, a dot product, their backward) and a Fourier dihedral term
about fifty (three cross products and an ``atan2``, and their backward). Here one program
handles a tile of terms × replicas and writes its energy per replica and the gradient of
every bead of every term; `kernels.term_rows` sums the rows onto the beads (one segment
sum, no atomics, bitwise repeatable).

Forms (energies in kcal/mol, the CGSchNet conventions of `workbench.model.priors`):

* `angle_energies`: ``E = k (cos θ − x0)²`` over triplets ``(i, apex j, l)``, with
  ``cos θ = a·b / (|a| |b|)``, ``a = x_i − x_j``, ``b = x_l − x_j``. Gradient:
  ``∂cos θ/∂x_i = b/(|a||b|) − cos θ a/|a|²`` (likewise for ``x_l``), and the apex gets
  minus their sum.
* `dihedral_energies`: ``E = v0 + Σ_m [k1_m sin(mφ) + k2_m cos(mφ)]``, ``m = 1..D``, over
  quadruplets ``(x0, x1, x2, x3)``, with ``b1 = x1 − x0``, ``b2 = x2 − x1``, ``b3 = x3 − x2``,
  ``n1 = b1 × b2``, ``n2 = b2 × b3`` and ``φ = atan2(|b2| b1·n2, n1·n2)`` (IUPAC sign, trans
  ``= ±π``). No angle is formed: ``cos φ`` and ``sin φ`` come from that pair of numbers and
  the multiples from the complex recurrence ``e^{i(m+1)φ} = e^{imφ} e^{iφ}``. The gradient of
  ``φ`` is the textbook one (Blondel & Karplus, J. Comput. Chem. 17, 1132 (1996))::

      ∂φ/∂x0 = −|b2|/|n1|² n1                 ∂φ/∂x3 = |b2|/|n2|² n2
      ∂φ/∂x1 = −∂φ/∂x0 + (b1·b2)/(|n1|²|b2|) n1 + (b3·b2)/(|n2|²|b2|) n2
      ∂φ/∂x2 = −∂φ/∂x3 − (b1·b2)/(|n1|²|b2|) n1 − (b3·b2)/(|n2|²|b2|) n2

Degenerate geometry (two coincident beads, collinear dihedral beads) gives non-finite
values, as the reference does; the simulation's blow-up check stops such a replica.
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

__all__ = ["angle_term", "dihedral_term", "angle_energies", "angle_energies_reference",
           "dihedral_energies", "dihedral_energies_reference"]


@triton.jit
def _angle_kernel(pos_ptr, index_ptr, x0_ptr, k_ptr, partial_ptr, partial_stride, grad_ptr, P, R,
                  n,
                  BLOCK_P: tl.constexpr, BLOCK_R: tl.constexpr, F64: tl.constexpr):
    """One tile of angle terms × replicas (`kernels.term_rows`).

    pos_ptr : [R, n, 3]; index_ptr : int [P, 3] (``(i, apex j, l)``, row-major);
    x0_ptr, k_ptr : [P] (``cos θ0``, ``k``); partial_ptr, partial_stride : [R, p-blocks] and
    its row stride (the tile's energy per replica); grad_ptr : [P, 3, R, 3] (``dE/dx`` of
    each bead of each term); P, R, n : terms, replicas, beads per replica; BLOCK_P,
    BLOCK_R : tile shape; F64 : float64 positions (tests), else float32. One float dtype
    throughout.
    """
    p, r, pmask, mask = term_tile(P, R, BLOCK_P, BLOCK_R)
    ix, iy, iz = term_bead(pos_ptr, index_ptr, p, r, n, pmask, mask, 0, 3)
    jx, jy, jz = term_bead(pos_ptr, index_ptr, p, r, n, pmask, mask, 1, 3)
    lx, ly, lz = term_bead(pos_ptr, index_ptr, p, r, n, pmask, mask, 2, 3)
    ax, ay, az = ix - jx, iy - jy, iz - jz
    bx, by, bz = lx - jx, ly - jy, lz - jz
    aa = tl.where(mask, ax * ax + ay * ay + az * az, 1.0)
    bb = tl.where(mask, bx * bx + by * by + bz * bz, 1.0)
    inv = 1.0 / (sqrt_rounded(aa, F64) * sqrt_rounded(bb, F64))
    cos = (ax * bx + ay * by + az * bz) * inv
    x0 = tl.load(x0_ptr + p, mask=pmask, other=0.0)[:, None]
    k = tl.load(k_ptr + p, mask=pmask, other=0.0)[:, None]
    energy = k * (cos - x0) * (cos - x0)
    de_dc = tl.where(mask, 2.0 * k * (cos - x0), 0.0)
    ca = cos / aa
    cb = cos / bb
    gix = de_dc * (bx * inv - ca * ax)
    giy = de_dc * (by * inv - ca * ay)
    giz = de_dc * (bz * inv - ca * az)
    glx = de_dc * (ax * inv - cb * bx)
    gly = de_dc * (ay * inv - cb * by)
    glz = de_dc * (az * inv - cb * bz)
    store_term_row(grad_ptr, p, r, R, gix, giy, giz, mask, 0, 3)
    store_term_row(grad_ptr, p, r, R, -gix - glx, -giy - gly, -giz - glz, mask, 1, 3)
    store_term_row(grad_ptr, p, r, R, glx, gly, glz, mask, 2, 3)
    store_tile_energy(partial_ptr, partial_stride, energy, r, R, mask)


@triton.jit
def _dihedral_kernel(pos_ptr, index_ptr, k1_ptr, k2_ptr, v0_ptr, partial_ptr, partial_stride,
                     grad_ptr, P, R, n, D: tl.constexpr, BLOCK_P: tl.constexpr,
                     BLOCK_R: tl.constexpr, F64: tl.constexpr):
    """One tile of Fourier dihedral terms × replicas.

    pos_ptr : [R, n, 3]; index_ptr : int [P, 4]; k1_ptr, k2_ptr : [P, D] (sine and cosine
    amplitudes of multiplicities 1..D); v0_ptr : [P]; partial_ptr, partial_stride : as in
    `_angle_kernel`;
    grad_ptr : [P, 4, R, 3]; P, R, n, BLOCK_P, BLOCK_R, F64 : as in `_angle_kernel`;
    D : multiplicities.
    """
    p, r, pmask, mask = term_tile(P, R, BLOCK_P, BLOCK_R)
    x0x, x0y, x0z = term_bead(pos_ptr, index_ptr, p, r, n, pmask, mask, 0, 4)
    x1x, x1y, x1z = term_bead(pos_ptr, index_ptr, p, r, n, pmask, mask, 1, 4)
    x2x, x2y, x2z = term_bead(pos_ptr, index_ptr, p, r, n, pmask, mask, 2, 4)
    x3x, x3y, x3z = term_bead(pos_ptr, index_ptr, p, r, n, pmask, mask, 3, 4)
    # masked lanes: a right-angled, non-degenerate dihedral
    b1x = tl.where(mask, x1x - x0x, 1.0)
    b1y = x1y - x0y
    b1z = x1z - x0z
    b2x = x2x - x1x
    b2y = tl.where(mask, x2y - x1y, 1.0)
    b2z = x2z - x1z
    b3x = x3x - x2x
    b3y = x3y - x2y
    b3z = tl.where(mask, x3z - x2z, 1.0)
    n1x = b1y * b2z - b1z * b2y
    n1y = b1z * b2x - b1x * b2z
    n1z = b1x * b2y - b1y * b2x
    n2x = b2y * b3z - b2z * b3y
    n2y = b2z * b3x - b2x * b3z
    n2z = b2x * b3y - b2y * b3x
    b2b2 = b2x * b2x + b2y * b2y + b2z * b2z
    len2 = sqrt_rounded(b2b2, F64)
    x = n1x * n2x + n1y * n2y + n1z * n2z
    y = len2 * (b1x * n2x + b1y * n2y + b1z * n2z)
    rho = sqrt_rounded(x * x + y * y, F64)
    c1 = x / rho
    s1 = y / rho
    cm = c1
    sm = s1
    energy = tl.zeros_like(c1) + tl.load(v0_ptr + p, mask=pmask, other=0.0)[:, None]
    de_dphi = tl.zeros_like(c1)
    for m in tl.static_range(D):
        k1 = tl.load(k1_ptr + p * D + m, mask=pmask, other=0.0)[:, None]
        k2 = tl.load(k2_ptr + p * D + m, mask=pmask, other=0.0)[:, None]
        energy += k1 * sm + k2 * cm
        de_dphi += (m + 1) * (k1 * cm - k2 * sm)
        cm, sm = cm * c1 - sm * s1, sm * c1 + cm * s1
    de_dphi = tl.where(mask, de_dphi, 0.0)
    n1n1 = n1x * n1x + n1y * n1y + n1z * n1z
    n2n2 = n2x * n2x + n2y * n2y + n2z * n2z
    f0 = -de_dphi * len2 / n1n1  # dE/dx0 = f0 n1
    f3 = de_dphi * len2 / n2n2  # dE/dx3 = f3 n2
    u = (b1x * b2x + b1y * b2y + b1z * b2z) / b2b2
    v = (b3x * b2x + b3y * b2y + b3z * b2z) / b2b2
    # with u = b1·b2/|b2|², v = b3·b2/|b2|²: dE/dx1 = -(1 + u) f0 n1 + v f3 n2 and
    # dE/dx2 = u f0 n1 - (1 + v) f3 n2 (the four rows sum to zero)
    g1a = -f0 * (1.0 + u)
    g1b = f3 * v
    g2a = f0 * u
    g2b = -f3 * (1.0 + v)
    store_term_row(grad_ptr, p, r, R, f0 * n1x, f0 * n1y, f0 * n1z, mask, 0, 4)
    store_term_row(grad_ptr, p, r, R, g1a * n1x + g1b * n2x, g1a * n1y + g1b * n2y,
                   g1a * n1z + g1b * n2z, mask, 1, 4)
    store_term_row(grad_ptr, p, r, R, g2a * n1x + g2b * n2x, g2a * n1y + g2b * n2y,
                   g2a * n1z + g2b * n2z, mask, 2, 4)
    store_term_row(grad_ptr, p, r, R, f3 * n2x, f3 * n2y, f3 * n2z, mask, 3, 4)
    store_tile_energy(partial_ptr, partial_stride, energy, r, R, mask)


def _check_index(index, order, name):
    if index.ndim != 2 or index.shape[1] != order:
        raise ValueError(f"{name}: index must be [P, {order}], got {tuple(index.shape)}")


def angle_term(index, x0, k) -> TermSpec:
    """An angle list for `kernels.term_rows.term_energies` (parameters as in
    `angle_energies`)."""
    _check_index(index, 3, "angle_energies")
    index, x0, k = index.contiguous(), x0.contiguous(), k.contiguous()

    def launch(x, partial, stride, grad, grid, meta):
        _angle_kernel[grid](x, index, x0, k, partial, stride, grad, index.shape[0], x.shape[0],
                            x.shape[1], **meta)

    return TermSpec(launch, index, 3)


def dihedral_term(index, k1s, k2s, v0) -> TermSpec:
    """A dihedral list for `kernels.term_rows.term_energies` (parameters as in
    `dihedral_energies`)."""
    _check_index(index, 4, "dihedral_energies")
    if k1s.shape != k2s.shape or k1s.shape[0] != index.shape[0] or k1s.ndim != 2:
        raise ValueError(f"dihedral_energies: k1s and k2s must both be [P, D] with P = "
                         f"{index.shape[0]}; got {tuple(k1s.shape)} and {tuple(k2s.shape)}")
    index, k1s, k2s, v0 = (t.contiguous() for t in (index, k1s, k2s, v0))

    def launch(x, partial, stride, grad, grid, meta):
        _dihedral_kernel[grid](x, index, k1s, k2s, v0, partial, stride, grad, index.shape[0],
                               x.shape[0], x.shape[1], D=k1s.shape[1], **meta)

    return TermSpec(launch, index, 4)


def angle_energies(pos, index, x0, k, layout):
    """Energy per replica of harmonic angle terms (Triton; differentiable w.r.t. ``pos``).

    Parameters
    ----------
    pos : Tensor, float32 (MD) or float64 (tests) [R, n, 3]
        Positions, Å.
    index : Tensor, int [P, 3]
        Triplets ``(i, apex j, l)`` within one molecule.
    x0, k : Tensor, dtype of ``pos`` [P]
        ``cos θ0`` and the force constant (kcal/mol).
    layout : tuple of two Tensors, int32
        `kernels.term_rows.entries_by_bead` of ``index``.

    Returns
    -------
    Tensor, dtype of ``pos`` [R]
        ``Σ_p k_p (cos θ_p − x0_p)²`` per replica (summed per tile, then over tiles).
    """
    return single_term_energies(pos, angle_term(index, x0, k), layout, "angle_energies")


def dihedral_energies(pos, index, k1s, k2s, v0, layout):
    """Energy per replica of Fourier dihedral terms (Triton; differentiable w.r.t. ``pos``).

    Parameters
    ----------
    pos : Tensor, float32 (MD) or float64 (tests) [R, n, 3]
    index : Tensor, int [P, 4]
        Quadruplets within one molecule.
    k1s, k2s : Tensor, dtype of ``pos`` [P, D]
        Amplitudes of ``sin(mφ)`` and ``cos(mφ)``, ``m = 1..D`` (kcal/mol).
    v0 : Tensor, dtype of ``pos`` [P]
        Constant per term (kcal/mol).
    layout : tuple of two Tensors, int32
        `kernels.term_rows.entries_by_bead` of ``index``.

    Returns
    -------
    Tensor, dtype of ``pos`` [R]
    """
    return single_term_energies(pos, dihedral_term(index, k1s, k2s, v0), layout,
                                "dihedral_energies")


def angle_energies_reference(pos, index, x0, k, layout=None):
    """PyTorch reference of `angle_energies` (same signature; ``layout`` unused)."""
    a = pos[:, index[:, 0]] - pos[:, index[:, 1]]
    b = pos[:, index[:, 2]] - pos[:, index[:, 1]]
    cos = (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))
    return (k * (cos - x0) ** 2).sum(-1)


def dihedral_energies_reference(pos, index, k1s, k2s, v0, layout=None):
    """PyTorch reference of `dihedral_energies` (``atan2`` of the same two numbers)."""
    b1 = pos[:, index[:, 1]] - pos[:, index[:, 0]]
    b2 = pos[:, index[:, 2]] - pos[:, index[:, 1]]
    b3 = pos[:, index[:, 3]] - pos[:, index[:, 2]]
    n2 = torch.linalg.cross(b2, b3)
    x = (torch.linalg.cross(b1, b2) * n2).sum(-1)
    y = b2.norm(dim=-1) * (b1 * n2).sum(-1)
    phi = torch.atan2(y, x)[..., None] * torch.arange(1, k1s.shape[1] + 1, dtype=pos.dtype,
                                                      device=pos.device)
    return (v0 + (k1s * torch.sin(phi) + k2s * torch.cos(phi)).sum(-1)).sum(-1)
