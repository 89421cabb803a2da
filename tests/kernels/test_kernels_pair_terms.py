"""Fused pair prior terms against their PyTorch reference: energies and position gradients
of every form, in float32 and float64, bitwise repeatable; bad forms and second
derivatives refused with clear errors."""

import pytest
import torch
from kernels_testlib import rel_err

from kernels import PAIR_FORMS, pair_energies
from kernels.pair_terms import pair_energies_reference
from kernels.term_rows import pair_rows_by_bead


def pair_problem(form: str, dtype, device, replicas=3, n=23, seed=0):
    """Random chain-like positions, 300 pairs (more than one block of the kernel, some
    inside the cutoff form's r_x and some beyond it) and their parameters."""
    g = torch.Generator().manual_seed(seed)
    pos = torch.cumsum(1.5 * torch.randn(replicas, n, 3, generator=g), dim=1)
    i = torch.randint(0, n, (300,), generator=g)
    j = (i + torch.randint(2, n - 1, (300,), generator=g)) % n
    index = torch.stack([i, j], 1)
    d = (pos[0, j] - pos[0, i]).norm(dim=-1)
    a = (0.5 + 0.4 * torch.rand(300, generator=g)) * d  # σ or r0 below the distance
    b = 1.2 * d * torch.rand(300, generator=g) + 0.5 if form == "cutoff_power6" else (
        0.1 + torch.rand(300, generator=g))
    if form == "cutoff_power6":
        b = torch.maximum(b, a * 1.01)  # r_x beyond σ
    return [t.to(device=device, dtype=dtype) for t in (pos, a, b)] + [index.to(device)]


@pytest.mark.parametrize("form", sorted(PAIR_FORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pair_energies_and_gradients_match_the_reference(form, dtype, device):
    pos, a, b, index = pair_problem(form, dtype, device)
    layout = pair_rows_by_bead(index, pos.shape[1])
    x = pos.clone().requires_grad_(True)
    energy = pair_energies(x, index, a, b, form, layout)
    weights = torch.tensor([1.0, -2.0, 0.5], dtype=dtype, device=device)
    (grad,) = torch.autograd.grad((energy * weights).sum(), x)
    y = pos.clone().requires_grad_(True)
    ref = pair_energies_reference(y, index, a, b, form)
    (grad_ref,) = torch.autograd.grad((ref * weights).sum(), y)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert energy.shape == (3,) and energy.dtype == dtype
    assert rel_err(energy, ref) < tol
    assert rel_err(grad, grad_ref) < (1e-5 if dtype == torch.float32 else 1e-6)  # FP32 sums
    # same bits every run (fixed summation order, no atomics)
    again = pair_energies(x, index, a, b, form, layout)
    assert torch.equal(energy, again)
    assert torch.equal(grad, torch.autograd.grad((again * weights).sum(), x)[0])


def test_cutoff_form_is_zero_beyond_its_radius(device):
    pos, a, b, index = pair_problem("cutoff_power6", torch.float64, device)
    far = torch.full_like(b, 0.5) * a.min() / a.max()  # every r_x below every distance
    layout = pair_rows_by_bead(index, pos.shape[1])
    x = pos.clone().requires_grad_(True)
    energy = pair_energies(x, index, far * a, far * a * 1.01, "cutoff_power6", layout)
    (grad,) = torch.autograd.grad(energy.sum(), x)
    assert torch.equal(energy, torch.zeros_like(energy))
    assert torch.equal(grad, torch.zeros_like(grad))


def test_no_pairs_and_bad_input(device):
    pos = torch.zeros(2, 4, 3, device=device)
    none = torch.zeros(0, 2, dtype=torch.long, device=device)
    empty = torch.zeros(0, device=device)
    layout = pair_rows_by_bead(none, 4)
    assert torch.equal(pair_energies(pos, none, empty, empty, "power6", layout),
                       torch.zeros(2, device=device))
    with pytest.raises(ValueError, match="unknown pair form 'lj'"):
        pair_energies(pos, none, empty, empty, "lj", layout)
    with pytest.raises(ValueError, match=r"pos must be float32 or float64 \[R, n, 3\]"):
        pair_energies(pos.half(), none, empty, empty, "power6", layout)


def test_second_derivatives_are_refused(device):
    pos, a, b, index = pair_problem("power6", torch.float64, device)
    x = pos.clone().requires_grad_(True)
    energy = pair_energies(x, index, a, b, "power6", pair_rows_by_bead(index, pos.shape[1]))
    with pytest.raises(NotImplementedError, match="second derivatives through the fused prior"):
        torch.autograd.grad(energy.sum(), x, create_graph=True)
