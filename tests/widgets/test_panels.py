"""Panel logic without a browser: buttons, toggles, plots, errors shown."""

import datetime
import time
from importlib import resources

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")
pytest.importorskip("nglview")

from widgets import (  # noqa: E402
    AdjacencyPanel,
    KernelsPanel,
    LaunchPanel,
    LivePlots,
    SimulationController,
    Structure3D,
    TemperingPanel,
    Workbench,
)
from widgets.snapshot import RunState  # noqa: E402
from workbench.model.options import KernelOptions  # noqa: E402
from workbench.runner import RunSettings  # noqa: E402
from workbench.system import build_system  # noqa: E402


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def cln025():
    return build_system("cln025")


def test_buttons_follow_the_controller(fake_run):
    prepare, sim = fake_run(step_seconds=0.005)
    panel = LaunchPanel(RunSettings(replicas=2, steps=10), until_stopped=True, prepare=prepare)
    assert not panel.start_button.disabled and panel.stop_button.disabled
    controller = panel.start()
    wait_for(lambda: sim.step_count > 2)
    panel.refresh()
    assert panel.start_button.disabled and panel.start_button.description == "Running…"
    panel.pause_button.click()
    panel.refresh()
    assert controller.state is RunState.PAUSED
    assert not panel.resume_button.disabled and panel.pause_button.disabled
    panel.resume_button.click()
    panel.stop_button.click()
    controller.wait(5)
    panel.refresh()
    assert not panel.start_button.disabled and panel.start_button.description == "Start new run"
    assert "fake engine" in panel.status.value


def test_engine_error_is_shown_in_the_launch_panel(fake_run):
    prepare, _ = fake_run(fail_at=3)
    panel = LaunchPanel(RunSettings(replicas=2, steps=10), prepare=prepare)
    panel.start().wait(5)
    panel.refresh()
    assert "RuntimeError: engine exploded" in panel.status.value
    assert "error" in panel.status.value


def test_invalid_settings_are_refused_with_a_message(fake_run):
    prepare, _ = fake_run()
    panel = LaunchPanel(RunSettings(replicas=2, steps=10), prepare=prepare)
    panel.timestep.value = 0.01
    panel.save_interval.value = 1
    panel.seed.value = 3
    panel.denatured.value = 0.5
    settings = panel.settings()
    assert (settings.timestep_fs, settings.save_interval, settings.seed) == (0.01, 1, 3)
    assert settings.denatured_fraction == 0.5
    panel.denatured.value = 1.5  # the field keeps to [0, 1]
    assert panel.settings().denatured_fraction == 1.0
    panel.initial.friction = -1.0
    assert panel.start() is None
    assert "friction" in panel.status.value


def test_temperature_ladder_is_off_by_default_and_validated(fake_run):
    prepare, _ = fake_run()
    panel = LaunchPanel(RunSettings(replicas=4, steps=10, exchange_every=5), prepare=prepare)
    assert not panel.ladder.value and panel.settings().ladder is None
    assert panel.t_min.disabled and panel.levels.disabled and not panel.temperature.disabled
    panel.ladder.value = True
    assert not panel.t_min.disabled and panel.temperature.disabled
    panel.t_min.value, panel.t_max.value, panel.levels.value = 310.0, 420.0, 2
    settings = panel.settings()
    assert (settings.ladder, settings.exchange_every) == ((310.0, 420.0, 2), 5)
    panel.replicas.value = 3
    assert panel.start() is None
    assert "replicas 3 is not a multiple of the 2 ladder levels" in panel.status.value
    assert (panel.label("timestep_fs"), panel.label("first_replica")) == ("time step (fs)",
                                                                         "first_replica")


def _upload(panel, name, content):
    panel.upload.value = (
        {
            "name": name,
            "type": "",
            "size": len(content),
            "content": memoryview(content),
            "last_modified": datetime.datetime.now(datetime.timezone.utc),
        },
    )


def test_bad_pdb_upload_shows_the_error_and_a_good_one_is_selectable():
    panel = LaunchPanel(RunSettings(replicas=1, steps=1))
    _upload(panel, "broken.pdb", b"garbage")
    assert "broken.pdb" in panel.status.value and "color:#b00020" in panel.status.value
    pdb = (resources.files("workbench.system") / "data" / "2jof.pdb").read_bytes()
    _upload(panel, "trp.pdb", pdb)
    assert panel.protein.value.endswith("trp.pdb")
    assert f"{build_system('2jof').n_residues} residues" in panel.status.value


