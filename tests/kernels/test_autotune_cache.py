"""Autotuning timings kept on disk: every autotuned kernel is declared through
`kernels._triton.autotune`, and the key values of its real launches can be written by
Triton's cache (JSON), which a ``tl.dtype`` among them once made fail."""

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from kernels_testlib import filter_weights, make_graph, radial_specs

import kernels
from benchmarks.bench_kernels import (
    energy_and_forces,
    make_benchmark_graph,
    make_schnet_weights,
    pack_schnet,
)
from kernels import (
    DescriptorSpec,
    _triton,
    build_csr,
    build_csr_sorted_pairs,
    dp_descriptor,
    edge_distances,
    pack_filter,
    pair_filter_rows,
    pair_layout,
    radial_basis,
    tabulated_cfconv,
)
from kernels.egnn_edge import egnn_edge, pack_edge_mlp
from kernels.painn_message import pack_painn_filter, painn_message
from kernels.table_read import table_read
from kernels.tabulated import tabulate_filter

Autotuner = pytest.importorskip("triton.runtime.autotuner").Autotuner


def _autotuned_kernels() -> set[str]:
    """Names of every autotuned kernel in the ``kernels`` package."""
    names = set()
    for info in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"kernels.{info.name}")
        names |= {obj.base_fn.__name__ for obj in vars(module).values()
                  if isinstance(obj, Autotuner)}
    return names


@pytest.fixture
def launched_keys(monkeypatch):
    """``{kernel name: (key values, key names that are no kernel argument)}`` of every
    autotuned launch while the test runs."""
    seen = {}
    run = Autotuner.run

    def recording_run(self, *args, **kwargs):
        values = {**dict(zip(self.arg_names, args, strict=False)), **kwargs}
        seen[self.base_fn.__name__] = ([values.get(k) for k in self.keys],
                                       [k for k in self.keys if k not in values])
        return run(self, *args, **kwargs)

    monkeypatch.setattr(Autotuner, "run", recording_run)
    return seen


def test_every_autotuned_launch_has_a_key_the_disk_cache_can_write(device, launched_keys):
    graph = make_benchmark_graph(beads=12, replicas=2, cutoff=6.0, degree=8.0, device=device)
    weights = make_schnet_weights(K=8, F=32, H=32, blocks=1, cutoff=6.0, device=device)
    csr = build_csr(graph["src"], graph["dst"], graph["num_nodes"])
    # the layers' dtype (float32 here) used to be a tl.dtype among the keys
    energy_and_forces(graph["pos"], graph, csr, pack_schnet(weights), True)
    g = make_graph(device=device)
    pos = g["pos"].clone().requires_grad_()
    out = radial_basis(pos, g["src"], g["dst"], g["csr"], radial_specs(device=device)["gauss"],
                       g["num_edges"])
    torch.autograd.grad(sum(o.sum() for o in out), pos)
    widths = torch.arange(1, 17, dtype=torch.float64, device=device)
    table = tabulate_filter(lambda d: torch.exp(-0.1 * widths * d[:, None]), 16, 5.0, device)
    pos = g["pos"].clone().requires_grad_()
    xs = torch.randn(g["num_nodes"] + 1, 16, device=device)
    u = tabulated_cfconv(edge_distances(pos, g["src"], g["dst"], g["csr"]), xs, g["src"],
                         g["dst"], g["csr"], table)
    torch.autograd.grad(u.sum(), pos)
    # exact filter rows per pair, read by the row convolution
    sym = make_graph(device=device, drop=0)
    sym["csr"] = build_csr_sorted_pairs(sym["src"], sym["dst"], sym["num_nodes"])
    spec = radial_specs(device=device)["gauss_env"]
    A1, a1, A2, b2 = filter_weights(K=8, F=16, device=device)
    pos = sym["pos"].clone().requires_grad_()
    dist = edge_distances(pos, sym["src"], sym["dst"], sym["csr"])
    rows = pair_filter_rows(dist, pair_layout(sym["csr"], sym["src"].numel()),
                            pack_filter(A1, a1, A2, b2), spec)
    u = tabulated_cfconv(dist, xs, sym["src"], sym["dst"], sym["csr"], rows, symmetric=True)
    torch.autograd.grad(u.sum(), pos)
    # the PaiNN message block, forward and backward
    H = 16
    painn = pack_painn_filter(torch.randn(3 * H, 8, device=device) / 3,
                              torch.zeros(3 * H, device=device))
    x = torch.randn(sym["num_nodes"] + 1, 3 * H, device=device, requires_grad=True)
    mu = torch.randn(sym["num_nodes"] + 1, 3, H, device=device, requires_grad=True)
    dq, dmu = painn_message(pos, x, mu, sym["src"], sym["dst"], sym["csr"], painn, spec)
    torch.autograd.grad(dq.sum() + dmu.sum(), x)
    widths = torch.arange(1, 3 * H + 1, dtype=torch.float64, device=device)  # its table
    painn = tabulate_filter(lambda d: torch.exp(-0.1 * widths * d[:, None]), 61, 6.0, device)
    dq, dmu = painn_message(pos, x, mu, sym["src"], sym["dst"], sym["csr"], painn, spec)
    torch.autograd.grad(dq.sum() + dmu.sum(), x)
    # the EGNN edge block, forward and backward
    params = pack_edge_mlp(A1, torch.zeros(16, device=device), A2, b2)
    xa = torch.randn(sym["num_nodes"] + 1, 16, device=device, requires_grad=True)
    u = egnn_edge(dist, xa, xs, sym["src"], sym["dst"], sym["csr"], params, spec)
    torch.autograd.grad(u.sum(), xa)
    # the Deep Potential descriptor, forward and backward (table: 1 type, M1 = 16)
    types = torch.zeros(sym["num_nodes"] + 1, dtype=torch.long, device=device)
    descriptor = DescriptorSpec(cutoff_smooth=4.0, cutoff=6.0, num_types=1,
                                type_one_side=False, num_neighbors=8.0, lower=0.0, width=16)
    a = dp_descriptor(pos, types, sym["src"], sym["dst"], sym["csr"], table, descriptor)
    torch.autograd.grad(a.sum(), pos)
    # a table read per edge (a NequIP network's radial weights), forward and backward
    lengths = dist.detach().clone().requires_grad_()
    coefficients = torch.randn(12, 4, 24, device=device)
    torch.autograd.grad(table_read(lengths, coefficients, 0.5).sum(), lengths)

    assert set(launched_keys) == _autotuned_kernels()
    for name, (values, missing) in launched_keys.items():
        assert not missing, f"{name}: autotune keys {missing} are no kernel arguments"
        json.dumps(values)  # raises TypeError on a value Triton's cache cannot write


