"""A/B comparison and export on the real engine (cln025, 2 replicas, a few steps)."""

from pathlib import Path

import pytest
import torch
from helpers import needs_deepmd, needs_e3nn

from widgets import ComparePanel, SimulationController
from widgets.comparison import CompareRunner
from widgets.export_files import kaleido_available
from widgets.panels.export import DEFAULT_FOLDER, ExportPanel
from widgets.snapshot import RunState
from workbench.model.options import KernelOptions
from workbench.runner import RunSettings

SETTINGS = RunSettings(replicas=2, steps=2, save_interval=1)


def test_race_of_identical_configurations_agrees_exactly():
    runner = CompareRunner(SETTINGS, KernelOptions(), KernelOptions(), steps=2, chunk_steps=1)
    runner.start()
    assert runner.wait(120) is RunState.STOPPED
    race = runner.snapshot()
    assert race.error is None
    assert race.deviation_start.max_abs == 0.0 and race.deviation_end.max_abs == 0.0
    assert race.deviation_start.max_force > 0
    for side in (race.a, race.b):
        assert list(side.timestep_mol) == [2.0, 4.0]
        assert side.q.shape == (4,) and side.mean_rate > 0
    assert race.speedup > 0


def test_a_broken_display_does_not_stop_the_race():
    runner = CompareRunner(SETTINGS, KernelOptions(), KernelOptions(), steps=2, chunk_steps=1)

    def broken(_runner, _forced):
        raise ValueError("plot gone")

    runner.add_listener(broken)
    runner.start()
    assert runner.wait(120) is RunState.STOPPED
    race = runner.snapshot()
    assert race.error is None and list(race.b.timestep_mol) == [2.0, 4.0]
    assert race.display_errors and race.display_errors[-1] == "ValueError: plot gone"
    assert len(race.display_errors) <= 5  # only the latest are kept
    panel = ComparePanel(settings=SETTINGS, steps=1)
    assert "display: ValueError: plot gone" in panel._summary(race)


def test_race_runs_without_the_temperature_ladder(ladder_settings):
    runner = CompareRunner(
        ladder_settings, KernelOptions(), KernelOptions(), steps=2, chunk_steps=1
    )
    runner.start()
    assert runner.wait(60) is RunState.STOPPED
    race = runner.snapshot()
    assert race.error is None and race.deviation_end.max_abs == 0.0
    assert not any("tempering" in message for message in race.messages)
    for side in runner._sides:
        assert side.sim.integrator.temperature.tolist() == [ladder_settings.temperature]


def test_compare_panel_reports_cpu_fallback_of_b(monkeypatch):
    import kernels._triton

    monkeypatch.setattr(kernels._triton, "INTERPRET", False)  # a CPU as users have it
    panel = ComparePanel(settings=SETTINGS, steps=1)
    runner = panel.run()
    runner.wait(120)
    panel.refresh()
    race = runner.snapshot()
    assert race.b.label == "tabulated_filter"  # the one with a PyTorch path
    assert race.b.fell_back and not race.a.fell_back
    assert race.speedup is None and race.fallback_note.startswith("B asked for")
    assert "B: Fused kernels" in panel.summary.value
    assert "no speedup to show" in panel.summary.value
    assert "speedup B/A" not in panel.summary.value
    assert len(panel.race.data[1].x) == 1


def test_export_writes_trajectory_metrics_and_figures(tmp_path):
    pytest.importorskip("mdtraj")
    controller = SimulationController(SETTINGS)
    panel = ExportPanel(
        controller, figures_source=lambda: {"q": ComparePanel().q_histogram}, folder=str(tmp_path)
    )
    controller.start()
    controller.wait(120)
    trajectory = panel.export_trajectory()
    assert [p.name for p in trajectory] == ["topology.pdb", "replica_000.dcd", "replica_001.dcd"]
    before = trajectory[1].read_bytes()
    panel.format.value = "xtc"
    panel.trajectory_button.click()  # the folder holds the DCD export: refused, kept
    assert "FileExistsError" in panel.result.value and "replace existing" in panel.result.value
    assert trajectory[1].read_bytes() == before
    panel.overwrite.value = True
    assert panel.export_trajectory()[1].suffix == ".xtc"
    panel.overwrite.value = False
    metrics, throughput = panel.export_metrics()
    assert len(metrics.read_text().splitlines()) == 1 + 3 * 2
    assert throughput.read_text().startswith("step,wall_s")
    figures = panel.export_figures()
    assert figures[0].name == "q.html" and figures[0].stat().st_size > 0
    if kaleido_available() and Path("/usr/bin/chromium").exists():
        assert [p.name for p in figures] == ["q.html", "q.png"]  # the lab extras export PNG
    else:
        assert "kaleido" in panel.result.value or "Chrom" in panel.result.value