def test_kernel_toggles_reach_the_running_simulation(fake_run, gpu_like):
    prepare, sim = fake_run(step_seconds=0.005)
    controller = SimulationController(
        RunSettings(replicas=2, steps=10), until_stopped=True, prepare=prepare, chunk_seconds=0.02
    )
    panel = KernelsPanel(controller)
    controller.start()
    wait_for(lambda: sim.step_count > 2)
    panel.toggles["csr_aggregation"].value = True
    wait_for(lambda: sim.options_seen[-1] == KernelOptions(csr_aggregation=True))
    panel.precision.value = "fp16"
    wait_for(lambda: sim.options_seen[-1].mlp_precision == "fp16")
    panel.all_off.click()
    wait_for(lambda: sim.options_seen[-1].is_baseline)
    controller.stop()
    controller.wait(5)
    panel.refresh()
    assert "in use: <code>baseline</code>" in panel.status.value


def test_kernel_fallback_message_is_shown_in_the_panel(fake_run):
    prepare, sim = fake_run(step_seconds=0.005)
    controller = SimulationController(
        RunSettings(replicas=2, steps=10), until_stopped=True, prepare=prepare, chunk_seconds=0.02
    )
    panel = KernelsPanel(controller)
    controller.start()
    wait_for(lambda: sim.step_count > 2)
    panel.all_on.click()
    wait_for(lambda: controller.snapshot().kernel_messages)
    controller.stop()
    controller.wait(5)
    panel.refresh()
    assert "need a CUDA GPU" in panel.status.value


def test_live_plots_show_data_band_and_switch_markers(fake_run, gpu_like):
    prepare, sim = fake_run(replicas=3, step_seconds=0.002)
    controller = SimulationController(
        RunSettings(replicas=3, steps=60, save_interval=5), prepare=prepare, chunk_seconds=0.01
    )
    plots = LivePlots(controller)
    controller.start()
    wait_for(lambda: sim.step_count > 20)
    controller.set_options(KernelOptions.all_on())
    controller.wait(10)
    plots.replica.value = 2
    plots.refresh()
    throughput = plots.throughput_figure
    assert len(throughput.data[0].x) >= 3 and np.all(np.asarray(throughput.data[0].y) > 0)
    assert len(throughput.layout.shapes) == 1
    assert "fused_radial_basis" in throughput.layout.annotations[0].text
    rmsd_low, rmsd_high, rmsd_mean, rmsd_one = plots.folding_figure.data[:4]
    assert np.all(np.asarray(rmsd_low.y) <= np.asarray(rmsd_mean.y))
    assert np.all(np.asarray(rmsd_mean.y) <= np.asarray(rmsd_high.y))
    assert np.allclose(rmsd_one.y, rmsd_high.y)  # replica 2 has the largest fake RMSD
    assert "CPU run" in plots.memory_figure.layout.title.text
    assert not plots.error_html.value


def test_adjacency_and_structure_follow_a_real_run(cln025):
    controller = SimulationController(
        RunSettings(replicas=2, steps=2, save_interval=1, temperature=600.0)
    )
    adjacency = AdjacencyPanel(controller)
    structure = Structure3D(controller, system=cln025)
    controller.start()
    assert controller.wait(120) is RunState.STOPPED
    adjacency.refresh()
    assert "directed edges" in adjacency.info.value
    assert adjacency.frame.max == 2
    assert len(adjacency.counts.data[0].y) == 3
    adjacency.diff.value = True
    assert adjacency.heatmap.layout.title.text.startswith("Adjacency changes")
    adjacency.level.value = "bead"
    assert np.asarray(adjacency.heatmap.data[0].z).shape == (cln025.n_beads, cln025.n_beads)
    adjacency.source_choice.value = "neighbour graph (now)"
    assert "Neighbour graph" in adjacency.info.value
    structure.refresh()
    assert structure._pending is not None and structure._pending.shape == (cln025.n_beads, 3)
    assert "step 2" in structure.info.value
    assert not adjacency.error_html.value and not structure.error_html.value


def test_tempering_panel_shows_a_ladder_run_and_hides_otherwise(ladder_settings, fake_run):
    controller = SimulationController(ladder_settings, chunk_seconds=0.01)
    panel = TemperingPanel(controller)
    assert not panel.shown and panel.figures() == {}
    controller.start()
    assert controller.wait(60) is RunState.STOPPED
    panel.refresh()
    assert panel.shown and set(panel.figures()) == {"tempering"}
    bars, *lines = panel.figure.data
    rate = controller.snapshot().tempering.acceptance[0]
    assert list(bars.x) == ["300–400 K"] and list(bars.y) == [rate]
    assert [line.name for line in lines] == ["replica 0", "replica 1"]
    assert len(lines[0].x) == 5 and set(lines[0].y) <= {300.0, 400.0}
    assert "2 levels × 2 walkers" in panel.info.value and "10 rounds" in panel.info.value
    assert [value for _, value in panel.group.options] == [0, 1]
    panel.group.value = 1
    assert [line.name for line in panel.figure.data[1:]] == ["replica 2", "replica 3"]
    assert not panel.error_html.value

    prepare, _ = fake_run()
    plain = SimulationController(RunSettings(replicas=2, steps=2), prepare=prepare)
    panel.attach(plain)
    assert not panel.shown and panel.figures() == {}


