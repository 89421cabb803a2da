"""Channel-wise W16A16 packing of linear layers (fp16 / bf16 weights, FP32 accumulation).

A linear layer ``y = W x + b`` (``W [out, in]``) is stored as ``W ~= diag(s) Q``, where
``Q = round16(W / s)`` holds 16-bit weights and ``s [out]`` one FP32 scale per output channel.
Kernels compute ``y_o = s_o * sum_i Q_oi round16(x_i) + b_o`` with 16-bit operands on the
tensor cores and FP32 accumulation; the scale is applied in the FP32 epilogue. Backward
passes use the same ``Q`` transposed, ``grad_x = Q^T (s * grad_y)``.

How the scales are chosen (`channel_scales`)
--------------------------------------------
1. Range: ``s0_o = max_i |W_oi|`` so that ``W_o / s0_o`` lies in ``[-1, 1]`` for every
   channel. For fp16 (5 exponent bits) this keeps small channels out of the subnormal range
   (where relative precision collapses) and large ones away from overflow, whatever the
   channel's magnitude; the filter networks' channel magnitudes differ by orders of
   magnitude (FlashSchNet fig. 3), so one per-tensor scale would not do.
2. Grid alignment: multiplying a channel by a power of two leaves its relative rounding
   errors unchanged, but a fractional multiplier ``m`` in ``[1, 2)`` shifts where the values
   fall on the 16-bit grid. For each channel we try ``s = s0 * 2^(c/G)``, ``c = 0..G-1``, and
   keep the one minimising the output reconstruction error on calibration activations
   ``X [M, in]``:  ``|| W_o X^T - s Q(W_o / s) Q(X)^T ||^2``  (``Q(X)`` is the kernel's own
   activation rounding). This is the per-channel, diagonal-Hessian special case of Optimal
   Brain Compression's objective (``H = X^T X``): with one free scale per row the
   least-squares problem decouples by channel, so an exhaustive 1-D search is exact on the
   candidate grid and cheap (G small matrix products). Without calibration data ``X = I``
   (plain weight reconstruction error).

FP32 packing keeps the weights as they are (``s = 1``). Positions, distances, energies and
forces never go through this module: only MLP operands are 16-bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels._triton import check_no_grad, next_pow2

__all__ = ["PackedLinear", "pack_linear", "channel_scales", "tf32_split", "DTYPES"]

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class PackedLinear:
    """A linear layer laid out for the kernels.

    Attributes
    ----------
    weight_t : Tensor [IN_P, OUT_P], float32 / float16 / bfloat16
        ``Q^T`` zero-padded to powers of two (at least 16) in both dimensions.
    scale : Tensor, float32 [OUT_P]
        Per-output-channel scales ``s`` (ones for FP32).
    bias : Tensor, float32 [OUT_P]
        Bias, zeros when the layer has none (and in the padding).
    in_features, out_features : int
        Real sizes.
    split_t : tuple of two Tensors, float32 [IN_P, OUT_P], or None
        FP32 packs only: ``weight_t = hi + lo`` with ``hi`` exactly representable in TF32
        (`tf32_split`), for the kernels' three-pass TF32 products (~FP32 accuracy).
    """

    weight_t: torch.Tensor
    scale: torch.Tensor
    bias: torch.Tensor
    in_features: int
    out_features: int
    split_t: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def dtype(self) -> torch.dtype:
        return self.weight_t.dtype

    def dequantized(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W [out, in], b [out])`` in FP32 as the kernels see them (``diag(s) Q``)."""
        w = (self.weight_t.float() * self.scale)[: self.in_features, : self.out_features]
        return w.t().contiguous(), self.bias[: self.out_features]


def tf32_split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x = hi + lo`` exactly, ``hi`` = ``x`` with its 13 low mantissa bits cleared.

    ``hi`` is exactly representable in TF32 (10 explicit mantissa bits), so a TF32 tensor
    core reads it without rounding; ``lo`` carries the rest (|lo| < 2^-10 |x|). Then
    ``a @ x ~= a_hi @ hi + a_hi @ lo + a_lo @ hi`` in three TF32 products keeps about 21
    bits, the "3xTF32" scheme.

    Parameters
    ----------
    x : Tensor, float32 [...]

    Returns
    -------
    (hi, lo) : Tensors, float32, contiguous, shaped like ``x``
    """
    x = x.detach().float().contiguous()
    hi = (x.view(torch.int32) & -8192).view(torch.float32)
    return hi, x - hi


def _round16(x, dtype):
    return x.to(dtype).to(torch.float32)


def channel_scales(weight, dtype, calib=None, grid: int = 16):
    """Per-output-channel scales minimising the calibration output error (see module doc).

    Parameters
    ----------
    weight : Tensor, float [out, in]
        FP32 weights.
    dtype : torch.float16 or torch.bfloat16
        Storage type of ``Q``.
    calib : Tensor, float [M, in], optional
        Calibration inputs of this layer (``None``: identity, i.e. weight error only).
    grid : int
        Number of fractional multipliers ``2^(c/grid)`` tried per channel.

    Returns
    -------
    Tensor, float32 [out]
    """
    w = weight.detach().float()
    s0 = w.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny)
    x = torch.eye(w.shape[1], device=w.device) if calib is None else calib.detach().float()
    target = x @ w.t()
    xq = _round16(x, dtype)
    mult = 2.0 ** (torch.arange(grid, device=w.device, dtype=torch.float32) / grid)
    errors = []
    for m in mult:
        s = s0 * m
        approx = xq @ (_round16(w / s[:, None], dtype) * s[:, None]).t()
        errors.append(((approx - target) ** 2).sum(dim=0))
    best = torch.stack(errors).argmin(dim=0)
    return s0 * mult[best]


def pack_linear(weight, bias=None, dtype=torch.float32, calib=None) -> PackedLinear:
    """Pack ``y = W x + b`` for the kernels, optionally as channel-wise W16A16.

    Parameters
    ----------
    weight : Tensor, float [out, in]
        Weights; must not require grad while autograd records (fused ops return no weight
        gradients) - pass ``weight.detach()`` or call under ``torch.no_grad()``.
    bias : Tensor, float [out], optional
    dtype : torch.dtype or str
        ``float32`` (``"fp32"``), ``float16`` (``"fp16"``) or ``bfloat16`` (``"bf16"``).
    calib : Tensor, float [M, in], optional
        Calibration inputs for the 16-bit scale search (`channel_scales`).
    """
    check_no_grad("pack_linear", weight=weight, bias=bias)
    dtype = DTYPES.get(dtype, dtype)
    out_f, in_f = weight.shape
    in_p, out_p = next_pow2(in_f), next_pow2(out_f)
    dev = weight.device
    w = weight.detach().float()
    fp32 = dtype == torch.float32
    s = torch.ones(out_f, device=dev) if fp32 else channel_scales(w, dtype, calib)
    weight_t = torch.zeros(in_p, out_p, dtype=dtype, device=dev)
    weight_t[:in_f, :out_f] = (w / s[:, None]).t().to(dtype)
    scale = torch.ones(out_p, device=dev)
    scale[:out_f] = s
    b = torch.zeros(out_p, device=dev)
    if bias is not None:
        b[:out_f] = bias.detach().float()
    return PackedLinear(weight_t, scale, b, in_f, out_f, tf32_split(weight_t) if fp32 else None)
