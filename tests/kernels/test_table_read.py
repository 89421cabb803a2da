"""Per-edge table read (kernels.table_read) against its PyTorch reference, the unrounded
Hermite cubics (continuous with their slopes at the grid points), lengths at and beyond the
table's end, the length gradient against finite differences, and bad input."""

import math

import pytest
import torch
from kernels_testlib import rel_err

from kernels import table_read
from kernels.table_read import table_read_reference
from kernels.tabulated import evaluate_cubics, hermite_coefficients, tabulate_within

CUTOFF = 5.0


def smooth(d):
    """``[M] -> [M, 37]`` float64: Gaussians times a cosine envelope (37 columns: not a
    multiple of any tile width)."""
    mu = torch.linspace(0.0, CUTOFF, 37, dtype=d.dtype, device=d.device)
    envelope = 0.5 * (torch.cos(math.pi * d / CUTOFF) + 1.0)
    return torch.exp(-((d[:, None] - mu) ** 2)) * envelope[:, None]


def table(intervals=40):
    d = torch.linspace(0.0, CUTOFF, intervals + 1, dtype=torch.float64)
    values, slopes = torch.func.jvp(smooth, (d,), (torch.ones_like(d),))
    return hermite_coefficients(values, slopes, CUTOFF / intervals), CUTOFF / intervals


def test_unrounded_cubics_are_continuous_with_their_slopes_at_the_grid_points():
    coefficients, h = table()
    left = coefficients[:-1].sum(1)  # W at t = 1 of interval k
    right_slope = (coefficients[:-1, 1] + 2 * coefficients[:-1, 2] + 3 * coefficients[:-1, 3])
    torch.testing.assert_close(left, coefficients[1:, 0], rtol=0, atol=1e-15)
    torch.testing.assert_close(right_slope, coefficients[1:, 1], rtol=0, atol=1e-15)
    _, exact, error = tabulate_within(smooth, CUTOFF, 1e-6, (8, 1024), rounded=False)
    mid = torch.rand(999, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    reads = evaluate_cubics(exact, CUTOFF / exact.shape[0], mid * CUTOFF)
    assert error <= 1e-6
    assert float((reads - smooth(mid * CUTOFF)).abs().max()) <= 2e-6


@pytest.mark.parametrize("edges", [1, 50, 333])
def test_kernel_matches_the_reference_values_and_length_gradients(device, edges):
    coefficients, h = table()
    generator = torch.Generator().manual_seed(edges)
    d = torch.rand(edges, generator=generator, dtype=torch.float64) * 1.2 * CUTOFF
    d[0] = CUTOFF  # exactly at the end: a zero row
    c32 = coefficients.float().to(device)
    grad_w = torch.randn(edges, coefficients.shape[2], generator=generator).to(device)
    results = []
    for read in (table_read, table_read_reference):
        x = d.float().to(device).requires_grad_()
        w = read(x, c32, h)
        (grad_d,) = torch.autograd.grad(w, x, grad_w)
        results.append((w.detach(), grad_d))
    (w, g), (w_ref, g_ref) = results
    assert rel_err(w, w_ref) < 1e-6 and rel_err(g, g_ref) < 1e-5
    beyond = d.to(device) >= CUTOFF
    assert bool(beyond.any()) and bool((w[beyond] == 0).all()) and bool((g[beyond] == 0).all())


def test_length_gradient_is_the_derivative_of_the_read_values(device):
    """Central differences of ``Σ W · v`` (float64 reference of the same cubics) against
    the kernel's float32 gradient."""
    coefficients, h = table()
    d = torch.tensor([0.05, 0.9, 1.25, 2.6, 4.97], dtype=torch.float64)
    v = torch.randn(5, coefficients.shape[2], generator=torch.Generator().manual_seed(2),
                    dtype=torch.float64)
    x = d.float().to(device).requires_grad_()
    (grad,) = torch.autograd.grad(table_read(x, coefficients.float().to(device), h), x,
                                  v.float().to(device))
    step = 1e-6
    plus = (table_read_reference(d + step, coefficients, h) * v).sum(1)
    minus = (table_read_reference(d - step, coefficients, h) * v).sum(1)
    assert rel_err(grad.cpu().double(), (plus - minus) / (2 * step)) < 1e-5


def test_bad_input_is_refused():
    coefficients, h = table()
    d = torch.rand(4)
    with pytest.raises(ValueError, match="float32"):
        table_read(d.double(), coefficients, h)
    with pytest.raises(ValueError, match=r"\[G - 1, 4, F\]"):
        table_read(d, coefficients.float()[:, :3], h)
    with pytest.raises(ValueError, match="grad"):
        table_read(d.requires_grad_(), coefficients.float().requires_grad_(), h)
