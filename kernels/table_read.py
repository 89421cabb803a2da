"""Per-edge read of a cubic Hermite table: ``W(d)`` for every edge, and ``dL/dd`` back.

A table of ``F`` functions of the edge length on a uniform grid of ``G − 1`` intervals of
width ``h`` (`kernels.tabulated.hermite_coefficients`: ``coefficients[k, m, f] = c_m`` of
interval ``k``, float32, contiguous ``[G − 1, 4, F]``) is read per edge::

    x = d / h,  k = min(⌊x⌋, G − 2),  t = x − k
    W_e = ((c3 t + c2) t + c1) t + c0          [F]      zero for d >= r_c = (G − 1) h
    dL/dd_e = Σ_f dL/dW_ef · (3 c3 t² + 2 c2 t + c1) / h

Forward (`_read_fwd_kernel`): a program owns ``BLOCK_E`` edges and ``BLOCK_F`` columns; it
loads the lengths, forms ``k`` and ``t`` in registers, gathers four coefficient rows per edge
(the table is a few MB and stays in L2) and writes its ``[BLOCK_E, BLOCK_F]`` tile of ``W``
once. Edges at or beyond ``r_c`` (padding slots carry such lengths) load nothing and write
zeros. Backward (`_read_bwd_kernel`): a program owns ``BLOCK_E`` edges, walks the columns
in ``BLOCK_F`` chunks, reads ``dL/dW`` once and accumulates the dot product with the slopes
in FP32 registers; one length gradient per edge is written, no atomics.

What it replaces per edge and table (``F`` columns): a network of the basis (three linear
layers and their activations for a CGTensorProduct's radial weights) and an envelope
product, forward and backward, each a pass over ``[E, F]`` or wider tensors in memory; here
one write of ``W`` and one read of ``dL/dW``. The table's coefficients are read-only: no
gradient reaches them (`kernels._triton.check_no_grad`).

Kernel arguments (both kernels):

* ``d_ptr``: ``[E]`` float32 edge lengths (Å).
* ``c_ptr``: ``[G − 1, 4, F]`` float32 coefficients.
* ``w_ptr`` (forward): ``[E, F]`` float32 output. ``gw_ptr`` (backward): ``[E, F]``
  float32 ``dL/dW``, contiguous; ``gd_ptr``: ``[E]`` float32 output ``dL/dd``.
* ``num_edges``: ``E`` (not specialised on: edge counts change every few steps, and a
  new divisibility class would compile the kernel again).
* ``inv_h``: ``1 / h``. ``intervals``: ``G − 1`` (as a float: the length coordinate ``x``
  is compared with it). ``F``: the number of columns, the autotuning key.
* ``BLOCK_E``, ``BLOCK_F``: tile sizes (autotuned on a GPU; one configuration under the
  interpreter).

`table_read_reference` is the PyTorch reference (`kernels.tabulated.evaluate_cubics`,
autograd through ``t``).
"""

from __future__ import annotations

import torch

from kernels._triton import autotune, check_no_grad, pick_configs, tl, triton
from kernels.tabulated import evaluate_cubics

__all__ = ["table_read", "table_read_reference"]


def _configs():
    return pick_configs(
        [triton.Config({"BLOCK_E": e, "BLOCK_F": f}, num_warps=w)
         for e, f, w in ((32, 32, 4), (64, 32, 4), (32, 64, 4), (64, 64, 8), (128, 32, 8),
                         (16, 128, 4))],
        triton.Config({"BLOCK_E": 16, "BLOCK_F": 16}, num_warps=4))


@triton.jit
def _interval(d_ptr, e, emask, inv_h, intervals):
    """``(k, t, inside)`` of the edges ``e``: interval, position in it, ``d < r_c``."""
    d = tl.load(d_ptr + e, mask=emask, other=0.0)
    x = tl.minimum(d * inv_h, intervals)
    k = tl.minimum(tl.floor(x), intervals - 1.0)
    return k.to(tl.int64), x - k, (x < intervals) & emask


@autotune(_configs(), ["F"])
@triton.jit(do_not_specialize=["num_edges"])
def _read_fwd_kernel(d_ptr, c_ptr, w_ptr, num_edges, inv_h, intervals, F,
                     BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr):
    e = tl.program_id(0) * BLOCK_E + tl.arange(0, BLOCK_E)
    f = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    emask, fmask = e < num_edges, f < F
    k, t, inside = _interval(d_ptr, e, emask, inv_h, intervals)
    rows = c_ptr + (k * 4 * F)[:, None] + f[None, :]
    load = inside[:, None] & fmask[None, :]
    c0 = tl.load(rows, mask=load, other=0.0)
    c1 = tl.load(rows + F, mask=load, other=0.0)
    c2 = tl.load(rows + 2 * F, mask=load, other=0.0)
    c3 = tl.load(rows + 3 * F, mask=load, other=0.0)
    t = t[:, None]
    w = ((c3 * t + c2) * t + c1) * t + c0
    tl.store(w_ptr + e.to(tl.int64)[:, None] * F + f[None, :], w,
             mask=emask[:, None] & fmask[None, :])


