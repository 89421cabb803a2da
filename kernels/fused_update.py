"""Fused activation + linear (the interaction-block update) and plain packed linear layers.

``tanh_linear(v, layer) = tanh(v) @ W^T + b`` in one kernel: the activation is applied to
the operand tile as it is loaded, so ``tanh(v)`` never reaches HBM. The same kernel with
SiLU on load (``linear(v, layer, "silu")``) runs the layers of a SiLU MLP, and with the
activation off it is a plain linear layer, so the update network (``lin``), every layer of
the output MLP (``Linear, tanh, Linear, tanh, ..., Linear``) and the tensor-product network's
radial MLP (``Linear, SiLU, Linear, SiLU, Linear``) run through it, in FP32 or as
channel-wise W16A16 (`kernels.quantize`).

Backward (features only, never weights): ``grad_v = (grad_y @ W) * act'(v)``, by the same
kernel with the weight read transposed, ``grad_y`` scaled by the channel scales on load,
and the ``act'`` gate applied in the epilogue (recomputed from ``v``). In the
16-bit modes each ``grad_y`` row is normalised by its max-abs before rounding (restored in
the FP32 epilogue), so gradients of any magnitude keep full 16-bit resolution.
"""

from __future__ import annotations

import torch

from kernels._triton import (
    activation_f32,
    autotune,
    check_no_grad,
    mma,
    next_pow2,
    pick_configs,
    tl,
    torch_to_tl_dtype,
    triton,
)
from kernels.quantize import PackedLinear

__all__ = ["ACTIVATIONS", "linear", "linear_reference", "tanh_linear",
           "tanh_linear_reference"]

#: Activations the kernel applies to its input on load (and whose derivative it applies in
#: the backward pass's epilogue).
ACTIVATIONS = ("tanh", "silu")

_CONFIGS = pick_configs(
    [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s)
     for m, n, k, w, s in ((64, 64, 32, 4, 3), (128, 64, 32, 4, 3), (64, 128, 64, 4, 3),
                           (128, 128, 32, 8, 3), (64, 128, 32, 4, 2), (32, 128, 32, 4, 2),
                           # split-weight tf32x3 at 64 x 128 on 4 warps uses 255 registers
                           # and spills 80 B per thread (sm_90, cuobjdump); 8 warps do not
                           (64, 128, 32, 8, 2))],
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, num_warps=4),
)


