"""Flash radial basis: distances, radial basis and cosine envelope in one pass.

Per edge ``e = (src j -> dst i)`` with ``d = |r_i - r_j|``:

* basis ``e_k(d) = phi_k(d) * Cb(d)``, ``K`` functions, with
  Gaussian ``phi_k = exp(gamma_k (d - mu_k)^2)`` (``gamma_k = coeff < 0``) or
  exp-normal ``phi_k = exp(gamma_k (exp(alpha (r_l - d)) - mu_k)^2)`` (``gamma_k = -beta_k``);
  both are ``exp(gamma_k (t - mu_k)^2)`` with ``t = d`` or ``t = exp(alpha (r_l - d))``;
* envelope ``C(d) = 0.5 (cos(pi d / r_c) + 1) [d < r_c]`` (mlcg ``CosineCutoff(0, r_c)``),
  or the bump ``0.5 (cos(pi (2 (d - r_lo)/(r_c - r_lo) + 1)) + 1) [r_lo < d < r_c]`` of
  ``CosineCutoff(r_lo, r_c)``; ``Cb = C`` when the basis carries the envelope, else 1, and
  the filter is multiplied by ``C`` when `RadialSpec.envelope_on_filter` (else by 1).

The device helpers here (`edge_envelope`, `radial_features`, `edge_vector`) return values
*and* derivatives w.r.t. ``d`` (basis derivative including ``Cb'``, envelope derivative
``C'``); `kernels.cfconv` reuses them so that forces include both derivatives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernels._triton import (
    autotune,
    check_no_grad,
    cos_sin,
    exp_f32,
    next_pow2,
    pick_configs,
    tl,
    triton,
)
from kernels.csr import GraphCSR, valid_edge_mask
from kernels.segment_reduce import edge_grad_to_positions

__all__ = ["RadialSpec", "radial_basis", "radial_basis_reference", "radial_reference_terms",
           "reference_distances"]


@dataclass(frozen=True)
class RadialSpec:
    """Radial basis and envelope parameters (no gradients flow into them).

    Attributes
    ----------
    centers : Tensor, float32 [K]
        ``mu_k`` (Gaussian offsets, or exp-normal means).
    widths : Tensor, float32 [K]
        ``gamma_k < 0`` (Gaussian ``coeff`` broadcast to K, or exp-normal ``-betas``).
    exp_normal : bool
        Exp-normal basis (``t = exp(alpha (basis_lower - d))``) instead of Gaussian (``t = d``).
    alpha, basis_lower : float
        Exp-normal ``alpha`` and the basis cutoff's lower value ``r_l``; unused for Gaussian.
    cutoff_upper, cutoff_lower : float
        Cosine envelope bounds ``r_c`` and ``r_lo`` (``r_lo = 0``: plain cosine).
    envelope_in_basis : bool
        Multiply the basis by the envelope (mlcg basis built with a ``CosineCutoff``).
    envelope_on_filter : bool
        Multiply the filter output by the envelope (mlcg ``conv.cutoff``).
    """

    centers: torch.Tensor
    widths: torch.Tensor
    exp_normal: bool
    cutoff_upper: float
    cutoff_lower: float = 0.0
    alpha: float = 0.0
    basis_lower: float = 0.0
    envelope_in_basis: bool = False
    envelope_on_filter: bool = True

    @classmethod
    def gaussian(cls, offset, coeff, cutoff_upper, cutoff_lower=0.0, envelope_in_basis=False,
                 envelope_on_filter=True):
        """Gaussian basis ``exp(coeff (d - offset_k)^2)``; ``coeff`` a float or 0-d tensor."""
        offset = offset.detach().float().contiguous()
        widths = torch.as_tensor(coeff, dtype=torch.float32, device=offset.device)
        return cls(offset, widths.detach().expand(offset.numel()).contiguous(), False,
                   float(cutoff_upper), float(cutoff_lower),
                   envelope_in_basis=envelope_in_basis, envelope_on_filter=envelope_on_filter)

    @classmethod
    def exp_normal_basis(cls, means, betas, alpha, cutoff_upper, cutoff_lower=0.0,
                         basis_lower=0.0, envelope_in_basis=True, envelope_on_filter=True):
        """Exp-normal basis ``exp(-beta_k (exp(alpha (r_l - d)) - mean_k)^2)``."""
        return cls(means.detach().float().contiguous(), (-betas.detach().float()).contiguous(),
                   True, float(cutoff_upper), float(cutoff_lower), float(alpha),
                   float(basis_lower), envelope_in_basis, envelope_on_filter)

    @property
    def num_basis(self) -> int:
        return self.centers.numel()

    def kernel_args(self) -> dict:
        """Keyword arguments shared by every kernel that evaluates the basis and envelope."""
        lo, hi = self.cutoff_lower, self.cutoff_upper
        if lo > 0:  # cos(pi (2 (d - lo)/(hi - lo) + 1)) = cos(a d + b)
            env_a = 2.0 * math.pi / (hi - lo)
            env_b = math.pi - env_a * lo
        else:
            env_a, env_b = math.pi / hi, 0.0
        check_no_grad("RadialSpec", centers=self.centers, widths=self.widths)
        return dict(
            mu_ptr=self.centers, gamma_ptr=self.widths, K=self.num_basis,
            alpha=self.alpha, basis_lower=self.basis_lower,
            env_a=env_a, env_b=env_b, env_upper=hi, env_lower=lo,
            EXP_NORMAL=self.exp_normal, ENV_LOWER=lo > 0,
            ENV_IN_BASIS=self.envelope_in_basis, ENV_ON_FILTER=self.envelope_on_filter,
        )


@triton.jit
def edge_vector(pos_ptr, i, j, mask):
    """``r_i - r_j`` (three [BLOCK] float32 vectors) and ``d = |r_i - r_j|`` (IEEE sqrt).

    Masked lanes get ``r_i - r_j = (1, 0, 0)``, so ``d = 1`` there (no 0/0 downstream).
    """
    i = i.to(tl.int64) * 3
    j = j.to(tl.int64) * 3
    vx = tl.load(pos_ptr + i, mask=mask, other=1.0) - tl.load(pos_ptr + j, mask=mask, other=0.0)
    vy = tl.load(pos_ptr + i + 1, mask=mask, other=0.0) - tl.load(pos_ptr + j + 1, mask=mask,
                                                                  other=0.0)
    vz = tl.load(pos_ptr + i + 2, mask=mask, other=0.0) - tl.load(pos_ptr + j + 2, mask=mask,
                                                                  other=0.0)
    return vx, vy, vz, tl.sqrt_rn(vx * vx + vy * vy + vz * vz)


@triton.jit
def edge_envelope(d, env_a, env_b, env_upper, env_lower, ENV_LOWER: tl.constexpr,
                  ENV_IN_BASIS: tl.constexpr, ENV_ON_FILTER: tl.constexpr):
    """Cosine envelope ``C(d)`` and ``C'(d)`` ([BLOCK] each); 1 and 0 when no envelope is used."""
    if ENV_IN_BASIS or ENV_ON_FILTER:
        arg = env_a * d + env_b
        inside = d < env_upper
        if ENV_LOWER:
            inside = inside & (d > env_lower)
        cos, sin = cos_sin(arg)
        c = tl.where(inside, 0.5 * cos + 0.5, 0.0)
        dc = tl.where(inside, -0.5 * env_a * sin, 0.0)
    else:
        c = tl.full(d.shape, 1.0, tl.float32)
        dc = tl.zeros(d.shape, tl.float32)
    return c, dc


