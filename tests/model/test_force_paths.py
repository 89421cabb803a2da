"""What a run's kernel options become on a device without Triton, and what it is told."""

import pytest
import torch
from helpers import interpreter_only, schnet_potential

from workbench.model.force_paths import force_path, settle_options
from workbench.model.options import KernelOptions

CPU = torch.device("cpu")


@pytest.fixture
def no_triton(monkeypatch):
    import kernels._triton

    monkeypatch.setattr(kernels._triton, "INTERPRET", False)


def test_a_cpu_keeps_the_tables_and_drops_the_triton_techniques(no_triton):
    net = schnet_potential(priors=False).schnet
    options = KernelOptions.all_on("fp16", tabulated_filter=True, cuda_graph=True)
    notices = settle_options(options, CPU, net)
    assert options == KernelOptions(tabulated_filter=True)
    assert force_path(net, CPU, options) == "pytorch-tables"
    assert "fused_update" in notices[0] and "mlp_precision=fp16" in notices[0]
    assert "fell back" in notices[0] and "Tabulated filters in PyTorch" in notices[1]


def test_nothing_changes_where_nothing_falls_back(no_triton):
    net = schnet_potential(priors=False).schnet
    baseline, tables = KernelOptions(), KernelOptions(tabulated_filter=True)
    assert settle_options(baseline, CPU, net) == [] and baseline == KernelOptions()
    assert force_path(net, CPU, baseline) == "reference"
    assert len(settle_options(tables, CPU, net)) == 1 and tables.tabulated_filter


def test_a_prior_only_potential_gets_the_reference_path(no_triton):
    options = KernelOptions(tabulated_filter=True, fused_integrator=True)
    notices = settle_options(options, CPU, None)
    assert options.is_baseline and "fell back" in notices[0]
    assert force_path(None, CPU, options) == "reference"


@interpreter_only
def test_the_interpreter_runs_the_triton_path():
    options = KernelOptions(tabulated_filter=True)
    net = schnet_potential(priors=False).schnet
    assert settle_options(options, CPU, net) == [] and options.tabulated_filter
    assert force_path(net, CPU, options) == "triton"