@autotune(_CONFIGS, ["SIZE_CLASS", "N", "KD", "GATE", "ROW_NORM", "SPLIT"])
@triton.jit(do_not_specialize=["M"])
def _linear_kernel(a_ptr, stride_am, b_ptr, b_lo_ptr, stride_bk, stride_bn, kscale_ptr,
                   nscale_ptr, bias_ptr, gate_ptr, stride_gm, res_ptr, stride_rm, out_ptr,
                   stride_om, M, SIZE_CLASS, N, KD,
                   ACT_A: tl.constexpr, ACT: tl.constexpr, KSCALE: tl.constexpr,
                   ROW_NORM: tl.constexpr, NSCALE: tl.constexpr, BIAS: tl.constexpr,
                   GATE: tl.constexpr, RES: tl.constexpr,
                   DT: tl.constexpr, PREC: tl.constexpr, SPLIT: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """``out = epilogue(prologue(a) @ b)`` for one [BLOCK_M, BLOCK_N] tile.

    a [M, KD] (unit column stride), b [KD, N] (given strides, so a transposed view works),
    out [M, N]. prologue: the activation ``ACT`` (``"tanh"`` or ``"silu"``; ACT_A), times
    ``kscale[k]`` (KSCALE), divided by the row's max-abs (ROW_NORM). epilogue: times the row
    max-abs, ``* nscale[n]`` (NSCALE), ``+ bias[n]`` (BIAS), ``* ACT'(gate[m, n])`` (GATE),
    ``+ res[m, n]`` (RES, a
    residual connection). FP32 accumulation in registers; only ``a``, ``b`` tiles and the
    output tile touch HBM.

    SIZE_CLASS: M rounded up to a power of two, the autotune key in place of M, so layers
    applied to edge rows, whose count changes with the graph, do not re-tune at every
    step (unused in the body).

    SPLIT (FP32 only): ``b_ptr`` holds the TF32-exact part ``hi`` of b and ``b_lo_ptr`` the
    rest (`kernels.quantize.tf32_split`, same strides); each ``a`` tile is split likewise
    in registers and the product is ``a_lo hi + a_hi lo + a_hi hi`` in three TF32 MMAs
    (relative error ~1e-6). Splitting b once, when the layer is packed, lets its tiles go
    from memory straight to the tensor cores: twice as fast as Triton's own ``tf32x3``,
    which splits both operands in every tile.
    """
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < M
    cmask = cols < N
    a_rows = a_ptr + rows.to(tl.int64)[:, None] * stride_am
    if ROW_NORM:
        amax = tl.zeros([BLOCK_M], dtype=tl.float32)
        for k0 in range(0, KD, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(a_rows + k[None, :], mask=rmask[:, None] & (k[None, :] < KD), other=0.0)
            if KSCALE:
                a = a * tl.load(kscale_ptr + k, mask=k < KD, other=0.0)[None, :]
            amax = tl.maximum(amax, tl.max(tl.abs(a), axis=1))
        amax = tl.where(amax > 0, amax, 1.0)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, KD, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        kmask = k < KD
        a = tl.load(a_rows + k[None, :], mask=rmask[:, None] & kmask[None, :], other=0.0)
        if ACT_A:
            a, _ = activation_f32(a, ACT)
        if KSCALE:
            a = a * tl.load(kscale_ptr + k, mask=kmask, other=0.0)[None, :]
        if ROW_NORM:
            a = a / amax[:, None]
        b_off = k[:, None] * stride_bk + cols[None, :] * stride_bn
        bmask = kmask[:, None] & cmask[None, :]
        b = tl.load(b_ptr + b_off, mask=bmask, other=0.0)
        if SPLIT:
            b_lo = tl.load(b_lo_ptr + b_off, mask=bmask, other=0.0)
            a_hi = (a.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)
            acc = tl.dot(a - a_hi, b, acc, input_precision="tf32")
            acc = tl.dot(a_hi, b_lo, acc, input_precision="tf32")
            acc = tl.dot(a_hi, b, acc, input_precision="tf32")
        else:
            acc += mma(a, b, DT, PREC)
    if ROW_NORM:
        acc = acc * amax[:, None]
    if NSCALE:
        acc = acc * tl.load(nscale_ptr + cols, mask=cmask, other=0.0)[None, :]
    if BIAS:
        acc += tl.load(bias_ptr + cols, mask=cmask, other=0.0)[None, :]
    omask = rmask[:, None] & cmask[None, :]
    if GATE:
        _, slope = activation_f32(
            tl.load(gate_ptr + rows.to(tl.int64)[:, None] * stride_gm + cols[None, :],
                    mask=omask, other=0.0), ACT)
        acc = acc * slope
    if RES:
        acc += tl.load(res_ptr + rows.to(tl.int64)[:, None] * stride_rm + cols[None, :],
                       mask=omask, other=0.0)
    tl.store(out_ptr + rows.to(tl.int64)[:, None] * stride_om + cols[None, :], acc, mask=omask)


def _launch(a, layer: PackedLinear, transposed, out, *, precision, activation=None,
            act_a=False, kscale=None, nscale=None, bias=None, gate=None, residual=None):
    """``out = epilogue(prologue(a) @ B)`` with ``B = weight_t`` ([in, out]) or, if
    ``transposed``, its transpose (read through swapped strides); ``activation`` is applied
    to ``a`` on load (``act_a``) or its derivative at ``gate`` in the epilogue."""
    M = a.shape[0]
    if M == 0:
        return out
    n_out, kd = layer.out_features, layer.in_features
    if transposed:
        n_out, kd = kd, n_out

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(n_out, meta["BLOCK_N"]))

    split = precision == "tf32x3" and layer.split_t is not None
    b, b_lo = layer.split_t if split else (layer.weight_t, None)
    strides = b.stride()[::-1] if transposed else b.stride()
    sixteen = layer.dtype != torch.float32
    _linear_kernel[grid](
        a, a.stride(0), b, b_lo, strides[0], strides[1], kscale, nscale, bias,
        gate, gate.stride(0) if gate is not None else 0, residual,
        residual.stride(0) if residual is not None else 0, out, out.stride(0), M,
        next_pow2(M), n_out, kd,
        ACT_A=act_a, ACT=activation or "", KSCALE=kscale is not None,
        ROW_NORM=sixteen and kscale is not None,
        NSCALE=nscale is not None, BIAS=bias is not None, GATE=gate is not None,
        RES=residual is not None,
        DT=torch_to_tl_dtype(layer.dtype), PREC=precision, SPLIT=split)
    return out


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, layer, activation, precision, residual):
        x2 = x.reshape(-1, x.shape[-1]).contiguous().float()
        out = torch.empty(x2.shape[0], layer.out_features, dtype=torch.float32, device=x.device)
        if residual is not None:
            residual = residual.reshape(out.shape).contiguous().float()
        _launch(x2, layer, False, out, precision=precision, activation=activation,
                act_a=activation is not None, nscale=_scale(layer), bias=layer.bias,
                residual=residual)
        ctx.save_for_backward(x2)
        ctx.residual_shape = None if residual is None else residual.shape
        ctx.layer, ctx.activation, ctx.precision = layer, activation, precision
        ctx.in_shape = x.shape
        return out.reshape(*x.shape[:-1], layer.out_features)

    @staticmethod
    def backward(ctx, grad_y):
        (x2,) = ctx.saved_tensors
        layer = ctx.layer
        g = grad_y.reshape(-1, layer.out_features).contiguous().float()
        grad_x = torch.empty_like(x2)
        # b[k = out channel, n = in feature] = weight_t[n, k]: a transposed view by strides
        _launch(g, layer, True, grad_x, precision=ctx.precision, activation=ctx.activation,
                kscale=_scale(layer), gate=x2 if ctx.activation is not None else None)
        grad_res = None if ctx.residual_shape is None else grad_y
        return grad_x.reshape(ctx.in_shape), None, None, None, grad_res