@triton.jit
def radial_features(d, c, dc, mu_ptr, gamma_ptr, K, alpha, basis_lower,
                    KP: tl.constexpr, EXP_NORMAL: tl.constexpr, ENV_IN_BASIS: tl.constexpr):
    """Basis ``e [BLOCK, KP]`` and ``de/dd [BLOCK, KP]``; columns ``>= K`` are zero.

    ``c, dc`` are the envelope and its derivative from `edge_envelope`.
    """
    k = tl.arange(0, KP)
    kmask = k < K
    mu = tl.load(mu_ptr + k, mask=kmask, other=0.0)
    gamma = tl.load(gamma_ptr + k, mask=kmask, other=0.0)
    if EXP_NORMAL:
        t = tl.exp(alpha * (basis_lower - d))
        dt = -alpha * t
    else:
        t = d
        dt = tl.full(d.shape, 1.0, tl.float32)
    diff = t[:, None] - mu[None, :]
    phi = tl.where(kmask[None, :], exp_f32(gamma[None, :] * diff * diff), 0.0)
    dphi = 2.0 * gamma[None, :] * diff * phi * dt[:, None]
    if ENV_IN_BASIS:
        return phi * c[:, None], dphi * c[:, None] + phi * dc[:, None]
    return phi, dphi


