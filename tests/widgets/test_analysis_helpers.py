import numpy as np
import pytest
import torch

from widgets.adjacency_frames import ADDED, KEPT, REMOVED, diff_codes, edge_counts, frame_adjacency
from widgets.kernel_switches import absent_techniques_note, options_label, usable_options
from widgets.modes import LAPTOP_RATE, default_settings, run_mode
from widgets.panels.live_plots import replica_band
from workbench.model.options import KernelOptions
from workbench.system import build_system


def test_replica_band_min_max_and_std():
    values = np.array([[1.0, 3.0], [2.0, 6.0]])
    mean, low, high = replica_band(values)
    assert np.allclose(mean, [2, 4]) and np.allclose(low, [1, 2]) and np.allclose(high, [3, 6])
    mean, low, high = replica_band(values, "±std")
    assert np.allclose(high - mean, [1, 2])
    assert replica_band(np.empty((0, 3)))[0].shape == (0,)
    with pytest.raises(ValueError):
        replica_band(values, "iqr")


def test_adjacency_of_frames_and_their_difference():
    system = build_system("cln025")
    native = system.native_positions.numpy()
    stretched = native * 1.5
    frames = np.stack([native, stretched])
    bead = frame_adjacency(frames, system, 10.0)
    residue = frame_adjacency(frames, system, 10.0, level="residue")
    assert bead.shape == (2, system.n_beads, system.n_beads)
    assert residue.shape == (2, system.n_residues, system.n_residues)
    counts = edge_counts(bead)
    assert counts[1] < counts[0]
    codes = diff_codes(bead[0], bead[1])
    assert (codes == REMOVED).sum() == counts[0] - counts[1] and (codes == ADDED).sum() == 0
    assert (codes == KEPT).sum() == counts[1]


def test_switches_fall_back_off_the_gpu(monkeypatch):
    import kernels._triton

    monkeypatch.setattr(kernels._triton, "INTERPRET", False)  # a CPU as users have it
    cpu = torch.device("cpu")
    assert usable_options(KernelOptions(), cpu) == (KernelOptions(), None)
    applied, message = usable_options(KernelOptions(fused_update=True), cpu)
    assert applied.is_baseline and "fused_update" in message and "CUDA" in message
    assert options_label(KernelOptions.all_on("fp16")).endswith("mlp_fp16")
    tables = KernelOptions(tabulated_filter=True)  # has a PyTorch path: kept
    assert usable_options(tables, cpu) == (tables, None)
    applied, message = usable_options(KernelOptions.all_on(tabulated_filter=True), cpu)
    assert applied == tables and "only tabulated_filter runs, in PyTorch" in message


def test_the_run_mode_follows_the_environment(monkeypatch):
    monkeypatch.delenv("WORKBENCH_MODE", raising=False)
    monkeypatch.setenv("WORKBENCH_SHORT", "1")
    assert run_mode().name == "demo" and default_settings().replicas <= 4
    monkeypatch.delenv("WORKBENCH_SHORT")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    laptop = run_mode()
    assert laptop.name == "laptop" and laptop.seconds == 120
    settings = default_settings()
    assert settings.protein == "cln025" and settings.replicas == 8
    assert settings.denatured_fraction == 0.5 and settings.temperature == 340.0
    assert settings.options == KernelOptions(tabulated_filter=True)  # the CPU's fast path
    assert settings.steps * settings.replicas == LAPTOP_RATE * laptop.seconds  # sized by rate
    monkeypatch.setenv("WORKBENCH_MODE", "full")
    assert run_mode().name == "full" and default_settings().replicas == 64
    monkeypatch.setenv("WORKBENCH_MODE", "fast")
    with pytest.raises(ValueError, match="demo, laptop, full"):
        run_mode()
    first, second = default_settings("demo"), default_settings("demo")
    assert first.neighbors is not second.neighbors


def test_switches_follow_the_network_architecture(monkeypatch):
    import kernels._triton

    gpu = torch.device("cuda")  # only its type is read
    asked = KernelOptions.all_on("fp16", tabulated_filter=True)
    for architecture, name in (("egnn", "CGEGNN"), ("painn", "CGPaiNN")):
        applied, message = usable_options(asked, gpu, architecture)
        assert applied == KernelOptions(fused_message_passing=True, fused_pair_search=True,
                                        fused_integrator=True, mlp_precision="fp16",
                                        tabulated_filter=architecture == "painn")
        assert message.startswith(f"{name} has no fused kernels for fused_radial_basis")
        assert "mlp_precision" not in message  # the message kernel reads it
    applied, message = usable_options(KernelOptions(tabulated_filter=True), gpu, "painn")
    assert applied == KernelOptions(fused_message_passing=True, tabulated_filter=True)
    assert message.startswith("tabulated_filter brings fused_message_passing")
    assert usable_options(asked, gpu, "schnet") == (asked, None)
    applied, message = usable_options(KernelOptions(cuda_graph=True), gpu, "painn")
    assert applied == KernelOptions(cuda_graph=True, fused_message_passing=True)
    assert message.startswith("cuda_graph brings fused_message_passing")
    monkeypatch.setattr(kernels._triton, "INTERPRET", False)  # a CPU as users have it
    applied, message = usable_options(KernelOptions(tabulated_filter=True),
                                      torch.device("cpu"), "egnn")
    assert applied.is_baseline and "tabulated_filter" in message  # SchNet's PyTorch path only
    assert absent_techniques_note("schnet") == ""
