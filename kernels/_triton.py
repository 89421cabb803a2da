"""Triton import shim, autotune helpers and small device functions shared by the kernels.

`kernels` must import on machines without Triton (the PyTorch reference path is then the only
one usable). When Triton is missing, ``triton`` and ``tl`` below are stand-ins whose decorators
leave functions untouched, so the kernel modules still import; `triton_available()` is then
False and no kernel is ever launched.

``INTERPRET`` is read once, at import, from ``TRITON_INTERPRET``. It only trims autotuning to
a single configuration (the interpreter cannot autotune over several) and swaps the bf16 dot
for a numerically identical emulation (the Triton 3.9 interpreter multiplies bf16 bit
patterns as integers). It never changes what a kernel computes.
"""

from __future__ import annotations

import inspect
import os

import torch

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - exercised only on machines without Triton
    HAS_TRITON = False

    class _Stub:
        """Stand-in for ``triton`` / ``triton.language`` when Triton is not installed."""

        constexpr = object

        @staticmethod
        def jit(fn=None, **_kw):
            return fn if fn is not None else (lambda f: f)

        @staticmethod
        def autotune(*_a, **_kw):
            return lambda f: f

        @staticmethod
        def Config(*_a, **_kw):  # noqa: N802 - mirrors triton.Config
            return None

        def __getattr__(self, name):
            return None

    triton = _Stub()
    tl = _Stub()

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

__all__ = ["HAS_TRITON", "INTERPRET", "triton", "tl", "triton_available", "pick_configs",
           "autotune",
           "torch_to_tl_dtype", "check_no_grad", "next_pow2", "sqrt_rounded", "exp_f32", "rcp_f32",
           "tanh_f32",
           "activation_f32", "cos_sin",
           "tf32_round", "mma"]


def triton_available() -> bool:
    """True when Triton is importable and kernels can run (a CUDA device or the interpreter)."""
    return HAS_TRITON and (torch.cuda.is_available() or INTERPRET)


def next_pow2(n: int, minimum: int = 16) -> int:
    """Smallest power of two ``>= max(n, minimum)`` (block and padding sizes)."""
    return max(minimum, 1 << (max(int(n), 1) - 1).bit_length())


def pick_configs(gpu_configs, interpret_config):
    """Autotune configurations: the full list on a GPU, exactly one under the interpreter.

    Parameters
    ----------
    gpu_configs : list of triton.Config
        Candidates timed by the autotuner on a real device.
    interpret_config : triton.Config
        The single configuration used under ``TRITON_INTERPRET=1``.
    """
    return [interpret_config] if INTERPRET else list(gpu_configs)


# Triton 3.4 and later can keep autotuning timings in its cache folder (``cache_results``)
CACHES_AUTOTUNING = "cache_results" in inspect.signature(triton.autotune).parameters


def autotune(configs, key, **options):
    """``triton.autotune`` whose timings are kept on disk where Triton can (3.4 and later).

    Without that, every process re-times every configuration of every kernel at each new
    key: about 14 s before a 1YRF run's first step on an H100 whose compiled kernels are
    already cached (docs/kernels.md). With it, Triton keeps the timings in its cache folder
    (``TRITON_CACHE_DIR``, default ``~/.triton/cache``), keyed by the kernel's source, the
    GPU, the configurations and the key values; deleting that folder re-times them. The
    interpreter never caches.

    Parameters
    ----------
    configs : list of triton.Config
        The candidates (`pick_configs`).
    key : list of str
        Kernel arguments whose values select a timing; Triton adds every tensor argument's
        dtype. The values must be JSON-serialisable (ints, floats, bools, strings): a
        ``tl.dtype`` there makes caching fail, so pass dtypes as tensors, not keys.
    **options
        Further ``triton.autotune`` arguments (``prune_configs_by``, ...).
    """
    if CACHES_AUTOTUNING:
        options.setdefault("cache_results", True)
    return triton.autotune(configs=configs, key=key, **options)


def torch_to_tl_dtype(dtype: torch.dtype):
    """Triton element type for a torch floating dtype (float32, float16 or bfloat16)."""
    table = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}
    if dtype not in table:
        raise ValueError(f"unsupported dtype {dtype}; expected float32, float16 or bfloat16")
    return table[dtype]


def check_no_grad(op: str, **tensors) -> None:
    """Refuse weights that require grad: fused ops return no weight gradients.

    The fused kernels serve molecular dynamics, where only d(energy)/d(positions) is needed;
    their backward passes return gradients for positions and features only. Passing a weight
    that requires grad while autograd is recording would silently drop its gradient, so that
    is an error: pass ``weight.detach()`` (or pack under ``torch.no_grad()``), and train with
    the reference path.
    """
    if not torch.is_grad_enabled():
        return
    bad = [name for name, t in tensors.items() if t is not None and t.requires_grad]
    if bad:
        raise ValueError(
            f"{op}: {', '.join(bad)} require grad, but the fused op returns no weight gradients "
            "(it differentiates w.r.t. positions and features only). Pass detached weights, "
            "or use the PyTorch reference op for training."
        )


INTERPRET_BF16_EMULATION = tl.constexpr(INTERPRET) if HAS_TRITON else INTERPRET


@triton.jit
def sqrt_rounded(x, F64: tl.constexpr):
    """Correctly rounded square root, as torch's: ``x`` float64 (``F64``) or float32."""
    if F64:  # noqa: SIM108 - a constexpr if/else (code after an early return is compiled)
        y = tl.sqrt(x)
    else:
        y = tl.sqrt_rn(x)
    return y


