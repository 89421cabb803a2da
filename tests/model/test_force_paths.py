"""What a run's kernel options become on a device without Triton, and what it is told."""

import pytest
import torch
from helpers import interpreter_only, needs_e3nn, schnet_potential, tiny_system

from workbench.model.force_paths import force_path, implemented_techniques, settle_options
from workbench.model.native_priors import demo_potential
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


# -- networks of other architectures ------------------------------------------------------


def demo_network(architecture):
    return demo_potential(tiny_system(), architecture=architecture).network


def test_each_architecture_implements_its_own_techniques():
    assert implemented_techniques("schnet") == KernelOptions.techniques()
    assert implemented_techniques("egnn") == (
        "fused_message_passing", "cuda_graph", "fused_pair_search", "fused_integrator")
    assert implemented_techniques("painn") == (
        "fused_message_passing", "tabulated_filter", "cuda_graph", "fused_pair_search",
        "fused_integrator")
    assert implemented_techniques("nequip") == ("fused_update", "tabulated_filter", "cuda_graph",
                                                "fused_pair_search", "fused_integrator")
    assert implemented_techniques("dp") == ("fused_message_passing", "tabulated_filter",
                                            "cuda_graph", "fused_pair_search",
                                            "fused_integrator")
    assert implemented_techniques(None) == ("cuda_graph", "fused_pair_search",
                                            "fused_integrator")


@pytest.fixture
def no_schnet_problem(monkeypatch):
    """`fused_path_problem` is CGSchNet's: calling it on another network is an error."""
    import workbench.model.fused_schnet

    def refuse(network, *_):
        raise AssertionError(f"fused_path_problem called on {type(network).__name__}")

    monkeypatch.setattr(workbench.model.fused_schnet, "fused_path_problem", refuse)


@pytest.mark.parametrize("architecture", ["painn", "egnn"])
def test_a_cpu_runs_other_networks_on_their_reference_path(architecture, no_triton,
                                                           no_schnet_problem):
    net = demo_network(architecture)
    options = KernelOptions.all_on("fp16", tabulated_filter=True, cuda_graph=True)
    notices = settle_options(options, CPU, net)
    assert options == KernelOptions() and force_path(net, CPU, options) == "reference"
    assert "pair_filter" in notices[0] and "no fused kernels" in notices[0]
    assert "fused_pair_search" in notices[1] and "fell back" in notices[1]


def test_a_cpu_runs_a_deep_potential_on_its_pytorch_tables(no_triton, no_schnet_problem):
    net = demo_network("dp")
    options = KernelOptions.all_on("fp16", tabulated_filter=True, cuda_graph=True)
    notices = settle_options(options, CPU, net)
    assert options == KernelOptions(tabulated_filter=True, mlp_precision="fp16")
    assert force_path(net, CPU, options) == "pytorch-tables"
    assert "fused_message_passing" in notices[1] and "fell back" in notices[1]
    assert "dp_tables: each embedding network" in notices[2]
    exact = KernelOptions(fused_integrator=True, mlp_precision="bf16")
    settle_options(exact, CPU, net)
    assert exact == KernelOptions(mlp_precision="bf16")  # its networks in 16-bit, in PyTorch
    assert force_path(net, CPU, exact) == "reference"


@needs_e3nn
def test_a_cpu_runs_a_tensor_product_network_on_its_pytorch_tables(no_triton,
                                                                     no_schnet_problem):
    net = demo_network("nequip")
    options = KernelOptions.all_on("fp16", tabulated_filter=True, cuda_graph=True)
    notices = settle_options(options, CPU, net)
    assert options == KernelOptions(tabulated_filter=True)
    assert force_path(net, CPU, options) == "pytorch-tables"
    assert "pair_filter" in notices[0] and "no fused kernels" in notices[0]
    assert notices[1].startswith("tabulated_filter leaves fused_update nothing to run")
    assert "fused_pair_search" in notices[2] and "fell back" in notices[2]
    assert "tensor_product_tables: each block's radial weights" in notices[3]


@interpreter_only
def test_a_deep_potential_keeps_its_descriptor_kernel_tables_and_precision(no_schnet_problem):
    net = demo_network("dp")
    options = KernelOptions.all_on("bf16", tabulated_filter=True, cuda_graph=True)
    notices = settle_options(options, CPU, net)
    assert options == KernelOptions(fused_message_passing=True, tabulated_filter=True,
                                    cuda_graph=True, fused_pair_search=True,
                                    fused_integrator=True, mlp_precision="bf16")
    assert "fused_radial_basis" in notices[0] and force_path(net, CPU, options) == "triton"
    tables = KernelOptions(tabulated_filter=True)
    assert settle_options(tables, CPU, net)[0].startswith("Tabulated filters in PyTorch")
    assert force_path(net, CPU, tables) == "pytorch-tables"


