"""The BAOAB Langevin step and the per-replica blow-up check in two kernels.

Written with tensor operations, one BAOAB step of ``R`` replicas with the simulation's
blow-up check costs about fifty small kernels (kicks, drifts, the friction-noise update,
finiteness, largest force, centroid and extent, and the selects that keep a frozen
replica's old state). On a few hundred beads per replica each of those is a launch and
little else. Here:

* `langevin_drift` (one lane per coordinate) does ``B A O A`` of BAOAB: the half kick with
  the old forces, a half drift, the Ornstein-Uhlenbeck update
  ``v <- c1 v + c2 sqrt(k_B T_r / m_i) xi`` with the given Gaussian numbers ``xi``, and the
  second half drift;
* `langevin_finish` (one program per replica) does the last half kick with the new forces,
  checks the replica (every position and force finite, ``max |F| <= max_force``, every
  bead within ``max_extent`` of the replica's centroid) and writes the new state, or, for
  a replica that failed now or earlier, its old one, with the step at which it failed.

Units as in `workbench.md`: Å, Å/ps, kcal/mol/Å; ``inv_mass`` holds ``418.4 / m``
(kcal/mol to amu Å²/ps²), ``kt`` is ``k_B T`` per replica in kcal/mol. All arithmetic FP32.
"""

from __future__ import annotations

import torch

from kernels._triton import next_pow2, tl, triton

__all__ = ["langevin_drift", "langevin_drift_reference", "langevin_finish",
           "langevin_finish_reference"]

_BLOCK = 1024


