"""Bead gathers whose gradients are summed by the Triton segment sum, and bonds, angles,
dihedrals and pair priors run as one fused kernel each (under the interpreter on a CPU):
same forces as PyTorch's sorted accumulation, bitwise reproducible, exact against finite
differences; the bead layouts are cached per index tensor; the switch is on only for fused
paths on CUDA tensors."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_system

from kernels import triton_available
from workbench.model.geometry import bead_layout, segment_gathers
from workbench.model.native_priors import native_priors
from workbench.model.options import KernelOptions
from workbench.model.potential import Potential, prior_segment_sums
from workbench.model.priors import CutoffRepulsion, HarmonicThetaAngles

pytestmark = pytest.mark.skipif(not triton_available(), reason="needs Triton (or its interpreter)")
#: Where the kernels can run: the GPU when there is one (Triton launches no kernel on CPU
#: tensors there), else the CPU under the interpreter.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def priors_and_positions(dtype=torch.float32, replicas=3):
    system = tiny_system()
    priors = dict(native_priors(system))
    priors["theta"] = HarmonicThetaAngles(system.angles, x0=torch.full((len(system.angles),), 1.9),
                                          k=torch.full((len(system.angles),), 3.0))
    repulsion = priors["repulsion"]  # the shifted form too (a fused pair kernel as well)
    priors["cutoff_repulsion"] = CutoffRepulsion(
        repulsion.index, sigma=repulsion.sigma, cutoff=1.25 * repulsion.sigma
    )
    gen = torch.Generator().manual_seed(4)
    noise = 0.3 * torch.randn((replicas, system.n_beads, 3), generator=gen)
    pos = (system.native_positions[None] + noise).to(DEVICE, dtype)
    return {k: v.to(DEVICE, dtype) for k, v in priors.items()}, pos


def forces(prior, pos, segments: bool):
    pos = pos.detach().requires_grad_(True)
    with segment_gathers(segments):
        energy = prior(pos).sum()
    return -torch.autograd.grad(energy, pos)[0]


def test_segment_summed_forces_equal_the_sorted_accumulation():
    priors, pos = priors_and_positions()
    for name, prior in priors.items():
        plain, fused = forces(prior, pos, False), forces(prior, pos, True)
        assert (fused - plain).norm() <= 1e-6 * plain.norm(), name
        assert torch.equal(fused, forces(prior, pos, True)), name  # same bits every run


def test_segment_summed_forces_match_finite_differences():
    priors, pos = priors_and_positions(torch.float64, replicas=2)
    for name, prior in priors.items():
        f = forces(prior, pos, True)
        h = 1e-6
        for r, i, k in ((0, 1, 0), (1, 5, 2), (0, 9, 1)):
            plus, minus = pos.clone(), pos.clone()
            plus[r, i, k] += h
            minus[r, i, k] -= h
            numeric = -(prior(plus).sum() - prior(minus).sum()) / (2 * h)
            assert abs(float(f[r, i, k] - numeric)) <= 1e-6 * max(1.0, abs(float(numeric))), name


def test_all_prior_kernels_in_one_op_give_the_sum_of_the_terms(monkeypatch):
    import workbench.model.potential as potential_module

    priors, pos = priors_and_positions()
    potential = Potential(tiny_system().bead_types, None, priors).to(DEVICE)
    # the combined op runs on fused CUDA paths; here the interpreter stands in for the GPU
    monkeypatch.setattr(potential_module, "prior_segment_sums", lambda *_: True)
    x = pos.clone().requires_grad_(True)
    energy = potential.energy(x, None, KernelOptions.all_on())
    (grad,) = torch.autograd.grad(energy.sum(), x)
    expected = sum(-forces(prior, pos, True) for prior in priors.values())
    with segment_gathers(True):
        total = sum(prior(pos) for prior in priors.values())
    assert (energy - total).abs().max() <= 1e-5 * total.abs().max()
    assert (grad - expected).norm() <= 1e-6 * expected.norm()
    assert len(potential._term_layouts) == 1  # built once, then reused
    again = potential.energy(x, None, KernelOptions.all_on())
    assert torch.equal(energy, again)
    assert torch.equal(grad, torch.autograd.grad(again.sum(), x)[0])


def test_second_derivatives_still_flow_with_create_graph():
    priors, pos = priors_and_positions(torch.float64, replicas=1)
    prior = priors["theta"]  # no kernel of its own: segment-summed gathers
    pos = pos.requires_grad_(True)
    with segment_gathers(True):
        (grad,) = torch.autograd.grad(prior(pos).sum(), pos, create_graph=True)
    (hess_row,) = torch.autograd.grad(grad[0, 1, 0], pos)
    (expected,) = torch.autograd.grad(
        torch.autograd.grad(prior(pos).sum(), pos, create_graph=True)[0][0, 1, 0], pos
    )
    assert torch.allclose(hess_row, expected)


def test_bead_layout_groups_terms_by_bead_and_is_cached():
    index = torch.tensor([[2, 0], [0, 1], [2, 1], [1, 2]])
    ptr, perm = bead_layout(index, 0, 4)
    assert ptr.tolist() == [0, 1, 2, 4, 4] and perm.tolist() == [1, 3, 0, 2]
    assert ptr.dtype == perm.dtype == torch.int32
    assert bead_layout(index, 0, 4)[0] is ptr  # built once
    every = bead_layout(index, None, 4)  # all entries, id = term * 2 + column
    assert every[0].tolist() == [0, 2, 5, 8, 8] and every[1].tolist() == [1, 2, 3, 5, 6, 0, 4, 7]
    index[0, 0] = 3  # an in-place change gives a new layout
    assert bead_layout(index, 0, 4)[0].tolist() == [0, 1, 2, 3, 4]


def test_only_fused_paths_on_cuda_switch_segment_sums_on():
    pos = torch.zeros(1, 3, 3)
    assert not prior_segment_sums(pos, None)
    assert not prior_segment_sums(pos, KernelOptions.baseline())
    assert not prior_segment_sums(pos, KernelOptions.all_on())  # a CPU tensor