@triton.jit
def _edge_mask(e, E, src_ptr, dst_ptr, num_nodes, num_edges_ptr, HAS_COUNT: tl.constexpr):
    inb = e < E
    j = tl.load(src_ptr + e, mask=inb, other=0)
    i = tl.load(dst_ptr + e, mask=inb, other=0)
    ok = inb & (j >= 0) & (j < num_nodes) & (i >= 0) & (i < num_nodes)
    if HAS_COUNT:
        ok = ok & (e < tl.load(num_edges_ptr))
    return ok, i, j


_RB_CONFIGS = pick_configs([triton.Config({"BLOCK_E": b}, num_warps=w)
                            for b, w in ((64, 4), (128, 4), (256, 8))],
                           triton.Config({"BLOCK_E": 32}, num_warps=4))


@autotune(_RB_CONFIGS, ["SIZE_CLASS", "KP"])
@triton.jit(do_not_specialize=["E"])
def _radial_fwd_kernel(pos_ptr, src_ptr, dst_ptr, num_edges_ptr, d_out, e_out, c_out,
                       E, SIZE_CLASS, num_nodes, mu_ptr, gamma_ptr, K, alpha, basis_lower,
                       env_a, env_b, env_upper, env_lower, EXP_NORMAL: tl.constexpr,
                       ENV_LOWER: tl.constexpr,
                       ENV_IN_BASIS: tl.constexpr, ENV_ON_FILTER: tl.constexpr,
                       HAS_COUNT: tl.constexpr, KP: tl.constexpr, BLOCK_E: tl.constexpr):
    e = tl.program_id(0) * BLOCK_E + tl.arange(0, BLOCK_E)
    ok, i, j = _edge_mask(e, E, src_ptr, dst_ptr, num_nodes, num_edges_ptr, HAS_COUNT)
    _, _, _, d = edge_vector(pos_ptr, i, j, ok)
    c, dc = edge_envelope(d, env_a, env_b, env_upper, env_lower, ENV_LOWER, ENV_IN_BASIS,
                          ENV_ON_FILTER)
    basis, _ = radial_features(d, c, dc, mu_ptr, gamma_ptr, K, alpha, basis_lower, KP,
                               EXP_NORMAL, ENV_IN_BASIS)
    if not ENV_ON_FILTER:
        c = tl.full(d.shape, 1.0, tl.float32)
    inb = e < E
    tl.store(d_out + e, tl.where(ok, d, 0.0), mask=inb)
    tl.store(c_out + e, tl.where(ok, c, 0.0), mask=inb)
    k = tl.arange(0, KP)
    tl.store(e_out + e.to(tl.int64)[:, None] * K + k[None, :],
             tl.where(ok[:, None], basis, 0.0), mask=inb[:, None] & (k[None, :] < K))


