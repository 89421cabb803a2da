"""Fused angle and dihedral terms against their PyTorch reference (values, gradients,
float32 and float64, several blocks of terms, several multiplicities), a finite-difference
check of the kernel's own gradient, bitwise repeatability, and refusals."""

import pytest
import torch
from kernels_testlib import rel_err

from kernels.bonded_terms import (
    angle_energies,
    angle_energies_reference,
    dihedral_energies,
    dihedral_energies_reference,
)
from kernels.term_rows import entries_by_bead

TERMS = 300  # more than one block of the kernels


def chain(dtype, device, replicas=3, n=25, seed=0):
    g = torch.Generator().manual_seed(seed)
    pos = torch.cumsum(1.5 * torch.randn(replicas, n, 3, generator=g, dtype=torch.float64), 1)
    return pos.to(device=device, dtype=dtype), g


def random_terms(order, n, g, device):
    """``TERMS`` runs of consecutive beads at random offsets (the geometry of bonded terms;
    every bead sits in many terms)."""
    start = torch.randint(0, n - order + 1, (TERMS,), generator=g)
    return (start[:, None] + torch.arange(order)).to(device)


def angle_problem(dtype, device):
    pos, g = chain(dtype, device)
    index = random_terms(3, pos.shape[1], g, device)
    x0 = (torch.rand(TERMS, generator=g) - 0.5).to(device=device, dtype=dtype)
    k = (10.0 * torch.rand(TERMS, generator=g)).to(device=device, dtype=dtype)
    return pos, index, (x0, k)


def dihedral_problem(dtype, device, multiplicities=3):
    pos, g = chain(dtype, device, seed=1)
    index = random_terms(4, pos.shape[1], g, device)
    k1s, k2s = (torch.randn(TERMS, multiplicities, generator=g).to(device=device, dtype=dtype)
                for _ in range(2))
    v0 = torch.randn(TERMS, generator=g).to(device=device, dtype=dtype)
    return pos, index, (k1s, k2s, v0)


CASES = {
    "angle": (angle_problem, angle_energies, angle_energies_reference),
    "dihedral": (dihedral_problem, dihedral_energies, dihedral_energies_reference),
    "dihedral-D1": (lambda dt, dev: dihedral_problem(dt, dev, 1), dihedral_energies,
                    dihedral_energies_reference),
}


def energy_and_grad(fn, pos, index, params, layout=None):
    x = pos.clone().requires_grad_(True)
    energy = fn(x, index, *params, layout)
    weights = torch.tensor([1.0, -2.0, 0.5], dtype=pos.dtype, device=pos.device)
    (grad,) = torch.autograd.grad((energy * weights).sum(), x)
    return energy, grad


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_energies_and_gradients_match_the_reference(case, dtype, device):
    problem, fused, reference = CASES[case]
    pos, index, params = problem(dtype, device)
    layout = entries_by_bead(index, pos.shape[1])
    energy, grad = energy_and_grad(fused, pos, index, params, layout)
    ref, grad_ref = energy_and_grad(reference, pos, index, params)
    assert energy.shape == (3,) and energy.dtype == dtype
    if dtype == torch.float64:
        assert rel_err(energy, ref) < 1e-12
        assert rel_err(grad, grad_ref) < 1e-6  # the gradient rows are summed in FP32
    else:  # no less accurate than the float32 reference, both against float64
        exact, grad_exact = energy_and_grad(reference, pos.double(), index,
                                            tuple(p.double() for p in params))
        assert rel_err(energy.double(), exact) < 2 * rel_err(ref.double(), exact) + 1e-6
        assert rel_err(grad.double(), grad_exact) < 2 * rel_err(grad_ref.double(),
                                                                 grad_exact) + 1e-6
    again, grad_again = energy_and_grad(fused, pos, index, params, layout)
    assert torch.equal(energy, again) and torch.equal(grad, grad_again)


@pytest.mark.parametrize("case", ["angle", "dihedral"])
def test_gradient_is_the_derivative_of_the_kernel_energy(case, device):
    problem, fused, _ = CASES[case]
    pos, index, params = problem(torch.float64, device)
    pos, index = pos[:1], index[:40]
    params = tuple(p[:40] for p in params)
    layout = entries_by_bead(index, pos.shape[1])
    x = pos.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(fused(x, index, *params, layout).sum(), x)
    g = torch.Generator().manual_seed(5)
    direction = torch.randn(pos.shape, generator=g, dtype=torch.float64).to(device)
    h = 1e-6
    plus = fused(pos + h * direction, index, *params, layout)
    minus = fused(pos - h * direction, index, *params, layout)
    numeric = float((plus - minus)[0]) / (2 * h)
    analytic = float((grad[0] * direction[0]).sum())
    assert abs(numeric - analytic) < 1e-6 * max(1.0, abs(analytic))


def test_no_terms_and_bad_input(device):
    pos = torch.zeros(2, 5, 3, device=device)
    none3 = torch.zeros(0, 3, dtype=torch.long, device=device)
    none4 = torch.zeros(0, 4, dtype=torch.long, device=device)
    empty = torch.zeros(0, device=device)
    assert torch.equal(angle_energies(pos, none3, empty, empty, entries_by_bead(none3, 5)),
                       torch.zeros(2, device=device))
    empty2 = torch.zeros(0, 2, device=device)
    assert torch.equal(
        dihedral_energies(pos, none4, empty2, empty2, empty, entries_by_bead(none4, 5)),
        torch.zeros(2, device=device))
    with pytest.raises(ValueError, match=r"index must be \[P, 3\]"):
        angle_energies(pos, none4, empty, empty, None)
    with pytest.raises(ValueError, match=r"pos must be float32 or float64"):
        angle_energies(pos.half(), none3, empty, empty, None)
    with pytest.raises(ValueError, match=r"k1s and k2s must both be \[P, D\]"):
        dihedral_energies(pos, none4, torch.zeros(0, 2, device=device),
                          torch.zeros(0, 3, device=device), empty, None)


def test_second_derivatives_are_refused(device):
    pos, index, params = angle_problem(torch.float64, device)
    x = pos.clone().requires_grad_(True)
    energy = angle_energies(x, index, *params, entries_by_bead(index, pos.shape[1]))
    with pytest.raises(NotImplementedError, match="second derivatives through the fused prior"):
        torch.autograd.grad(energy.sum(), x, create_graph=True)