def test_exports_go_outside_the_repository_by_default():
    folder = Path(ExportPanel().folder.value)
    repository = Path(__file__).resolve().parents[2]
    assert folder == DEFAULT_FOLDER and repository not in folder.parents


def test_export_without_a_run_says_so():
    panel = ExportPanel()
    panel.metrics_button.click()
    assert "start a simulation first" in panel.result.value


def test_a_race_of_two_architectures_gives_each_side_its_network():
    panel = ComparePanel(settings=RunSettings(replicas=2, steps=2, save_interval=1,
                                              model="demo"), steps=2)
    panel.arch_b.value = "egnn"
    panel.preset_b.value = panel.preset_a.value  # both on the reference path
    runner = panel.run()
    assert runner.wait(120) is RunState.STOPPED
    panel.refresh()
    race = runner.snapshot()
    assert race.error is None and (race.a.network, race.b.network) == ("schnet", "egnn")
    assert runner._sides[1].sim.potential.architecture == "egnn"
    assert race.deviation_start is None and race.deviation_end is None
    assert any("different networks" in message for message in race.messages)
    assert race.speedup > 0 and "A: schnet · baseline" in panel.race.data[0].name
    assert "B: egnn · " in panel.summary.value
    with pytest.raises(ValueError, match="architecture must be one of"):
        CompareRunner(SETTINGS, KernelOptions(), KernelOptions(), steps=1,
                      architectures=("schnet", "transformer"))


def _demo_compare_panel() -> ComparePanel:
    return ComparePanel(settings=RunSettings(replicas=2, steps=2, save_interval=1,
                                             model="demo", device="cpu"), steps=2)


def _race_on_one_potential(panel: ComparePanel, backends: tuple[str, str]):
    """Run the panel's backend race to its end; its snapshot, after checking that it ran
    without error, both sides on one potential (so their forces are compared)."""
    runner = panel.run()
    assert runner.backends == backends
    assert runner.wait(120) is RunState.STOPPED
    panel.refresh()
    race = runner.snapshot()
    assert race.error is None
    assert runner._sides[0].sim.potential is runner._sides[1].sim.potential
    return race


@needs_e3nn
def test_the_compare_panel_races_two_backends_of_one_nequip_network():
    panel = _demo_compare_panel()
    assert panel.backend_a.layout.display == "none"  # schnet: no backends
    panel.race_backends("e3nn", "openequivariance")
    assert (panel.arch_a.value, panel.arch_b.value) == ("nequip", "nequip")
    assert panel.preset_b.value == panel.preset_a.value and panel.backend_b.layout.display is None
    # one network, one potential: the forces of both backends are compared
    race = _race_on_one_potential(panel, ("e3nn", "openequivariance"))
    assert race.deviation_start is not None and race.deviation_start.max_abs == 0.0
    # no CUDA device here: B is refused with its reason, runs e3nn, and no speedup is claimed
    assert (race.a.backend, race.b.backend, race.b.requested_backend) == (
        "e3nn", "e3nn", "openequivariance")
    [refusal] = [m for m in race.messages if "refused" in m]
    assert refusal.startswith("B: Tensor-product backend 'openequivariance' refused (")
    assert "CUDA device" in refusal
    assert race.speedup is None
    assert race.fallback_note == ("B asked for nequip/openequivariance · baseline but ran "
                                  "nequip/e3nn · baseline: no speedup to show")
    assert "A: nequip/e3nn · baseline" in panel.race.data[0].name
    assert "no speedup to show" in panel.summary.value


