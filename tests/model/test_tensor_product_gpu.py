"""CGTensorProduct's accelerated convolution backends on a CUDA GPU against the e3nn
reference path, in FP32: OpenEquivariance's fused deterministic convolution over the
engine's destination-sorted CSR layout (padding spread over pad nodes), and
cuEquivariance's channel-wise tensor product with gather and scatter indices. Energies and
forces of CLN025 replicas (native plus 0.3 Å of noise) agree to 1e-5 relative, on an exact
graph, on a fixed-capacity graph with padding slots and candidate edges beyond the cutoff
and on a searched graph (the captured step's), and the accelerated paths give the
weights' gradients that training needs. The radial MLPs on tensor cores (``fused_update``,
FP32 and 16-bit) against the reference, the radial weights' tables (``tabulated_filter``)
on every backend, and the paths that ``cuda_graph`` captures (e3nn and OpenEquivariance,
with radial MLPs in PyTorch, in the packed kernel or tables) under CUDA's synchronisation
check.

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

from workbench.model.options import KernelOptions  # noqa: E402
from workbench.model.tensor_product import (  # noqa: E402
    PAD_ROW_EDGES,
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


def energy_and_forces(model, pos, types, graph, options=None):
    pos = pos.detach().clone().requires_grad_()
    energy = model(pos.reshape(-1, 3), types, graph, options).sum()
    (grad,) = torch.autograd.grad(energy, pos)
    return energy.detach(), -grad


@pytest.mark.parametrize("tables", [False, True], ids=["radial_mlp", "tabulated_filter"])
@pytest.mark.parametrize("graph_kind", ["exact", "capacity", "searched"])
@pytest.mark.parametrize("backend", sorted(PACKAGES))
def test_backend_matches_e3nn_in_fp32(backend, graph_kind, tables):
    pytest.importorskip(PACKAGES[backend])
    assert backend_problem(backend, torch.device("cuda")) is None
    torch.manual_seed(0)
    model = CGTensorProduct(TensorProductConfig(cutoff=8.0)).cuda()
    pos, types = cln025_batch()
    n = pos.shape[1]
    if graph_kind == "exact":
        graph = NeighborList(n, model.cutoff, skin=0.0).update(pos)
    elif graph_kind == "searched":  # destination-sorted already, padding slots last
        graph, needed = NeighborList(n, model.cutoff).searched_graph(pos, n * n)
        assert int(needed) < n * n - 2 * PAD_ROW_EDGES, "needs padding on several pad rows"
    else:
        graph = NeighborList(n, model.cutoff, skin=1.5, capacity=4 * n * n,
                             exact=False).update(pos)
        assert not bool(graph.valid.all()), "needs padding slots"
    options = KernelOptions(tabulated_filter=tables)
    e_ref, f_ref = energy_and_forces(model, pos, types, graph, options)
    model.backend = backend
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback to e3nn
        e, f = energy_and_forces(model, pos, types, graph, options)
    assert relative_error(e, e_ref) < 1e-5
    assert relative_error(f, f_ref) < 1e-5
    if tables:  # the tables' own error against the radial MLPs (1e-6 of the weights)
        e_mlp, f_mlp = energy_and_forces(model, pos, types, graph)
        assert 0 < relative_error(f, f_mlp) < 1e-5


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


@pytest.mark.parametrize("precision,bound", [("fp32", 1e-5), ("fp16", 1e-3), ("bf16", 1e-2)])
def test_radial_mlps_on_tensor_cores(precision, bound):
    """``fused_update``: the radial MLPs in the packed linear kernel. FP32 (three TF32
    products) gives the reference path's energies and forces to 1e-5; 16-bit operands keep
    the forces within ``bound`` of the float64 reference (relative RMS)."""
    torch.manual_seed(2)
    model = CGTensorProduct(TensorProductConfig(cutoff=8.0)).cuda()
    pos, types = cln025_batch()
    graph = NeighborList(pos.shape[1], model.cutoff, skin=0.0).update(pos)
    options = KernelOptions(fused_update=True, mlp_precision=precision)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback to the reference
        e, f = energy_and_forces(model, pos, types, graph, options)
    if precision == "fp32":
        e_ref, f_ref = energy_and_forces(model, pos, types, graph)
    else:
        e_ref, f_ref = energy_and_forces(model.double(), pos.double(), types, graph)
    assert e.dtype == f.dtype == torch.float32
    assert relative_error(f.double(), f_ref.double()) < bound
    assert relative_error(e.double(), e_ref.double()) < 10 * bound


@pytest.mark.parametrize("radial", ["reference", "fused_update", "tabulated_filter"])
@pytest.mark.parametrize("backend", ["e3nn", "openequivariance"])
def test_captured_paths_never_synchronise_with_the_host(backend, radial):
    """What ``cuda_graph`` captures: forward and backward over a fixed-shape graph with
    CUDA's synchronisation check set to raise (after a first evaluation that builds the
    backend, packs the weights and tunes the kernels)."""
    if backend != "e3nn":
        pytest.importorskip(PACKAGES[backend])
    torch.manual_seed(3)
    model = CGTensorProduct(TensorProductConfig(cutoff=8.0), backend=backend).cuda()
    pos, types = cln025_batch()
    graph, _ = NeighborList(pos.shape[1], model.cutoff).static_graph(pos, 2 * pos.shape[1]**2)
    options = KernelOptions(cuda_graph=True, **({} if radial == "reference" else {radial: True}))
    e_ref, f_ref = energy_and_forces(model, pos, types, graph, options)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        e, f = energy_and_forces(model, pos, types, graph, options)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert relative_error(e, e_ref) < 1e-6 and relative_error(f, f_ref) < 1e-6
