"""Kernel options: the one preset table, configuration names, and the front ends that read
them (the command line and the workbench must offer the same configurations)."""

import pytest

from workbench.model.options import ALL_FUSED, FASTEST, PRESETS, KernelOptions


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_parses_to_itself_in_every_precision(name):
    assert KernelOptions.parse(name) == KernelOptions.preset(name)
    for precision in ("fp16", "bf16"):
        options = KernelOptions.parse(f"{name}-{precision}")
        assert options == KernelOptions.preset(name, precision)
        assert options.mlp_precision == precision


def test_presets_switch_on_what_they_name():
    assert KernelOptions.preset("baseline").is_baseline
    assert KernelOptions.preset("all") == KernelOptions.all_on()
    assert KernelOptions.preset("all+tables+graph") == KernelOptions.all_on(
        tabulated_filter=True, cuda_graph=True)
    assert set(KernelOptions.preset("all").enabled()) == set(ALL_FUSED)
    assert KernelOptions.preset(FASTEST) == KernelOptions(
        tabulated_filter=True, cuda_graph=True, fused_pair_search=True, fused_integrator=True,
        fused_update=True)


def test_techniques_and_presets_join_with_plus_or_comma():
    assert KernelOptions.parse("tabulated_filter+cuda-graph-fp16") == KernelOptions(
        tabulated_filter=True, cuda_graph=True, mlp_precision="fp16")
    assert KernelOptions.parse("tabulated_filter, cuda_graph") == KernelOptions(
        tabulated_filter=True, cuda_graph=True)
    assert KernelOptions.parse("all+tabulated_filter") == KernelOptions(
        **dict.fromkeys(ALL_FUSED, True), tabulated_filter=True)


@pytest.mark.parametrize("spec", ["warp_drive", "all+warp_drive", "", "tables", "all-fp64"])
def test_unknown_names_are_refused_with_the_valid_ones_listed(spec):
    with pytest.raises(ValueError, match="unknown kernel technique") as error:
        KernelOptions.parse(spec)
    assert all(name in str(error.value) for name in (*PRESETS, *KernelOptions.techniques()))


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match="tables\\+graph"):
        KernelOptions.preset("fastest")


def test_the_workbench_and_the_command_line_offer_the_same_configurations():
    """The workbench's presets are names of the one table, and its fastest is the command
    line's ``--kernels tables+graph``."""
    from widgets.comparison import PRESETS as WORKBENCH_PRESETS
    from workbench.cli.run import kernel_options

    for label, spec in WORKBENCH_PRESETS.items():
        assert KernelOptions.parse(spec) == kernel_options(spec, None), label
    fastest = [spec for label, spec in WORKBENCH_PRESETS.items() if label.startswith("fastest")]
    assert fastest == [FASTEST] == ["tables+graph"]
    assert kernel_options("tables+graph", None) == KernelOptions.preset(FASTEST)
    assert kernel_options("tables+graph", "bf16") == KernelOptions.preset(FASTEST, "bf16")