@needs_deepmd
def test_the_compare_panel_races_the_engine_against_deepmd_kit_on_one_deep_potential():
    panel = _demo_compare_panel()
    panel.race_backends("engine", "deepmd")
    assert (panel.arch_a.value, panel.arch_b.value) == ("dp", "dp")
    assert panel.backend_b.options == ("engine", "deepmd")
    assert panel.backend_b.layout.display is None
    # one network, one potential: deepmd-kit's forces against the engine's, on identical
    # coordinates, at the start and at the end
    race = _race_on_one_potential(panel, ("engine", "deepmd"))
    for deviation in (race.deviation_start, race.deviation_end):
        assert deviation.max_force > 0 and deviation.relative < 1e-4
    assert (race.a.network_label, race.b.network_label) == ("dp/engine", "dp/deepmd")
    assert race.speedup is not None  # both ran what they asked for
    assert "B: dp/deepmd · baseline" in panel.race.data[1].name
    assert "largest force deviation A↔B (start)" in panel.summary.value
    with pytest.raises(ValueError, match="'e3nn' and 'deepmd' are backends of two networks"):
        panel.race_backends("e3nn", "deepmd")


@needs_deepmd
def test_a_race_of_deepmd_kit_against_the_engine_compares_the_networks_forces():
    """The demo network's forces are small beside the priors': scaled up, the deviation
    the race shows is deepmd-kit's against the engine's on the network itself."""
    from workbench.model.architectures import output_parameters
    from workbench.runner import prepare_run

    def prepare(settings):
        prepared = prepare_run(settings)
        with torch.no_grad():  # the energy is linear and homogeneous in these
            for tensor in output_parameters(prepared.simulation.potential.network):
                tensor.mul_(1e5)
        return prepared

    settings = RunSettings(replicas=2, steps=2, save_interval=1, model="demo", device="cpu",
                           architecture="dp")
    baseline = KernelOptions.baseline()
    runner = CompareRunner(settings, baseline, baseline, steps=2, prepare=prepare,
                           backends=("engine", "deepmd"))
    runner.start()
    assert runner.wait(120) is RunState.STOPPED
    deviation = runner.snapshot().deviation_start
    sim = runner._sides[0].sim
    pos = sim.positions.clone().requires_grad_(True)
    network_energy = sim.potential.energy_terms(pos, sim.graph)["dp"].sum()
    (network_grad,) = torch.autograd.grad(network_energy, pos)
    assert float(network_grad.abs().max()) > 0.5 * deviation.max_force  # the network's
    assert deviation.max_abs > 0 and deviation.relative < 1e-4


def test_a_backend_race_alternates_the_shared_networks_backend(monkeypatch):
    pytest.importorskip("e3nn")
    from workbench.model.tensor_product import CGTensorProduct

    monkeypatch.setattr("workbench.runner.backend_problem", lambda backend, device: None)
    seen = []

    def backend_for(network, device):  # what each force evaluation would run
        seen.append(network.backend)
        return "e3nn"

    monkeypatch.setattr(CGTensorProduct, "backend_for", backend_for)
    settings = RunSettings(replicas=2, steps=2, save_interval=1, device="cpu",
                           architecture="nequip")
    runner = CompareRunner(settings, KernelOptions(), KernelOptions(), steps=2, chunk_steps=1,
                           backends=("e3nn", "cuequivariance"))
    runner.start()
    assert runner.wait(120) is RunState.STOPPED
    race = runner.snapshot()
    assert race.error is None and race.speedup is not None  # both ran what they asked for
    assert (race.a.network_label, race.b.network_label) == ("nequip/e3nn",
                                                            "nequip/cuequivariance")
    # after both simulations' first forces: the forces of A and B at the start, the two
    # chunks of each alternating A, B, the forces at the end
    assert seen[2:] == ["e3nn", "cuequivariance"] * 4
    with pytest.raises(ValueError, match="B: 'cuequivariance' is a backend of the nequip "
                       "network; B's is egnn"):
        CompareRunner(settings, KernelOptions(), KernelOptions(), steps=1,
                      architectures=("nequip", "egnn"), backends=("e3nn", "cuequivariance"))