@interpreter_only
def test_painn_keeps_its_message_kernel_and_its_precision(no_schnet_problem):
    net = demo_network("painn")
    options = KernelOptions.all_on("bf16", tabulated_filter=True, cuda_graph=True)
    notices = settle_options(options, CPU, net)
    assert options == KernelOptions(fused_message_passing=True, tabulated_filter=True,
                                    fused_pair_search=True, fused_integrator=True,
                                    cuda_graph=True, mlp_precision="bf16")
    assert notices == [
        "CGPaiNN has no fused kernels for fused_radial_basis, csr_aggregation, fused_update, "
        "pair_filter: switched off, its PyTorch reference path runs."]
    assert force_path(net, CPU, options) == "triton"
    steps_only = KernelOptions(fused_integrator=True, mlp_precision="bf16")
    assert "mlp_precision=bf16" in settle_options(steps_only, CPU, net)[0]
    assert force_path(net, CPU, steps_only) == "reference"


@interpreter_only
@needs_e3nn
def test_nequip_keeps_its_radial_kernel_and_its_precision(no_schnet_problem):
    """``fused_update`` runs its radial MLPs in the packed linear kernel; its steps are
    captured (on the OpenEquivariance backend: `test_captured_steps`); its tables leave
    ``fused_update`` and its precision nothing to run."""
    from workbench.model.force_paths import bring_needed

    net = demo_network("nequip")
    options = KernelOptions.all_on("fp16", cuda_graph=True)
    notices = settle_options(options, CPU, net)
    assert options == KernelOptions(fused_update=True, fused_pair_search=True,
                                    fused_integrator=True, cuda_graph=True,
                                    mlp_precision="fp16")
    assert notices == [
        "CGTensorProduct has no fused kernels for fused_radial_basis, fused_message_passing, "
        "csr_aggregation, pair_filter: switched off, its PyTorch reference path runs."]
    assert force_path(net, CPU, options) == "triton"
    graph_only = KernelOptions(cuda_graph=True)
    assert bring_needed(graph_only, torch.device("cuda"), "nequip") == []
    assert force_path(net, CPU, graph_only) == "reference"
    steps_only = KernelOptions(fused_integrator=True, mlp_precision="fp16")
    assert "mlp_precision=fp16" in settle_options(steps_only, CPU, net)[0]
    tables = KernelOptions(fused_update=True, tabulated_filter=True, mlp_precision="fp16")
    notices = settle_options(tables, CPU, net)
    assert tables == KernelOptions(tabulated_filter=True)
    assert notices == ["tabulated_filter leaves fused_update nothing to run in "
                       "CGTensorProduct: fused_update, mlp_precision=fp16 switched off."]
    assert force_path(net, CPU, tables) == "triton"  # the table read kernel


@interpreter_only
def test_a_painn_its_kernel_cannot_run_falls_back_with_the_kernels_reason():
    from workbench.model.painn import PaiNNConfig

    net = demo_potential(tiny_system(), PaiNNConfig(hidden=24), architecture="painn").network
    options = KernelOptions(fused_message_passing=True)
    notices = settle_options(options, CPU, net)
    assert options == KernelOptions() and "power-of-two hidden width" in notices[0]


@interpreter_only
def test_egnn_keeps_its_edge_kernel_and_its_precision(no_schnet_problem):
    net = demo_network("egnn")
    options = KernelOptions.all_on("fp16", tabulated_filter=True)
    settle_options(options, CPU, net)
    assert options == KernelOptions(fused_message_passing=True, fused_pair_search=True,
                                    fused_integrator=True, mlp_precision="fp16")
    assert force_path(net, CPU, options) == "triton"
    steps_only = KernelOptions(fused_integrator=True, mlp_precision="fp16")
    assert "mlp_precision=fp16" in settle_options(steps_only, CPU, net)[0]
    assert steps_only == KernelOptions(fused_integrator=True)
    assert force_path(net, CPU, steps_only) == "reference"


@interpreter_only
def test_an_egnn_its_kernel_cannot_run_falls_back_with_the_kernels_reason():
    from workbench.model.egnn import EGNNConfig

    sys = tiny_system()
    net = demo_potential(sys, EGNNConfig(edge_width=24), architecture="egnn").network
    options = KernelOptions(fused_message_passing=True)
    notices = settle_options(options, CPU, net)
    assert options == KernelOptions() and "power-of-two edge width" in notices[0]


