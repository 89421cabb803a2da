"""Fused activation (tanh, SiLU) + linear and packed linear layers (FP32 and W16A16), and
the 16-bit packing."""

import pytest
import torch
from kernels_testlib import rel_err

from kernels import channel_scales, linear, pack_linear, tanh_linear
from kernels.quantize import tf32_split

ACTS = {None: lambda v: v, "tanh": torch.tanh, "silu": torch.nn.functional.silu}


@pytest.mark.parametrize("out_features,activation",
                         [(24, "tanh"), (24, "silu"), (24, None), (1, None)])
def test_linear_fp32(device, out_features, activation):
    """``linear(act(x))`` and its input gradient (``act'`` in the backward epilogue) against
    float64 torch, for each activation applied on load."""
    gen = torch.Generator().manual_seed(0)
    W = (torch.randn(out_features, 40, generator=gen) / 6).to(device)
    b = torch.randn(out_features, generator=gen).to(device)
    x = (torch.randn(37, 40, generator=gen) * 2).to(device).requires_grad_()
    layer = pack_linear(W, b if out_features > 1 else None)
    y = tanh_linear(x, layer) if activation == "tanh" else linear(x, layer, activation)
    x64 = x.detach().double().requires_grad_()
    a = ACTS[activation](x64)
    ref = a @ W.double().t() + (b.double() if out_features > 1 else 0)
    assert rel_err(y, ref) < 1e-5
    gy = torch.randn_like(ref)
    (gk,) = torch.autograd.grad((y * gy.float()).sum(), x)
    (gr,) = torch.autograd.grad((ref * gy).sum(), x64)
    assert rel_err(gk, gr) < 1e-5


@pytest.mark.parametrize("activation", ["tanh", "silu"])
@pytest.mark.parametrize("dtype,tol", [("fp16", 2e-3), ("bf16", 1.5e-2)])
def test_activation_linear_w16a16(device, dtype, tol, activation):
    gen = torch.Generator().manual_seed(1)
    W = (torch.randn(32, 32, generator=gen) / 6).to(device)
    b = torch.randn(32, generator=gen).to(device)
    v = (torch.randn(50, 32, generator=gen) * 2).to(device).requires_grad_()
    act = ACTS[activation]
    layer = pack_linear(W, b, dtype, calib=act(v.detach()))
    y = linear(v, layer, activation)
    ref = act(v) @ W.t() + b
    assert rel_err(y, ref) < tol
    gy = torch.randn_like(ref)
    (gk,) = torch.autograd.grad((y * gy).sum(), v)
    (gr,) = torch.autograd.grad((ref * gy).sum(), v)
    assert rel_err(gk, gr) < tol


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_channel_scales_never_worse_than_maxabs(dtype):
    gen = torch.Generator().manual_seed(2)
    # channels spanning five orders of magnitude, as in filter networks
    W = torch.randn(16, 24, generator=gen) * torch.logspace(-4, 1, 16)[:, None]
    X = torch.randn(200, 24, generator=gen)
    s = channel_scales(W, dtype, X)
    s0 = W.abs().amax(dim=1)

    def err(scale):
        q = (W / scale[:, None]).to(dtype).float() * scale[:, None]
        return ((X.to(dtype).float() @ q.t() - X @ W.t()) ** 2).sum(dim=0)

    assert (err(s) <= err(s0) * (1 + 1e-6)).all()
    packed = pack_linear(W, None, dtype, X)
    w_back, _ = packed.dequantized()
    assert packed.weight_t.shape == (32, 16)
    assert rel_err(w_back, W) < (1e-3 if dtype == torch.float16 else 8e-3)


def test_tf32_split_is_exact():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(64, 48, generator=gen) * torch.logspace(-20, 20, 48)
    hi, lo = tf32_split(x)
    assert torch.equal(hi + lo, x)  # exact: lo is the cleared bits of x
    assert (hi.view(torch.int32) & 8191 == 0).all()  # hi has TF32's 10 mantissa bits
    assert (lo.abs() <= x.abs() * 2.0**-10).all()
    layer = pack_linear(x[:24, :40], None)
    assert torch.equal(layer.split_t[0] + layer.split_t[1], layer.weight_t)
    assert pack_linear(x[:24, :40], None, "fp16").split_t is None


def test_residual_is_added_in_the_epilogue(device):
    gen = torch.Generator().manual_seed(4)
    W = (torch.randn(32, 32, generator=gen) / 6).to(device)
    b = torch.randn(32, generator=gen).to(device)
    v = torch.randn(20, 32, generator=gen).to(device).requires_grad_()
    h = torch.randn(20, 32, generator=gen).to(device).requires_grad_()
    layer = pack_linear(W, b)
    y = tanh_linear(v, layer, residual=h)
    ref = torch.tanh(v) @ W.t() + b + h
    assert rel_err(y, ref) < 1e-5
    gy = torch.randn_like(ref)
    got = torch.autograd.grad((y * gy).sum(), (v, h))
    want = torch.autograd.grad((ref * gy).sum(), (v, h))
    assert rel_err(got[0], want[0]) < 1e-5 and torch.equal(got[1], want[1])
