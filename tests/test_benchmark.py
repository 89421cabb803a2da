"""Benchmark records and tables (a tiny CPU case; timings themselves are not tested), and
the names of benchmark configurations."""

import pytest
from helpers import interpreter_only, needs_e3nn

from workbench.benchmark import (
    BenchCase,
    bench_cases,
    markdown_table,
    network_label,
    requested_backend,
    run_case,
    write_results,
)
from workbench.model.options import KernelOptions
from workbench.settings_error import SettingsError


def test_record_and_table(tmp_path):
    case = BenchCase("cln025", 2, "baseline", KernelOptions.baseline())
    record = run_case(case, device="cpu", steps=2, warmup=1, repeats=2)
    assert record["protein"] == "cln025" and record["replicas"] == 2
    assert len(record["windows"]) == 2 and record["timestep_mol_per_s"] > 0
    assert record["options"]["fused_message_passing"] is False
    assert record["model"] == "demo"  # the protocol's near-native potential, not a shipped one
    assert 100 < record["edges_per_replica"] < 49 * 48
    assert record["peak_memory_gb"] is None and record["peak_memory_setup_gb"] is None
    assert "launches" not in record
    table = markdown_table([record])
    assert record["architecture"] == "schnet" and record["force_path"] == "reference"
    assert "| cln025 | 49 | 2 | schnet | baseline |" in table and table.rstrip().endswith("| – |")
    json_path, md_path = write_results([record], tmp_path / "bench", "workbench bench")
    assert json_path.is_file() and "workbench bench" in md_path.read_text()


def test_bench_cases_cross_proteins_replicas_and_configurations():
    cases = bench_cases(["cln025", "2jof"], [4, 8], ["baseline", "tables+graph-fp16"], None)
    assert [(c.protein, c.replicas, c.label) for c in cases[:3]] == [
        ("cln025", 4, "baseline"), ("cln025", 4, "tables+graph-fp16"), ("cln025", 8, "baseline")]
    assert len(cases) == 8 and all(c.model is None for c in cases)
    assert cases[1].options == KernelOptions.parse("tables+graph-fp16")
    with pytest.raises(ValueError, match="unknown kernel technique"):
        bench_cases(["cln025"], [4], ["tabulated_filter+warp_drive"])


def test_bench_cases_run_every_configuration_for_each_architecture():
    cases = bench_cases(["cln025"], [4], ["baseline", "all"], architectures=("schnet", "egnn"))
    assert [(c.architecture, c.label) for c in cases] == [
        ("schnet", "baseline"), ("schnet", "all"), ("egnn", "baseline"), ("egnn", "all")]
    assert cases[1].options == cases[3].options and cases[1].options is not cases[3].options
    with pytest.raises(SettingsError, match="architecture must be registered"):
        bench_cases(["cln025"], [4], ["baseline"], architectures=("schnet", "transformer"))


def test_bench_cases_run_each_backend_of_nequip_only():
    cases = bench_cases(["cln025"], [4], ["baseline"], architectures=("schnet", "nequip"),
                        tp_backends=("e3nn", "openequivariance", "cuequivariance"))
    assert [c.network for c in cases] == [
        "schnet", "nequip/e3nn", "nequip/openequivariance", "nequip/cuequivariance"]
    assert cases[0].tp_backend is None
    with pytest.raises(SettingsError, match="tp_backend sets the convolution backend of the "
                       "nequip network only; add nequip to --arch"):
        bench_cases(["cln025"], [4], ["baseline"], architectures=("schnet",),
                    tp_backends=("openequivariance",))
    with pytest.raises(SettingsError, match="tp_backend must be a comma list of e3nn"):
        bench_cases(["cln025"], [4], ["baseline"], architectures=("nequip",),
                    tp_backends=("flash",))


def test_bench_cases_run_each_evaluator_of_dp_only():
    cases = bench_cases(["cln025"], [4], ["baseline"], architectures=("schnet", "dp", "nequip"),
                        tp_backends=("e3nn",), dp_backends=("engine", "deepmd"))
    assert [c.network for c in cases] == ["schnet", "dp", "dp/deepmd", "nequip/e3nn"]
    assert [(c.tp_backend, c.dp_backend) for c in cases] == [
        (None, None), (None, "engine"), (None, "deepmd"), ("e3nn", None)]
    assert [c.network for c in bench_cases(["cln025"], [4], ["baseline"],
                                           architectures=("dp",))] == ["dp"]
    with pytest.raises(SettingsError, match="dp_backend sets the evaluator of the dp network "
                       r"only; add dp to --arch \(got schnet, nequip\)"):
        bench_cases(["cln025"], [4], ["baseline"], architectures=("schnet", "nequip"),
                    dp_backends=("deepmd",))
    with pytest.raises(SettingsError, match=r"dp_backend must be a comma list of engine, "
                       r"deepmd, got \['tf'\]"):
        bench_cases(["cln025"], [4], ["baseline"], architectures=("dp",),
                    dp_backends=("engine", "tf"))