@interpreter_only
@pytest.mark.filterwarnings("ignore:.*no fused kernels:RuntimeWarning")
def test_a_simulation_reports_what_its_network_runs():
    from workbench.md import LangevinIntegrator, Simulation
    from workbench.model.painn import PaiNNConfig

    sys = tiny_system()  # a narrow PaiNN: the interpreter runs its kernel on the CPU
    for architecture, config in (("painn", PaiNNConfig(hidden=16, num_rbf=16, blocks=1)),
                                 ("egnn", None)):
        potential = demo_potential(sys, config, architecture=architecture)
        sim = Simulation(sys, potential, LangevinIntegrator(0.002, 1.0, 300.0), replicas=1,
                         options=KernelOptions(fused_message_passing=True, fused_update=True,
                                               mlp_precision="fp16"))
        assert sim.applied_options() == KernelOptions(fused_message_passing=True,
                                                      mlp_precision="fp16")


def test_captured_steps_bring_the_message_kernel_on_a_gpu():
    from workbench.model.force_paths import bring_needed

    gpu = torch.device("cuda")  # only its type is read
    for architecture in ("schnet", "egnn", "painn", "dp"):
        options = KernelOptions(cuda_graph=True, fused_radial_basis=architecture == "schnet")
        assert bring_needed(options, gpu, architecture) == ["fused_message_passing"]
        assert options.fused_message_passing and options.cuda_graph
    for options in (KernelOptions(cuda_graph=True, tabulated_filter=True),
                    KernelOptions(cuda_graph=True, fused_message_passing=True),
                    KernelOptions(fused_update=True)):
        before = KernelOptions(**options.to_dict())
        assert bring_needed(options, gpu, "schnet") == [] and options == before
    alone = KernelOptions(cuda_graph=True)
    assert bring_needed(alone, CPU, "schnet") == [] and not alone.fused_message_passing
    assert bring_needed(alone, gpu, None) == []  # prior-only steps capture as they are


def test_painn_tables_bring_its_message_kernel_on_any_device():
    """CGPaiNN's tables are read by its message kernel: ``tabulated_filter`` alone brings
    ``fused_message_passing`` (on a CPU without Triton both then fall back together)."""
    from workbench.model import force_paths

    for device in (CPU, torch.device("cuda")):  # only the type is read
        options = KernelOptions(tabulated_filter=True)
        assert force_paths.bring_needed(options, device, "painn") == ["fused_message_passing"]
        assert options == KernelOptions(fused_message_passing=True, tabulated_filter=True)
        notice = force_paths.brought_notice(["fused_message_passing"], "painn", options)
        assert notice.startswith("tabulated_filter brings fused_message_passing: CGPaiNN")
    for architecture in ("schnet", "dp", "egnn"):  # tables of their own, or none
        options = KernelOptions(tabulated_filter=True)
        assert force_paths.bring_needed(options, CPU, architecture) == []
    graph_only = KernelOptions(cuda_graph=True)
    assert force_paths.bring_needed(graph_only, torch.device("cuda"), "painn") == [
        "fused_message_passing"]
    assert force_paths.brought_notice(["fused_message_passing"], "painn", graph_only) == (
        force_paths.brought_notice(["fused_message_passing"]))  # captured steps brought it


@interpreter_only
def test_settled_painn_tables_run_in_its_message_kernel(no_schnet_problem):
    net = demo_network("painn")
    options = KernelOptions(tabulated_filter=True)
    notices = settle_options(options, CPU, net)
    assert options == KernelOptions(fused_message_passing=True, tabulated_filter=True)
    assert notices == ["tabulated_filter brings fused_message_passing: CGPaiNN runs "
                       "tabulated_filter inside the kernels of fused_message_passing."]
    assert force_path(net, CPU, options) == "triton"


def test_settled_options_say_what_captured_steps_brought(monkeypatch):
    from workbench.model import force_paths

    net = schnet_potential(priors=False).schnet
    monkeypatch.setattr(force_paths, "fused_problem", lambda *a: None)  # as on a GPU
    options = KernelOptions(cuda_graph=True)
    notices = settle_options(options, torch.device("cuda"), net)
    assert options == KernelOptions(cuda_graph=True, fused_message_passing=True)
    assert notices == [force_paths.brought_notice(["fused_message_passing"])]