@autotune(_RB_CONFIGS, ["SIZE_CLASS", "KP"])
@triton.jit(do_not_specialize=["E"])
def _radial_bwd_kernel(pos_ptr, src_ptr, dst_ptr, num_edges_ptr, gd_ptr, ge_ptr, gc_ptr,
                       g_out, E, SIZE_CLASS, num_nodes, mu_ptr, gamma_ptr, K, alpha,
                       basis_lower, env_a, env_b, env_upper, env_lower, EXP_NORMAL: tl.constexpr,
                       ENV_LOWER: tl.constexpr,
                       ENV_IN_BASIS: tl.constexpr, ENV_ON_FILTER: tl.constexpr,
                       HAS_COUNT: tl.constexpr, KP: tl.constexpr, BLOCK_E: tl.constexpr):
    e = tl.program_id(0) * BLOCK_E + tl.arange(0, BLOCK_E)
    ok, i, j = _edge_mask(e, E, src_ptr, dst_ptr, num_nodes, num_edges_ptr, HAS_COUNT)
    _, _, _, d = edge_vector(pos_ptr, i, j, ok)
    c, dc = edge_envelope(d, env_a, env_b, env_upper, env_lower, ENV_LOWER, ENV_IN_BASIS,
                          ENV_ON_FILTER)
    _, dbasis = radial_features(d, c, dc, mu_ptr, gamma_ptr, K, alpha, basis_lower, KP,
                                EXP_NORMAL, ENV_IN_BASIS)
    k = tl.arange(0, KP)
    ge = tl.load(ge_ptr + e.to(tl.int64)[:, None] * K + k[None, :],
                 mask=ok[:, None] & (k[None, :] < K), other=0.0)
    g = tl.sum(ge * dbasis, axis=1) + tl.load(gd_ptr + e, mask=ok, other=0.0)
    if ENV_ON_FILTER:
        g += tl.load(gc_ptr + e, mask=ok, other=0.0) * dc
    tl.store(g_out + e, tl.where(ok, g, 0.0), mask=e < E)


def _launch_args(pos, src, dst, csr, spec, num_edges):
    """Kernel arguments; ``SIZE_CLASS`` (E rounded up to a power of two) is the autotune key,
    so edge lists whose length changes every step (exact lists) do not re-tune every step."""
    E = src.numel()
    return dict(pos_ptr=pos, src_ptr=src, dst_ptr=dst,
                num_edges_ptr=num_edges if num_edges is not None else src, E=E,
                SIZE_CLASS=next_pow2(E),
                num_nodes=csr.num_nodes, HAS_COUNT=num_edges is not None,
                KP=next_pow2(spec.num_basis), **spec.kernel_args())


def _grid(meta):
    return (triton.cdiv(meta["E"], meta["BLOCK_E"]),)


class _RadialBasis(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pos, src, dst, csr, spec, num_edges):
        pos = pos.contiguous()
        E, K = src.numel(), spec.num_basis
        d = torch.empty(E, dtype=torch.float32, device=pos.device)
        c = torch.empty_like(d)
        basis = torch.empty(E, K, dtype=torch.float32, device=pos.device)
        args = _launch_args(pos, src, dst, csr, spec, num_edges)
        if E:
            _radial_fwd_kernel[_grid](d_out=d, e_out=basis, c_out=c, **args)
        ctx.save_for_backward(pos, src, dst, *csr)
        ctx.spec, ctx.num_edges = spec, num_edges
        return d, basis, c

    @staticmethod
    def backward(ctx, grad_d, grad_e, grad_c):
        pos, src, dst, *csr = ctx.saved_tensors
        csr = GraphCSR(*csr)
        E = src.numel()
        zeros = torch.zeros(E, dtype=torch.float32, device=pos.device)
        grad_d = zeros if grad_d is None else grad_d.contiguous()
        grad_c = zeros if grad_c is None else grad_c.contiguous()
        if grad_e is None:
            grad_e = torch.zeros(E, ctx.spec.num_basis, dtype=torch.float32, device=pos.device)
        g = torch.empty(E, dtype=torch.float32, device=pos.device)
        if E:
            _radial_bwd_kernel[_grid](gd_ptr=grad_d, ge_ptr=grad_e.contiguous(), gc_ptr=grad_c,
                                      g_out=g, **_launch_args(pos, src, dst, csr, ctx.spec,
                                                              ctx.num_edges))
        return edge_grad_to_positions(g, pos, src, dst, csr), None, None, None, None, None