def _scale(layer: PackedLinear):
    """The channel scales of a 16-bit layer; None for FP32, whose scales are ones."""
    return None if layer.dtype == torch.float32 else layer.scale


def linear(x, layer: PackedLinear, activation: str | None = None, precision: str = "tf32x3",
           residual=None):
    """``y = act(x) @ W^T + b (+ residual)`` with a packed layer (Triton; FP32 or W16A16).

    Parameters
    ----------
    x : Tensor, float32 [..., in_features]
        Input; may require grad.
    layer : PackedLinear
        From `kernels.quantize.pack_linear`; its dtype selects FP32 or 16-bit operands.
    activation : {None, "tanh", "silu"}
        Apply this activation (`ACTIVATIONS`) to ``x`` first, fused on load; None for none.
    precision : str
        FP32 tensor-core mode, ``"tf32x3"`` (default, ~FP32 accuracy; three TF32 products
        with the layer's split weights) or ``"ieee"``; ignored for 16-bit layers.
    residual : Tensor, float32 [..., out_features], optional
        Added in the kernel's epilogue (a residual connection without a separate add);
        may require grad.

    Returns
    -------
    Tensor, float32 [..., out_features]
        Differentiable w.r.t. ``x`` and ``residual`` only; the weights get no gradient (MD
        needs none).
    """
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"linear applies {ACTIVATIONS} on load, not {activation!r}")
    check_no_grad("linear", weight=layer.weight_t, scale=layer.scale, bias=layer.bias)
    return _Linear.apply(x, layer, activation, precision, residual)


def tanh_linear(v, layer: PackedLinear, precision: str = "tf32x3", residual=None):
    """The update ``tanh(v) @ W^T + b (+ residual)`` fused in one kernel; see `linear`."""
    return linear(v, layer, "tanh", precision, residual)


def linear_reference(x, layer: PackedLinear, activation: str | None = None,
                     precision: str = "ieee", residual=None):
    """PyTorch reference of `linear` with the layer's dequantized weights (``diag(s) Q``)."""
    w, b = layer.dequantized()
    act = {None: lambda v: v, "tanh": torch.tanh, "silu": torch.nn.functional.silu}
    a = act[activation](x)
    y = a @ w.to(x.dtype).t() + b.to(x.dtype)
    return y if residual is None else y + residual


def tanh_linear_reference(v, layer: PackedLinear, precision: str = "ieee", residual=None):
    """PyTorch reference of `tanh_linear`."""
    return linear_reference(v, layer, "tanh", precision, residual)
