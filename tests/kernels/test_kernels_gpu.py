"""Full-size checks at the 1ENH x 64 benchmark shape (CUDA only)."""

import pytest
import torch
from kernels_testlib import rel_err

from benchmarks.bench_kernels import (
    energy_and_forces,
    make_benchmark_graph,
    make_schnet_weights,
    pack_schnet,
)
from kernels import OPS, build_csr, cfconv, pack_filter

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def full():
    graph = make_benchmark_graph(device="cuda")
    weights = make_schnet_weights(device="cuda")
    csr = build_csr(graph["src"], graph["dst"], graph["num_nodes"])
    return graph, weights, csr


def test_full_size_csr(full):
    graph, _, csr = full
    ref = OPS["build_csr"].reference(graph["src"], graph["dst"], graph["num_nodes"])
    assert all(torch.equal(a, b) for a, b in zip(csr, ref, strict=True))


def test_full_size_cfconv_fp32(full):
    graph, weights, csr = full
    b0, spec = weights["blocks"][0], weights["spec"]
    filt = pack_filter(b0["A1"], b0["a1"], b0["A2"], None, "fp32", spec)
    xs = torch.randn(graph["num_nodes"], 128, device="cuda")
    u = cfconv(graph["pos"], xs, graph["src"], graph["dst"], csr, filt, spec)
    ref = OPS["cfconv"].reference(graph["pos"].double(), xs.double(), graph["src"],
                                  graph["dst"], csr, filt, spec)
    assert rel_err(u, ref) < 1e-5


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_full_size_model_forces(full, dtype):
    graph, weights, csr = full
    e_ref, f_ref = energy_and_forces(graph["pos"].double(), graph, csr, pack_schnet(weights),
                                     False)
    e, f = energy_and_forces(graph["pos"], graph, csr, pack_schnet(weights, dtype), True)
    err = float((f.double() - f_ref).pow(2).mean().sqrt() / f_ref.pow(2).mean().sqrt())
    assert err < (1e-5 if dtype == "fp32" else 0.01)