def test_autotune_asks_triton_to_keep_timings_where_it_can(monkeypatch):
    calls = []
    monkeypatch.setattr(_triton.triton, "autotune", lambda **kw: calls.append(kw))
    _triton.autotune(["config"], ["n"], prune_configs_by={"early_config_prune": None})
    (kw,) = calls
    assert kw["configs"] == ["config"] and kw["key"] == ["n"] and "prune_configs_by" in kw
    assert kw.get("cache_results", False) is _triton.CACHES_AUTOTUNING


def test_row_counts_that_change_with_the_graph_keep_the_linear_kernels_key(device,
                                                                           launched_keys):
    # layers applied to edge rows (16-bit filter MLPs off the fused path) see a new row
    # count whenever the graph changes; keyed on the count itself, they re-tuned every step
    layer = kernels.pack_linear(torch.randn(8, 16, device=device), None)
    keys = []
    for rows in (40, 50, 64):
        kernels.linear(torch.randn(rows, 16, device=device), layer)
        keys.append(launched_keys["_linear_kernel"][0])
    assert keys[0] == keys[1] == keys[2]
    kernels.linear(torch.randn(65, 16, device=device), layer)
    assert launched_keys["_linear_kernel"][0] != keys[0]


#: Kernel arguments that carry a count of edges (or of rows of an edge tensor), which
#: changes whenever a neighbour list is rebuilt.
EDGE_COUNTS = {"E", "M", "num_edges"}

#: Lists every compiled Triton function's arguments and unspecialised arguments as JSON.
_LIST_KERNELS = """
import importlib, json, pkgutil
import kernels
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction
found = {}
for info in pkgutil.iter_modules(kernels.__path__):
    for name, obj in vars(importlib.import_module("kernels." + info.name)).items():
        fn = obj.fn if isinstance(obj, Autotuner) else obj
        if isinstance(fn, JITFunction):
            found[info.name + "." + name] = [fn.arg_names, list(fn.do_not_specialize or ())]
print(json.dumps(found))
"""


def test_edge_counts_are_not_specialised():
    # Triton compiles one variant per divisibility class of an integer argument: an edge
    # count that changes every few steps made a run compile again mid-way (seconds). The
    # tests interpret kernels, which specialise nothing, so the kernels are listed as
    # compiled in a process of their own.
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    out = subprocess.run([sys.executable, "-c", _LIST_KERNELS], env=env, check=True,
                         capture_output=True, text=True, cwd=Path(kernels.__file__).parents[1])
    found = json.loads(out.stdout)
    with_counts = {name: (EDGE_COUNTS & set(args), set(unspecialised))
                   for name, (args, unspecialised) in found.items()
                   if name.endswith("_kernel") and EDGE_COUNTS & set(args)}  # launched
    assert "fused_update._linear_kernel" in with_counts and len(with_counts) >= 8
    for name, (counts, unspecialised) in with_counts.items():
        assert counts <= unspecialised, f"{name} specialises on {counts - unspecialised}"
