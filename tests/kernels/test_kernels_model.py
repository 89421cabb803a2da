"""A small CGSchNet (basis with envelope, 2 blocks) through the fused ops vs the references:
energies and forces in FP32, and the W16A16 force error."""

import pytest
import torch
from kernels_testlib import rel_err

from benchmarks.bench_kernels import (
    energy_and_forces,
    make_benchmark_graph,
    make_schnet_weights,
    pack_schnet,
)
from kernels import build_csr


@pytest.fixture(scope="module")
def system():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    graph = make_benchmark_graph(beads=16, replicas=2, cutoff=6.0, degree=10.0, device=dev)
    weights = make_schnet_weights(K=8, F=32, H=32, blocks=2, cutoff=6.0, device=dev)
    csr = build_csr(graph["src"], graph["dst"], graph["num_nodes"])
    ref = energy_and_forces(graph["pos"].double(), graph, csr, pack_schnet(weights), False)
    return graph, weights, csr, ref


# bf16 (8-bit mantissa) in *every* MLP of this tiny random model (F = 32, so little averaging)
# lands at ~1.3% force error; at the benchmark size (F = 128) it measured 0.50% on an H200
# (docs/kernels.md). The 1% bound for bf16 is asserted per cfconv block
# (test_kernels_cfconv.py) and at full size (test_kernels_gpu.py); fp16 meets it here.
@pytest.mark.parametrize("dtype,force_tol", [("fp32", 1e-5), ("fp16", 0.01), ("bf16", 0.02)])
def test_schnet_energy_forces(system, dtype, force_tol):
    graph, weights, csr, (e_ref, f_ref) = system
    e, f = energy_and_forces(graph["pos"], graph, csr, pack_schnet(weights, dtype), True)
    if dtype == "fp32":
        assert rel_err(e, e_ref) < force_tol and rel_err(f, f_ref) < force_tol
    else:
        rms = f_ref.pow(2).mean().sqrt()
        assert (f.double() - f_ref).pow(2).mean().sqrt() <= force_tol * rms
        assert rel_err(e, e_ref) < 0.01