@autotune(_configs(), ["F"])
@triton.jit(do_not_specialize=["num_edges"])
def _read_bwd_kernel(d_ptr, c_ptr, gw_ptr, gd_ptr, num_edges, inv_h, intervals, F,
                     BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr):
    e = tl.program_id(0) * BLOCK_E + tl.arange(0, BLOCK_E)
    emask = e < num_edges
    k, t, inside = _interval(d_ptr, e, emask, inv_h, intervals)
    t = t[:, None]
    acc = tl.zeros((BLOCK_E,), dtype=tl.float32)
    for f0 in range(0, F, BLOCK_F):
        f = f0 + tl.arange(0, BLOCK_F)
        load = inside[:, None] & (f < F)[None, :]
        rows = c_ptr + (k * 4 * F)[:, None] + f[None, :]
        c1 = tl.load(rows + F, mask=load, other=0.0)
        c2 = tl.load(rows + 2 * F, mask=load, other=0.0)
        c3 = tl.load(rows + 3 * F, mask=load, other=0.0)
        g = tl.load(gw_ptr + e.to(tl.int64)[:, None] * F + f[None, :], mask=load, other=0.0)
        acc += tl.sum(g * ((3.0 * c3 * t + 2.0 * c2) * t + c1), axis=1)
    tl.store(gd_ptr + e, acc * inv_h, mask=emask)


def _launch_args(d, coefficients, spacing):
    intervals, _, width = coefficients.shape
    return d.shape[0], 1.0 / spacing, float(intervals), width


class _TableRead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, d, coefficients, spacing):
        edges, inv_h, intervals, width = _launch_args(d, coefficients, spacing)
        w = torch.empty(edges, width, device=d.device, dtype=torch.float32)
        if edges:
            def grid(meta):
                return (triton.cdiv(edges, meta["BLOCK_E"]), triton.cdiv(width, meta["BLOCK_F"]))

            _read_fwd_kernel[grid](d, coefficients, w, edges, inv_h, intervals, width)
        ctx.save_for_backward(d, coefficients)
        ctx.spacing = spacing
        return w

    @staticmethod
    def backward(ctx, grad_w):
        d, coefficients = ctx.saved_tensors
        edges, inv_h, intervals, width = _launch_args(d, coefficients, ctx.spacing)
        grad_d = torch.empty_like(d)
        if edges:
            def grid(meta):
                return (triton.cdiv(edges, meta["BLOCK_E"]),)

            _read_bwd_kernel[grid](d, coefficients, grad_w.contiguous(), grad_d, edges, inv_h,
                                   intervals, width)
        return grad_d, None, None


def table_read(d: torch.Tensor, coefficients: torch.Tensor, spacing: float) -> torch.Tensor:
    """Every edge's row of a cubic Hermite table (Triton), differentiable in ``d``.

    Parameters
    ----------
    d : torch.Tensor, shape (E,), float32
        Edge lengths, Å (>= 0); at or beyond ``(G − 1) · spacing`` the row is zero.
    coefficients : torch.Tensor, shape (G − 1, 4, F), float32
        `kernels.tabulated.hermite_coefficients` of the table (no grad).
    spacing : float
        ``h``, Å.

    Returns
    -------
    torch.Tensor, shape (E, F), float32
        ``W(d)``; its backward gives ``dL/dd`` (FP32 sums over the columns).

    Raises
    ------
    ValueError
        Tensors that are not float32, of the wrong rank, not contiguous, or coefficients
        that require grad.
    """
    check_no_grad("table_read", coefficients=coefficients)
    if d.dtype != torch.float32 or coefficients.dtype != torch.float32:
        raise ValueError(f"table_read takes float32 lengths and coefficients, got {d.dtype} "
                         f"and {coefficients.dtype}")
    if d.ndim != 1 or coefficients.ndim != 3 or coefficients.shape[1] != 4:
        raise ValueError(f"table_read takes lengths [E] and coefficients [G - 1, 4, F], got "
                         f"{tuple(d.shape)} and {tuple(coefficients.shape)}")
    return _TableRead.apply(d.contiguous(), coefficients.contiguous(), float(spacing))


def table_read_reference(d: torch.Tensor, coefficients: torch.Tensor,
                         spacing: float) -> torch.Tensor:
    """PyTorch reference of `table_read` (any float dtype; autograd through ``t``)."""
    return evaluate_cubics(coefficients, spacing, d)