def radial_basis(pos, src, dst, csr: GraphCSR, spec: RadialSpec, num_edges=None):
    """Distances, radial basis and envelope of every edge, in one kernel (Triton).

    Parameters
    ----------
    pos : Tensor, float32 [P, 3]
        Flattened positions, ``P >= csr.num_nodes``; may require grad.
    src, dst : Tensor, int64 [E]
        Edge endpoints (message ``src -> dst``); any order.
    csr : GraphCSR
        Both CSR layouts of the same edges (`kernels.csr.build_csr`); the backward uses them
        for deterministic position-gradient sums.
    spec : RadialSpec
        Basis and envelope parameters.
    num_edges : Tensor, integer [1], optional
        Device-side count of used edge slots (fixed-capacity lists).

    Returns
    -------
    d : Tensor, float32 [E]
        Distances.
    basis : Tensor, float32 [E, K]
        ``e_k(d) = phi_k(d) Cb(d)``.
    envelope : Tensor, float32 [E]
        The filter envelope ``C(d)`` (ones if `RadialSpec.envelope_on_filter` is False).

    All three are zero on padding edges. Only ``pos`` receives a gradient: the backward
    recomputes ``d``, ``de/dd`` and ``C'`` per edge (nothing E x K is saved), reduces them
    against the incoming gradients into one scalar per edge, and sums that onto positions
    with `kernels.segment_reduce.edge_grad_to_positions`.
    """
    return _RadialBasis.apply(pos, src, dst, csr, spec, num_edges)


def radial_reference_terms(dist, spec: RadialSpec):
    """PyTorch basis ``[E, K]`` and filter envelope ``[E]`` of distances (any float dtype).

    Differentiable by autograd w.r.t. ``dist``; used by every reference implementation.
    """
    mu = spec.centers.to(dist.dtype)
    gamma = spec.widths.to(dist.dtype)
    lo, hi = spec.cutoff_lower, spec.cutoff_upper
    if spec.envelope_in_basis or spec.envelope_on_filter:
        if lo > 0:
            arg = math.pi * (2.0 * (dist - lo) / (hi - lo) + 1.0)
            inside = (dist < hi) & (dist > lo)
        else:
            arg = math.pi * dist / hi
            inside = dist < hi
        env = torch.where(inside, 0.5 * (torch.cos(arg) + 1.0), torch.zeros_like(dist))
    else:
        env = torch.ones_like(dist)
    t = torch.exp(spec.alpha * (spec.basis_lower - dist)) if spec.exp_normal else dist
    basis = torch.exp(gamma * (t[:, None] - mu) ** 2)
    if spec.envelope_in_basis:
        basis = basis * env[:, None]
    return basis, env if spec.envelope_on_filter else torch.ones_like(dist)


def reference_distances(pos, src, dst, valid):
    """Distances ``|r_dst - r_src|`` with padding edges given a harmless unit vector."""
    s = torch.where(valid, src, 0)
    d = torch.where(valid, dst, 0)
    vec = pos[d] - pos[s]
    unit = torch.tensor([1.0, 0.0, 0.0], dtype=pos.dtype, device=pos.device)
    return torch.where(valid[:, None], vec, unit).norm(dim=1)


def radial_basis_reference(pos, src, dst, csr: GraphCSR, spec: RadialSpec, num_edges=None):
    """PyTorch reference of `radial_basis` (autograd); same signature and outputs."""
    valid = valid_edge_mask(csr)
    dist = reference_distances(pos, src, dst, valid)
    basis, env = radial_reference_terms(dist, spec)
    zero = torch.zeros((), dtype=pos.dtype, device=pos.device)
    return (torch.where(valid, dist, zero), torch.where(valid[:, None], basis, zero),
            torch.where(valid, env, zero))