def test_labels_name_the_backend_that_ran_and_the_one_asked_for():
    def dp(ran, asked):
        return {"architecture": "dp", "dp_backend": ran, "dp_backend_requested": asked}

    assert network_label(dp("deepmd", "deepmd")) == "dp/deepmd"
    assert network_label(dp("engine", "engine")) == "dp"  # the engine's own path
    assert network_label(dp("engine", "deepmd")) == "dp (asked deepmd)"
    nequip = {"architecture": "nequip", "tp_backend": "e3nn",
              "tp_backend_requested": "openequivariance"}
    assert network_label(nequip) == "nequip/e3nn (asked openequivariance)"
    assert requested_backend(nequip) == "openequivariance"
    # records written before the networks had backends ran the default
    assert network_label({"architecture": "dp"}) == "dp"
    assert requested_backend({"architecture": "dp"}) == "engine"
    assert requested_backend({"architecture": "schnet"}) is None


def test_a_dp_record_says_why_deepmd_kit_did_not_run(monkeypatch):
    from workbench.model import deepmd_interop

    def missing():
        raise ImportError("deepmd-kit's PyTorch backend does not import (no deepmd)")

    monkeypatch.setattr(deepmd_interop, "_deepmd_pt", missing)
    case = BenchCase("cln025", 2, "baseline", KernelOptions.baseline(), architecture="dp",
                     dp_backend="deepmd")
    record = run_case(case, device="cpu", steps=1, warmup=0, repeats=1)
    assert (record["dp_backend"], record["dp_backend_requested"]) == ("engine", "deepmd")
    assert "Deep Potential backend 'deepmd' unavailable (deepmd-kit's PyTorch backend does " \
           "not import" in record["dp_backend_notice"]
    assert "| cln025 | 49 | 2 | dp (asked deepmd) | baseline |" in markdown_table([record])


@needs_e3nn
def test_a_nequip_record_names_the_backend_that_ran_and_the_one_asked_for():
    case = BenchCase("cln025", 2, "baseline", KernelOptions.baseline(), architecture="nequip",
                     tp_backend="openequivariance")
    record = run_case(case, device="cpu", steps=1, warmup=0, repeats=1)
    # no CUDA device here: the e3nn reference path ran, and the record says so
    assert record["tp_backend"] == "e3nn"
    assert record["tp_backend_requested"] == "openequivariance"
    assert network_label(record) == "nequip/e3nn (asked openequivariance)"
    assert ("| cln025 | 49 | 2 | nequip/e3nn (asked openequivariance) | baseline |"
            in markdown_table([record]))


@pytest.mark.parametrize("architecture",
                         ["painn", "egnn", "dp", pytest.param("nequip", marks=needs_e3nn)])
def test_a_record_names_its_network_and_claims_no_fused_path_it_lacks(architecture,
                                                                      monkeypatch):
    import kernels._triton

    monkeypatch.setattr(kernels._triton, "INTERPRET", False)  # a CPU without Triton
    case = BenchCase("cln025", 2, "all", KernelOptions.parse("all"), architecture=architecture)
    record = run_case(case, device="cpu", steps=1, warmup=0, repeats=1)
    assert record["architecture"] == architecture and record["force_path"] == "reference"
    assert record["options"] == KernelOptions().to_dict()  # nothing fused ran
    network = "nequip/e3nn" if architecture == "nequip" else architecture
    assert f"| cln025 | 49 | 2 | {network} | all |" in markdown_table([record])


@interpreter_only
# CGPaiNN keeps the same techniques (tests/model/test_force_paths.py); its demo network under
# the interpreter would add 45 s here
@pytest.mark.parametrize("architecture", ["egnn"])
def test_where_triton_runs_a_record_keeps_what_the_network_implements(architecture):
    case = BenchCase("cln025", 1, "all", KernelOptions.parse("all"), architecture=architecture)
    record = run_case(case, device="cpu", steps=1, warmup=0, repeats=1)
    assert record["force_path"] == "triton"
    kept = ("fused_message_passing", "fused_pair_search", "fused_integrator")
    assert record["options"] == KernelOptions(**dict.fromkeys(kept, True)).to_dict()


def test_records_without_an_architecture_are_schnet():
    assert network_label({}) == "schnet" and network_label({"architecture": None}) == "–"


def test_demo_model_is_chosen_over_a_shipped_one(monkeypatch):
    from workbench import runner
    from workbench.runner import DEMO_MODEL, choose_potential
    from workbench.system import build_system

    system = build_system("cln025")
    shipped_file = runner.shipped_model_file("cln025")
    monkeypatch.setattr(runner, "shipped_model_path", lambda *_: shipped_file)
    shipped, notice = choose_potential(system, None)
    assert "validated against its teacher" in notice and shipped.metadata["trained"]
    demo, notice = choose_potential(system, DEMO_MODEL)
    assert "Untrained demo model" in notice and not demo.metadata.get("trained")


@pytest.mark.gpu
def test_setup_peak_includes_the_graph_capture():
    case = BenchCase("cln025", 4, "tables+graph", KernelOptions.parse("tables+graph"))
    record = run_case(case, device="cuda", steps=4, warmup=3, repeats=1)
    assert 0 < record["peak_memory_gb"] <= record["peak_memory_setup_gb"]


def test_a_cpu_record_says_which_path_ran(monkeypatch):
    import kernels._triton

    monkeypatch.setattr(kernels._triton, "INTERPRET", False)  # a CPU without Triton
    case = BenchCase("cln025", 2, "tabulated_filter", KernelOptions.all_on(tabulated_filter=True))
    record = run_case(case, device="cpu", steps=2, warmup=1, repeats=1)
    assert record["force_path"] == "pytorch-tables" and record["threads"] >= 1
    assert record["options"] == KernelOptions(tabulated_filter=True).to_dict()  # what ran
    assert "(PyTorch tables, " in markdown_table([record])