@triton.jit
def _drift_kernel(pos_ptr, vel_ptr, force_ptr, inv_mass_ptr, kt_ptr, noise_ptr, pos_out_ptr,
                  vel_out_ptr, total, n, half_h, c1, c2, BLOCK: tl.constexpr):
    """``B A O A`` for ``BLOCK`` coordinates of the flattened ``[R, n, 3]`` arrays.

    pos_ptr, vel_ptr, force_ptr, noise_ptr : float32 [R, n, 3]; inv_mass_ptr : float32 [n];
    kt_ptr : float32 [R]; pos_out_ptr, vel_out_ptr : float32 [R, n, 3]; total : R n 3;
    n : beads per replica; half_h : Δt/2 (ps); c1 = exp(-γ Δt); c2 = sqrt(1 - c1²).
    """
    k = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = k < total
    bead = (k // 3) % n
    replica = k // (3 * n)
    inv_m = tl.load(inv_mass_ptr + bead, mask=mask, other=0.0)
    sigma = tl.sqrt(tl.load(kt_ptr + replica, mask=mask, other=0.0) * inv_m)
    v = tl.load(vel_ptr + k, mask=mask, other=0.0)
    v = v + half_h * (tl.load(force_ptr + k, mask=mask, other=0.0) * inv_m)
    x = tl.load(pos_ptr + k, mask=mask, other=0.0) + half_h * v
    v = c1 * v + c2 * sigma * tl.load(noise_ptr + k, mask=mask, other=0.0)
    tl.store(pos_out_ptr + k, x + half_h * v, mask=mask)
    tl.store(vel_out_ptr + k, v, mask=mask)


@triton.jit
def _finish_kernel(pos_old_ptr, vel_old_ptr, force_old_ptr, energy_old_ptr, frozen_old_ptr,
                   step_old_ptr, pos_ptr, vel_ptr, force_ptr, energy_ptr, inv_mass_ptr,
                   next_step_ptr, pos_out_ptr, vel_out_ptr, force_out_ptr, energy_out_ptr,
                   frozen_out_ptr, step_out_ptr, n, half_h, max_force, max_extent,
                   BLOCK_N: tl.constexpr):
    """Last half kick, blow-up check and the kept-or-new state of one replica.

    ``*_old_ptr``: the state before the step (positions, velocities, forces float32
    [R, n, 3]; energy float32 [R]; frozen uint8 [R]; frozen step int64 [R]); pos_ptr,
    vel_ptr: after `langevin_drift`; force_ptr, energy_ptr: at those positions;
    inv_mass_ptr: float32 [n]; next_step_ptr: int64 [1], the step being taken;
    ``*_out_ptr``: the new state (same shapes); n: beads per replica; half_h: Δt/2;
    max_force, max_extent: the limits; BLOCK_N: beads per tile (power of two).
    """
    r = tl.program_id(0).to(tl.int64)
    base = r * n * 3
    c = tl.arange(0, 4)[None, :]
    # Each pass has its own names: Triton carries a name that a loop assigns and an earlier
    # loop also assigned into that loop, which reused names would confuse.
    failures = 0  # non-finite coordinates and force components
    strongest = 0.0
    centre = tl.zeros([4], dtype=tl.float32)
    for b0 in range(0, n, BLOCK_N):
        beads1 = b0 + tl.arange(0, BLOCK_N)[:, None]
        m1 = (beads1 < n) & (c < 3)
        x1 = tl.load(pos_ptr + base + beads1 * 3 + c, mask=m1, other=0.0)
        f1 = tl.abs(tl.load(force_ptr + base + beads1 * 3 + c, mask=m1, other=0.0))
        finite = (tl.abs(x1) <= 3.4028234e38) & (f1 <= 3.4028234e38)  # False for NaN, inf
        failures += tl.sum(tl.sum(tl.where(finite, 0, 1), axis=1), axis=0)
        strongest = tl.maximum(strongest, tl.max(tl.max(f1, axis=1), axis=0))
        centre += tl.sum(x1, axis=0)
    centre = centre / n
    widest = 0.0
    for b0 in range(0, n, BLOCK_N):
        beads2 = b0 + tl.arange(0, BLOCK_N)[:, None]
        m2 = (beads2 < n) & (c < 3)
        x2 = tl.load(pos_ptr + base + beads2 * 3 + c, mask=m2, other=0.0)
        d2 = tl.where(m2, x2 - centre[None, :], 0.0)
        widest = tl.maximum(widest, tl.max(tl.sqrt(tl.sum(d2 * d2, axis=1)), axis=0))
    frozen_before = tl.load(frozen_old_ptr + r) != 0
    bad = ((failures > 0) | (strongest > max_force) | (widest > max_extent)) & (~frozen_before)
    keep = frozen_before | bad
    for b0 in range(0, n, BLOCK_N):
        beads3 = b0 + tl.arange(0, BLOCK_N)[:, None]
        m3 = (beads3 < n) & (c < 3)
        off3 = base + beads3 * 3 + c
        inv_m3 = tl.load(inv_mass_ptr + beads3, mask=beads3 < n, other=0.0)
        f3 = tl.load(force_ptr + off3, mask=m3, other=0.0)
        v3 = tl.load(vel_ptr + off3, mask=m3, other=0.0) + half_h * (f3 * inv_m3)
        x3 = tl.load(pos_ptr + off3, mask=m3, other=0.0)
        tl.store(pos_out_ptr + off3, tl.where(keep, tl.load(pos_old_ptr + off3, mask=m3), x3),
                 mask=m3)
        tl.store(vel_out_ptr + off3, tl.where(keep, tl.load(vel_old_ptr + off3, mask=m3), v3),
                 mask=m3)
        tl.store(force_out_ptr + off3,
                 tl.where(keep, tl.load(force_old_ptr + off3, mask=m3), f3), mask=m3)
    tl.store(energy_out_ptr + r,
             tl.where(keep, tl.load(energy_old_ptr + r), tl.load(energy_ptr + r)))
    tl.store(frozen_out_ptr + r, keep.to(tl.uint8))
    tl.store(step_out_ptr + r, tl.where(bad, tl.load(next_step_ptr), tl.load(step_old_ptr + r)))


def langevin_drift(pos, vel, forces, inv_mass, kt, noise, timestep: float, c1: float,
                   c2: float):
    """``B A O A`` of one BAOAB step (Triton); returns new ``(pos, vel)``.

    Parameters
    ----------
    pos, vel, forces, noise : Tensor, float32 [R, n, 3]
        Å, Å/ps, kcal/mol/Å, standard normal numbers.
    inv_mass : Tensor, float32 [n] or [n, 1]
        ``418.4 / m`` (amu), so that ``F · inv_mass`` is Å/ps².
    kt : Tensor, float32 [R]
        ``k_B T`` per replica, kcal/mol.
    timestep : float
        Δt, ps.
    c1, c2 : float
        ``exp(-γ Δt)`` and ``sqrt(1 - c1²)``.
    """
    # contiguous outputs: empty_like would copy a permuted input's strides (forces summed by
    # autograd can come out transposed), and the kernels write row-major [R, n, 3]
    pos_out = torch.empty(pos.shape, dtype=pos.dtype, device=pos.device)
    vel_out = torch.empty(vel.shape, dtype=vel.dtype, device=vel.device)
    total = pos.numel()
    if total:
        _drift_kernel[(triton.cdiv(total, _BLOCK),)](
            pos.contiguous(), vel.contiguous(), forces.contiguous(), inv_mass.contiguous(),
            kt.contiguous(), noise.contiguous(), pos_out, vel_out, total, pos.shape[1],
            0.5 * timestep, c1, c2, BLOCK=_BLOCK)
    return pos_out, vel_out


def langevin_finish(old, pos, vel, forces, energy, inv_mass, timestep: float,
                    max_force: float, max_extent: float, next_step, in_place: bool = False):
    """Last half kick and per-replica blow-up check (Triton); returns the new state.

    Parameters
    ----------
    old : tuple of Tensors
        ``(positions, velocities, forces, energy, frozen, frozen_step)`` before the step:
        float32 [R, n, 3] ×3, float32 [R], bool [R], int64 [R].
    pos, vel : Tensor, float32 [R, n, 3]
        From `langevin_drift`.
    forces : Tensor, float32 [R, n, 3]
        At ``pos``.
    energy : Tensor, float32 [R]
        At ``pos``.
    inv_mass : Tensor, float32 [n] or [n, 1]
    timestep : float
        Δt, ps.
    max_force, max_extent : float
        Largest allowed force component (kcal/mol/Å) and bead distance from the replica's
        centroid (Å).
    next_step : int or Tensor (int64, one element)
        Number of the step being taken, recorded for replicas that fail now.
    in_place : bool
        Write the new state over ``old`` (contiguous tensors) and return those: each
        replica's program reads an old value just before it overwrites it. Saves the copies
        of a captured step that keeps its state in fixed buffers.

    Returns
    -------
    tuple of Tensors
        The new ``(positions, velocities, forces, energy, frozen, frozen_step)``; a replica
        frozen now or before keeps its old positions, velocities, forces and energy.
    """
    r_count, n, _ = pos.shape
    if in_place:
        if not all(t.is_contiguous() for t in old):
            raise ValueError("langevin_finish(in_place=True) needs a contiguous old state")
        outs = (*old[:4], old[4].view(torch.uint8), old[5])
    else:
        outs = tuple(torch.empty(t.shape, dtype=t.dtype, device=pos.device)  # see above
                     for t in (pos, vel, forces, energy, old[4].view(torch.uint8), old[5]))
    if not torch.is_tensor(next_step):
        next_step = torch.tensor(next_step)
    next_step = next_step.to(device=pos.device, dtype=torch.int64).reshape(1)
    if r_count:
        old = tuple(t.contiguous() for t in old)
        _finish_kernel[(r_count,)](
            *old[:4], old[4].view(torch.uint8), old[5], pos.contiguous(), vel.contiguous(),
            forces.contiguous(), energy.contiguous(), inv_mass.contiguous(), next_step, *outs,
            n, 0.5 * timestep, float(max_force), float(max_extent),
            BLOCK_N=min(next_pow2(n), 128), num_warps=4)
    return (*outs[:4], old[4] if in_place else outs[4].view(torch.bool), outs[5])


def langevin_drift_reference(pos, vel, forces, inv_mass, kt, noise, timestep: float,
                             c1: float, c2: float):
    """PyTorch reference of `langevin_drift` (same signature)."""
    inv_m = inv_mass.reshape(1, -1, 1)
    sigma = torch.sqrt(kt[:, None, None] * inv_m)
    v = vel + 0.5 * timestep * (forces * inv_m)
    x = pos + 0.5 * timestep * v
    v = c1 * v + c2 * sigma * noise
    return x + 0.5 * timestep * v, v


def langevin_finish_reference(old, pos, vel, forces, energy, inv_mass, timestep: float,
                              max_force: float, max_extent: float, next_step,
                              in_place: bool = False):
    """PyTorch reference of `langevin_finish` (same signature)."""
    pos_old, vel_old, force_old, energy_old, frozen_old, step_old = old
    vel = vel + 0.5 * timestep * (forces * inv_mass.reshape(1, -1, 1))
    finite = torch.isfinite(pos).flatten(1).all(1) & torch.isfinite(forces).flatten(1).all(1)
    strong = forces.abs().flatten(1).amax(1) > max_force
    wide = (pos - pos.mean(1, keepdim=True)).norm(dim=-1).amax(1) > max_extent
    bad = (~finite | strong | wide) & ~frozen_old
    keep = frozen_old | bad
    k3 = keep[:, None, None]
    step = torch.as_tensor(next_step, device=pos.device, dtype=torch.int64)
    new = (torch.where(k3, pos_old, pos), torch.where(k3, vel_old, vel),
           torch.where(k3, force_old, forces), torch.where(keep, energy_old, energy), keep,
           torch.where(bad, step, step_old))
    if not in_place:
        return new
    for target, value in zip(old, new, strict=True):
        target.copy_(value)
    return tuple(old)