@triton.jit
def cos_sin(x):
    """``(cos x, sin x)`` in FP32 to ~1e-7 absolute for ``|x| < 100`` (the envelopes' arguments
    lie in ``[0, 3 pi]``): a quadrant reduction by pi/2 in two parts and short Taylor
    polynomials on ``[-pi/4, pi/4]``. Straight-line code, unlike libdevice's ``cosf`` and
    ``sinf``, whose large-argument reduction keeps arrays in local memory and costs every
    kernel that inlines them registers and instruction cache."""
    q = tl.floor(x * 0.6366197723675814 + 0.5)
    y = (x - q * 1.5707963705062866) + q * 4.371139000186243e-08
    y2 = y * y
    s = y + y * y2 * (-1.0 / 6.0 + y2 * (1.0 / 120.0 + y2 * (-1.0 / 5040.0 + y2 / 362880.0)))
    c = 1.0 + y2 * (-0.5 + y2 * (1.0 / 24.0 + y2 * (-1.0 / 720.0 + y2 * (1.0 / 40320.0))))
    quadrant = q.to(tl.int32) & 3
    cos = tl.where(quadrant == 0, c, tl.where(quadrant == 1, -s, tl.where(quadrant == 2, -c, s)))
    sin = tl.where(quadrant == 0, s, tl.where(quadrant == 1, c, tl.where(quadrant == 2, -s, -c)))
    return cos, sin


# On a GPU, `exp_f32` and `rcp_f32` are single special-function instructions; the
# interpreter (which runs no PTX) takes the arithmetic they approximate
FAST_MATH = tl.constexpr(not INTERPRET) if HAS_TRITON else not INTERPRET


@triton.jit
def exp_f32(x):
    """``exp(x)`` in FP32 to about 2 ulp: ``ex2.approx.ftz`` of ``x log2(e)`` on a GPU (results
    below 2^-126 flush to 0, +-inf and NaN as ``exp``'s), ``tl.exp`` under the interpreter.

    Two instructions where ``tl.exp`` takes five (its range checks keep results below 2^-126);
    every caller here either sums the values or adds 1 to them, where such results are lost
    in rounding anyway."""
    if FAST_MATH:
        y = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f",
                                      [x * 1.4426950408889634], dtype=tl.float32,
                                      is_pure=True, pack=1)
    else:
        y = tl.exp(x)
    return y


@triton.jit
def rcp_f32(x):
    """``1 / x`` in FP32 to about 1 ulp: ``rcp.approx.ftz`` on a GPU (one instruction; ``1 / inf
    = 0``), a division under the interpreter."""
    if FAST_MATH:
        y = tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [x],
                                      dtype=tl.float32, is_pure=True, pack=1)
    else:
        y = 1.0 / x
    return y


@triton.jit
def tanh_f32(x):
    """tanh through exp, exact to ~1e-7 absolute and safe at +-inf (no libdevice needed)."""
    return 1.0 - 2.0 * rcp_f32(exp_f32(2.0 * x) + 1.0)


@triton.jit
def activation_f32(z, ACT: tl.constexpr):
    """``act(z)`` and ``act'(z)`` in FP32 for ``ACT`` ``"silu"`` or ``"tanh"``."""
    if ACT == "silu":
        sig = rcp_f32(1.0 + exp_f32(-z))
        y = z * sig
        dy = sig * (1.0 + z * (1.0 - sig))
    else:
        y = tanh_f32(z)
        dy = 1.0 - y * y
    return y, dy


@triton.jit
def tf32_round(x):
    """``x`` (FP32) rounded to the nearest TF32 value (10 mantissa bits; ties away from zero).

    A tensor core given FP32 registers in TF32 mode ignores the 13 low mantissa bits
    (truncation, a bias towards zero); rounding first halves the error and removes the bias,
    and a rounded tile is used by the tensor core exactly, so the interpreter's FP32 product
    of rounded tiles is what the GPU computes (up to the order of the FP32 accumulation).
    """
    return ((x.to(tl.int32, bitcast=True) + 4096) & -8192).to(tl.float32, bitcast=True)


@triton.jit
def mma(a, w, DT: tl.constexpr, PREC: tl.constexpr):
    """``a @ w`` on tensor cores with FP32 accumulation.

    ``a`` is an FP32 register tile, cast here to ``DT`` (float32, float16 or bfloat16); ``w``
    is already stored in ``DT``. ``PREC`` ("ieee", "tf32x3", "tf32") applies to FP32 inputs
    only; with ``"tf32"`` one TF32 product is made of ``a`` rounded by `tf32_round` (round
    ``w`` the same way once, e.g. when it is loaded). Under the interpreter bf16 is emulated
    by rounding both operands to bf16 and multiplying in FP32, which is exactly what the
    tensor core computes.
    """
    if DT == tl.float32:  # noqa: SIM300
        if PREC == "tf32":
            r = tl.dot(tf32_round(a), w, input_precision="tf32")
        else:
            r = tl.dot(a, w, input_precision=PREC)
        return r
    if INTERPRET_BF16_EMULATION and DT == tl.bfloat16:  # noqa: SIM300
        return tl.dot(a.to(DT).to(tl.float32), w.to(tl.float32), input_precision="ieee")
    return tl.dot(a.to(DT), w)
