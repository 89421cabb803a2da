"""Fused angle and dihedral prior terms: energy and analytic gradient in one kernel each.

Written with tensor operations, a harmonic angle term costs about thirty kernels per step
(gathers, differences, norms, a dot product, their backward) and a Fourier dihedral term
about fifty (three cross products and an ``atan2``, and their backward). Here one program
handles a block of terms of one replica and writes the block's energy and the gradient of
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
from kernels.term_rows import TERM_BLOCK, term_energies

__all__ = ["angle_energies", "angle_energies_reference", "dihedral_energies",
           "dihedral_energies_reference"]


@triton.jit
def _bead(base, index_ptr, p, column: tl.constexpr, order: tl.constexpr, mask):
    """Coordinates of bead ``index[p, column]`` of the replica at ``base`` ([BLOCK] each)."""
    b = tl.load(index_ptr + order * p + column, mask=mask, other=0).to(tl.int64) * 3
    return (tl.load(base + b, mask=mask, other=0.0), tl.load(base + b + 1, mask=mask, other=0.0),
            tl.load(base + b + 2, mask=mask, other=0.0))


@triton.jit
def _store_row(grad_ptr, p, column: tl.constexpr, order: tl.constexpr, R, r, gx, gy, gz, mask):
    """Row ``(p, column)`` of ``grad [P, order, R, 3]`` for replica ``r``."""
    row = grad_ptr + ((p.to(tl.int64) * order + column) * R + r) * 3
    tl.store(row, gx, mask=mask)
    tl.store(row + 1, gy, mask=mask)
    tl.store(row + 2, gz, mask=mask)


@triton.jit
def _angle_kernel(pos_ptr, index_ptr, x0_ptr, k_ptr, partial_ptr, grad_ptr, P, R, n,
                  BLOCK: tl.constexpr):
    """One block of angle terms of one replica.

    pos_ptr : [R, n, 3]; index_ptr : int [P, 3] (``(i, apex j, l)``, row-major);
    x0_ptr, k_ptr : [P] (``cos θ0``, ``k``); partial_ptr : [R, num_blocks] (the block's
    energy); grad_ptr : [P, 3, R, 3] (``dE/dx`` of each bead of each term); P, R, n : terms,
    replicas, beads per replica; BLOCK : terms per program. One float dtype throughout.
    """
    block = tl.program_id(0)
    r = tl.program_id(1)
    p = block * BLOCK + tl.arange(0, BLOCK)
    mask = p < P
    base = pos_ptr + r.to(tl.int64) * n * 3
    ix, iy, iz = _bead(base, index_ptr, p, 0, 3, mask)
    jx, jy, jz = _bead(base, index_ptr, p, 1, 3, mask)
    lx, ly, lz = _bead(base, index_ptr, p, 2, 3, mask)
    ax, ay, az = ix - jx, iy - jy, iz - jz
    bx, by, bz = lx - jx, ly - jy, lz - jz
    aa = tl.where(mask, ax * ax + ay * ay + az * az, 1.0)
    bb = tl.where(mask, bx * bx + by * by + bz * bz, 1.0)
    inv = 1.0 / (sqrt_rounded(aa) * sqrt_rounded(bb))
    cos = (ax * bx + ay * by + az * bz) * inv
    x0 = tl.load(x0_ptr + p, mask=mask, other=0.0)
    k = tl.load(k_ptr + p, mask=mask, other=0.0)
    energy = tl.where(mask, k * (cos - x0) * (cos - x0), 0.0)
    de_dc = tl.where(mask, 2.0 * k * (cos - x0), 0.0)
    ca = cos / aa
    cb = cos / bb
    gix = de_dc * (bx * inv - ca * ax)
    giy = de_dc * (by * inv - ca * ay)
    giz = de_dc * (bz * inv - ca * az)
    glx = de_dc * (ax * inv - cb * bx)
    gly = de_dc * (ay * inv - cb * by)
    glz = de_dc * (az * inv - cb * bz)
    _store_row(grad_ptr, p, 0, 3, R, r, gix, giy, giz, mask)
    _store_row(grad_ptr, p, 1, 3, R, r, -gix - glx, -giy - gly, -giz - glz, mask)
    _store_row(grad_ptr, p, 2, 3, R, r, glx, gly, glz, mask)
    tl.store(partial_ptr + r * tl.num_programs(0) + block, tl.sum(energy, axis=0))


@triton.jit
def _dihedral_kernel(pos_ptr, index_ptr, k1_ptr, k2_ptr, v0_ptr, partial_ptr, grad_ptr, P, R,
                     n, D: tl.constexpr, BLOCK: tl.constexpr):
    """One block of Fourier dihedral terms of one replica.

    pos_ptr : [R, n, 3]; index_ptr : int [P, 4]; k1_ptr, k2_ptr : [P, D] (sine and cosine
    amplitudes of multiplicities 1..D); v0_ptr : [P]; partial_ptr : [R, num_blocks];
    grad_ptr : [P, 4, R, 3]; P, R, n, BLOCK : as in `_angle_kernel`; D : multiplicities.
    """
    block = tl.program_id(0)
    r = tl.program_id(1)
    p = block * BLOCK + tl.arange(0, BLOCK)
    mask = p < P
    base = pos_ptr + r.to(tl.int64) * n * 3
    x0x, x0y, x0z = _bead(base, index_ptr, p, 0, 4, mask)
    x1x, x1y, x1z = _bead(base, index_ptr, p, 1, 4, mask)
    x2x, x2y, x2z = _bead(base, index_ptr, p, 2, 4, mask)
    x3x, x3y, x3z = _bead(base, index_ptr, p, 3, 4, mask)
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
    len2 = sqrt_rounded(b2b2)
    x = n1x * n2x + n1y * n2y + n1z * n2z
    y = len2 * (b1x * n2x + b1y * n2y + b1z * n2z)
    rho = sqrt_rounded(x * x + y * y)
    c1 = x / rho
    s1 = y / rho
    cm = c1
    sm = s1
    energy = tl.load(v0_ptr + p, mask=mask, other=0.0)
    de_dphi = tl.zeros_like(energy)
    for m in tl.static_range(D):
        k1 = tl.load(k1_ptr + p * D + m, mask=mask, other=0.0)
        k2 = tl.load(k2_ptr + p * D + m, mask=mask, other=0.0)
        energy += k1 * sm + k2 * cm
        de_dphi += (m + 1) * (k1 * cm - k2 * sm)
        cm, sm = cm * c1 - sm * s1, sm * c1 + cm * s1
    energy = tl.where(mask, energy, 0.0)
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
    _store_row(grad_ptr, p, 0, 4, R, r, f0 * n1x, f0 * n1y, f0 * n1z, mask)
    _store_row(grad_ptr, p, 1, 4, R, r, g1a * n1x + g1b * n2x, g1a * n1y + g1b * n2y,
               g1a * n1z + g1b * n2z, mask)
    _store_row(grad_ptr, p, 2, 4, R, r, g2a * n1x + g2b * n2x, g2a * n1y + g2b * n2y,
               g2a * n1z + g2b * n2z, mask)
    _store_row(grad_ptr, p, 3, 4, R, r, f3 * n2x, f3 * n2y, f3 * n2z, mask)
    tl.store(partial_ptr + r * tl.num_programs(0) + block, tl.sum(energy, axis=0))


def _check(pos, index, order, name):
    if pos.dtype not in (torch.float32, torch.float64) or pos.ndim != 3 or pos.shape[2] != 3:
        raise ValueError(
            f"{name}: pos must be float32 or float64 [R, n, 3], got {pos.dtype} "
            f"{tuple(pos.shape)}")
    if index.ndim != 2 or index.shape[1] != order:
        raise ValueError(f"{name}: index must be [P, {order}], got {tuple(index.shape)}")


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
        ``Σ_p k_p (cos θ_p − x0_p)²`` per replica (summed per block, then over blocks).
    """
    _check(pos, index, 3, "angle_energies")
    if index.shape[0] == 0:
        return pos.new_zeros(pos.shape[0])
    r_count, n, _ = pos.shape

    def launch(x, partial, grad, grid):
        _angle_kernel[grid](x, index.contiguous(), x0.contiguous(), k.contiguous(), partial,
                            grad, index.shape[0], r_count, n, BLOCK=TERM_BLOCK)

    return term_energies(pos, launch, 3, index.shape[0], layout)


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
    _check(pos, index, 4, "dihedral_energies")
    if k1s.shape != k2s.shape or k1s.shape[0] != index.shape[0] or k1s.ndim != 2:
        raise ValueError(f"dihedral_energies: k1s and k2s must both be [P, D] with P = "
                         f"{index.shape[0]}; got {tuple(k1s.shape)} and {tuple(k2s.shape)}")
    if index.shape[0] == 0:
        return pos.new_zeros(pos.shape[0])
    r_count, n, _ = pos.shape

    def launch(x, partial, grad, grid):
        _dihedral_kernel[grid](x, index.contiguous(), k1s.contiguous(), k2s.contiguous(),
                               v0.contiguous(), partial, grad, index.shape[0], r_count, n,
                               D=k1s.shape[1], BLOCK=TERM_BLOCK)

    return term_energies(pos, launch, 4, index.shape[0], layout)


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