def test_workbench_composes_every_panel(fake_run):
    prepare, sim = fake_run()
    workbench = Workbench(RunSettings(replicas=2, steps=6, save_interval=2), prepare=prepare)
    controller = workbench.start()
    controller.wait(5)
    for panel in (workbench.plots, workbench.kernels, workbench.tempering, workbench.export):
        assert panel.source is controller
    assert set(workbench.figures()) >= {"throughput", "memory", "rmsd_q", "race"}
    assert "tempering" not in workbench.figures()  # no ladder in this run


# -- network architectures -----------------------------------------------------------------


def shown_toggles(panel) -> set[str]:
    return {name for name, toggle in panel.toggles.items() if toggle.layout.display != "none"}


def test_the_kernels_panel_offers_what_the_network_implements():
    panel = KernelsPanel(options=KernelOptions.all_on("fp16"), architecture="egnn")
    assert shown_toggles(panel) == {"fused_message_passing", "cuda_graph", "fused_pair_search",
                                    "fused_integrator"}
    assert panel.options == KernelOptions(fused_message_passing=True, fused_pair_search=True,
                                          fused_integrator=True, mlp_precision="fp16")
    assert "CGEGNN: its fused kernels are fused_message_passing;" in panel.absent_note.value
    assert "CUDA graphs" not in panel.absent_note.value
    panel.set_architecture("painn")
    assert shown_toggles(panel) == {"fused_message_passing", "tabulated_filter", "cuda_graph",
                                    "fused_pair_search", "fused_integrator"}
    assert not panel.precision.disabled and panel.options == KernelOptions(
        fused_message_passing=True, fused_pair_search=True, fused_integrator=True,
        mlp_precision="fp16")
    assert ("CGPaiNN: its fused kernels are fused_message_passing, tabulated_filter;"
            in panel.absent_note.value)
    panel.all_on.click()  # only what PaiNN implements
    assert panel.options == KernelOptions(fused_message_passing=True, fused_pair_search=True,
                                          fused_integrator=True, mlp_precision="fp16")
    panel.set_architecture("nequip")  # its radial MLPs and their tables; its backends are a
    # switch of its own
    assert shown_toggles(panel) == {"fused_update", "tabulated_filter", "cuda_graph",
                                    "fused_pair_search", "fused_integrator"}
    assert not panel.precision.disabled
    assert ("CGTensorProduct: its fused kernels are fused_update, tabulated_filter;"
            in panel.absent_note.value)
    assert "not captured as CUDA graphs" not in panel.absent_note.value
    panel.set_architecture("schnet")
    assert shown_toggles(panel) == set(KernelOptions.techniques())
    assert panel.absent_note.value == "" and not panel.precision.disabled


def test_the_kernels_panel_offers_a_deep_potential_its_own_techniques():
    panel = KernelsPanel(options=KernelOptions.all_on("fp16", tabulated_filter=True,
                                                      cuda_graph=True), architecture="dp")
    assert shown_toggles(panel) == {"fused_message_passing", "tabulated_filter", "cuda_graph",
                                    "fused_pair_search", "fused_integrator"}
    assert panel.options == KernelOptions(fused_message_passing=True, tabulated_filter=True,
                                          cuda_graph=True, fused_pair_search=True,
                                          fused_integrator=True, mlp_precision="fp16")
    assert ("CGDeepPotential: its fused kernels are fused_message_passing, tabulated_filter"
            in panel.absent_note.value)


def test_the_launch_architecture_reaches_the_run_and_the_kernel_switches(fake_run):
    prepare, _ = fake_run()
    workbench = Workbench(RunSettings(replicas=2, steps=2, architecture="egnn"),
                          prepare=prepare)
    assert workbench.launch.architecture.options == ("schnet", "painn", "egnn", "nequip",
                                                        "dp")
    assert workbench.kernels.architecture == "egnn"
    workbench.launch.architecture.value = "painn"
    assert workbench.kernels.architecture == "painn"
    assert shown_toggles(workbench.kernels) == {"fused_message_passing", "tabulated_filter",
                                                "cuda_graph", "fused_pair_search",
                                                "fused_integrator"}
    assert workbench.launch.settings().architecture == "painn"
    controller = workbench.start()
    controller.wait(5)
    assert controller.settings.architecture == "painn"
