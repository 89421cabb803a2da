"""CGTensorProduct's accelerated convolution backends on a CUDA GPU against the e3nn
reference path, in FP32: OpenEquivariance's fused deterministic convolution over the
engine's destination-sorted CSR layout, and cuEquivariance's channel-wise tensor product
with gather and scatter indices. Energies and forces of CLN025 replicas (native plus 0.3 Å
of noise) agree to 1e-5 relative, on an exact graph and on a fixed-capacity graph with
padding slots and candidate edges beyond the cutoff, and the accelerated paths give the
weights' gradients that training needs.

The OpenEquivariance tests pass on an H200 (openequivariance 0.7.0, torch 2.11); the
cuEquivariance ones have not run on a GPU. On the CPU, cuEquivariance's PyTorch method
matches e3nn's convolution to 1e-7 (``test_tensor_product.py``); OpenEquivariance has no
CPU path.
"""

from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("e3nn")

from helpers import perturbed_positions, relative_error, system  # noqa: E402

from workbench.model.tensor_product import (  # noqa: E402
    CGTensorProduct,
    TensorProductConfig,
    backend_problem,
)
from workbench.neighbors import NeighborList  # noqa: E402

pytestmark = pytest.mark.gpu

PACKAGES = {"openequivariance": "openequivariance", "cuequivariance": "cuequivariance_torch"}


def cln025_batch(replicas: int = 4):
    """Positions ``(R, n, 3)`` float32 on the GPU and the types of all replicas."""
    sys = system("cln025")
    pos = perturbed_positions(sys, replicas=replicas, sigma=0.3, seed=0, dtype=torch.float32)
    return pos.cuda(), sys.bead_types.repeat(replicas).cuda()


def energy_and_forces(model, pos, types, graph):
    pos = pos.detach().clone().requires_grad_()
    energy = model(pos.reshape(-1, 3), types, graph).sum()
    (grad,) = torch.autograd.grad(energy, pos)
    return energy.detach(), -grad


@pytest.mark.parametrize("graph_kind", ["exact", "capacity"])
@pytest.mark.parametrize("backend", sorted(PACKAGES))
def test_backend_matches_e3nn_in_fp32(backend, graph_kind):
    pytest.importorskip(PACKAGES[backend])
    assert backend_problem(backend, torch.device("cuda")) is None
    torch.manual_seed(0)
    model = CGTensorProduct(TensorProductConfig(cutoff=8.0)).cuda()
    pos, types = cln025_batch()
    n = pos.shape[1]
    if graph_kind == "exact":
        graph = NeighborList(n, model.cutoff, skin=0.0).update(pos)
    else:
        graph = NeighborList(n, model.cutoff, skin=1.5, capacity=4 * n * n,
                             exact=False).update(pos)
        assert not bool(graph.valid.all()), "needs padding slots"
    e_ref, f_ref = energy_and_forces(model, pos, types, graph)
    model.backend = backend
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback to e3nn
        e, f = energy_and_forces(model, pos, types, graph)
    assert relative_error(e, e_ref) < 1e-5
    assert relative_error(f, f_ref) < 1e-5


@pytest.mark.parametrize("backend", sorted(PACKAGES))
def test_backend_weight_gradients_match_e3nn(backend):
    """Force matching differentiates the forces by the weights (double backward)."""
    pytest.importorskip(PACKAGES[backend])
    torch.manual_seed(1)
    model = CGTensorProduct(TensorProductConfig(cutoff=8.0, blocks=2)).cuda()
    pos, types = cln025_batch(replicas=2)
    graph = NeighborList(pos.shape[1], model.cutoff, skin=0.0).update(pos)

    def loss_gradients():
        x = pos.detach().clone().requires_grad_()
        energy = model(x.reshape(-1, 3), types, graph).sum()
        (grad,) = torch.autograd.grad(energy, x, create_graph=True)
        loss = grad.square().sum()
        grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
        return torch.cat([torch.zeros(p.numel(), device=p.device) if g is None else g.flatten()
                          for g, p in zip(grads, model.parameters(), strict=True)])

    reference = loss_gradients()
    model.backend = backend
    assert relative_error(loss_gradients(), reference) < 1e-4
