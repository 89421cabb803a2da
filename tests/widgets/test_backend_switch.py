"""A network's backend as a kernel switch (a tensor-product network's convolution backend,
who evaluates a Deep Potential): changed live between chunks and marked on the throughput
plot, refused with its reason where it cannot run, and falling back to the network's default
where it fails."""

import time
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import FakeSimulation
from helpers import needs_deepmd, needs_e3nn

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from widgets.controller import SimulationController  # noqa: E402
from widgets.kernel_switches import backend_options  # noqa: E402
from widgets.panels.kernels import KernelsPanel  # noqa: E402
from widgets.panels.live_plots import LivePlots, _switch_label  # noqa: E402
from widgets.snapshot import RunState  # noqa: E402
from workbench.model.options import KernelOptions  # noqa: E402
from workbench.runner import NETWORK_BACKENDS, PreparedRun, RunSettings  # noqa: E402


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


class FakeBackendRun(FakeSimulation):
    """The fake engine with a network of backends whose backend every step records."""

    def __init__(self, architecture="nequip", backend="e3nn", **kwargs):
        super().__init__(**kwargs)
        self.potential = SimpleNamespace(cutoff=10.0, architecture=architecture,
                                         network=SimpleNamespace(backend=backend))
        self.backends_seen: list[str] = []

    def step(self, steps=1):
        for _ in range(steps):
            super().step(1)
            self.backends_seen.append(self.potential.network.backend)


def fake_backend_run(**kwargs):
    """``(prepare, sim)``: a prepare function returning a `FakeBackendRun`."""
    sim = FakeBackendRun(step_seconds=0.002, **kwargs)

    def prepare(settings):
        sim.options = settings.options
        return PreparedRun(settings, None, sim, ["fake engine"])

    return prepare, sim


@pytest.fixture
def fake_nequip():
    return fake_backend_run()


@pytest.fixture
def backends_run(monkeypatch):
    """Pretend every backend can run here (as on a GPU with both packages)."""
    monkeypatch.setattr("workbench.runner.backend_problem", lambda backend, device: None)


def nequip_settings(**changes):
    return RunSettings(**{"protein": "cln025", "replicas": 2, "steps": 10, "device": "cpu",
                          "architecture": "nequip", **changes})


def test_a_backend_change_is_applied_between_chunks_and_marked_on_the_plot(fake_nequip,
                                                                          backends_run):
    prepare, sim = fake_nequip
    controller = SimulationController(nequip_settings(), until_stopped=True, prepare=prepare,
                                      chunk_seconds=0.01)
    panel = KernelsPanel(controller, architecture="nequip")
    plots = LivePlots(controller)
    controller.start()
    wait_for(lambda: sim.step_count > 5)
    panel.set_backend("openequivariance")
    wait_for(lambda: controller.snapshot().backend == "openequivariance")
    at = sim.step_count
    wait_for(lambda: sim.step_count > at + 5)
    controller.stop()
    controller.wait(5)
    snapshot = controller.snapshot()
    event = snapshot.events[-1]
    assert (event.requested_backend, event.backend, event.message) == (
        "openequivariance", "openequivariance", None)
    assert snapshot.events[0].backend == "e3nn"
    # every step before the event ran e3nn, every step from it on the new backend: no chunk
    # ran half of each
    seen = sim.backends_seen
    assert seen[:event.step] == ["e3nn"] * event.step and event.step > 5
    assert set(seen[event.step:]) == {"openequivariance"}
    assert _switch_label(snapshot.events[0], event) == "backend e3nn→openequivariance"
    plots.refresh()
    texts = [a.text for a in plots.throughput_figure.layout.annotations]
    assert any("backend e3nn→openequivariance" in text for text in texts)
    panel.refresh()
    assert "in use: <code>openequivariance</code>" in panel.backend_status.value
    assert "⚠" not in panel.backend_status.value


def test_a_backend_change_fits_the_switches_last_asked_for_to_the_new_backend(
        fake_nequip, backends_run, monkeypatch):
    """A run asked for captured steps starts on e3nn without them (its steps are not
    captured); switched to OpenEquivariance it captures them, and back on e3nn they are off
    again with the reason."""
    monkeypatch.setattr("widgets.controller.usable_options",  # as on a GPU
                        lambda options, device, architecture: (options, None))
    prepare, sim = fake_nequip
    asked = KernelOptions(tabulated_filter=True, cuda_graph=True)

    def prepare_as_the_runner(settings):  # prepare_run settles the options for the backend
        prepared = prepare(settings)
        sim.options, _ = backend_options(NETWORK_BACKENDS["nequip"], "e3nn", settings.options)
        return prepared

    controller = SimulationController(nequip_settings(options=asked), until_stopped=True,
                                      prepare=prepare_as_the_runner, chunk_seconds=0.01)
    controller.start()
    wait_for(lambda: sim.step_count > 3)
    assert controller.snapshot().options == KernelOptions(tabulated_filter=True)
    for backend, options in [("openequivariance", asked),
                             ("e3nn", KernelOptions(tabulated_filter=True))]:
        controller.set_backend(backend)
        wait_for(lambda b=backend: controller.snapshot().backend == b)
        event = controller.snapshot().events[-1]
        assert (event.backend, event.applied, sim.options) == (backend, options, options)
    assert "cuda_graph is switched off" in event.message
    controller.stop()
    controller.wait(5)


def test_a_backend_request_before_the_build_is_the_runs_backend(fake_nequip):
    prepare, _ = fake_nequip
    controller = SimulationController(nequip_settings(), prepare=prepare)
    controller.set_backend("cuequivariance")
    assert controller.settings.tp_backend == "cuequivariance"
    controller.set_backend("deepmd")  # the setting of the Deep Potential's backend
    assert (controller.settings.tp_backend, controller.settings.dp_backend) == (
        "cuequivariance", "deepmd")
    with pytest.raises(ValueError, match="unknown network backend 'flash'; choose from e3nn, "
                       r"openequivariance, cuequivariance \(nequip\); engine, deepmd \(dp\)"):
        controller.set_backend("flash")


def test_the_backend_selector_offers_the_networks_own_backends_and_feeds_the_next_run():
    panel = KernelsPanel(architecture="schnet", backends={"tp_backend": "openequivariance"})
    assert panel.backend.layout.display == "none"  # no backends
    assert panel.backend_settings == {"tp_backend": "e3nn", "dp_backend": "engine"}
    panel.set_architecture("nequip")
    assert panel.backend.layout.display is None and panel.backend.description == "TP backend"
    assert panel.backend.options == ("e3nn", "openequivariance", "cuequivariance")
    assert panel.backend_settings == {"tp_backend": "openequivariance", "dp_backend": "engine"}
    panel.set_backend("cuequivariance")
    assert "cuequivariance</code> (used by the next run)" in panel.backend_status.value
    panel.set_architecture("dp")
    assert panel.backend.layout.display is None and panel.backend.description == "DP backend"
    assert (panel.backend.options, panel.backend.value) == (("engine", "deepmd"), "engine")
    panel.set_backend("deepmd")
    assert panel.backend_settings == {"tp_backend": "e3nn", "dp_backend": "deepmd"}
    with pytest.raises(ValueError, match="'e3nn' is a backend of the nequip network; the "
                       "panel's is dp"):
        panel.set_backend("e3nn")
    panel.set_architecture("nequip")  # each network keeps its choice
    assert panel.backend.value == "cuequivariance"
    panel.set_architecture("schnet")
    assert panel.backend.layout.display == "none"


@needs_e3nn
def test_a_backend_that_cannot_run_is_refused_with_its_reason_and_the_run_keeps_e3nn():
    controller = SimulationController(nequip_settings(), until_stopped=True, chunk_seconds=0.01)
    panel = KernelsPanel(controller, architecture="nequip")
    controller.start()
    wait_for(lambda: controller.state is not RunState.RUNNING or controller.snapshot().step > 0,
             timeout=60)
    panel.set_backend("openequivariance")
    wait_for(lambda: any(e.requested_backend for e in controller.snapshot().events), timeout=60)
    step = controller.snapshot().step
    wait_for(lambda: controller.snapshot().step > step, timeout=60)  # it goes on
    controller.stop()
    assert controller.wait(30) is RunState.STOPPED
    snapshot = controller.snapshot()
    assert controller.simulation.potential.network.backend == "e3nn"
    assert snapshot.backend == "e3nn"
    event = snapshot.events[-1]
    assert (event.requested_backend, event.backend) == ("openequivariance", "e3nn")
    message = snapshot.kernel_messages[-1]
    assert message.startswith("Tensor-product backend 'openequivariance' refused (")
    assert "CUDA device" in message and message.endswith("the run keeps e3nn.")
    assert _switch_label(snapshot.events[0], event) == (
        "backend e3nn→openequivariance (not run)")
    panel.refresh()
    assert "in use: <code>e3nn</code>" in panel.backend_status.value
    assert "⚠ Tensor-product backend &#x27;openequivariance&#x27; refused (" in (
        panel.backend_status.value)


def test_a_network_without_backends_refuses_a_backend_change(fake_run):
    prepare, sim = fake_run(step_seconds=0.002)
    controller = SimulationController(RunSettings(replicas=2, steps=10), until_stopped=True,
                                      prepare=prepare, chunk_seconds=0.01)
    controller.start()
    wait_for(lambda: sim.step_count > 2)
    controller.set_backend("cuequivariance")
    wait_for(lambda: controller.snapshot().kernel_messages)
    controller.stop()
    controller.wait(5)
    snapshot = controller.snapshot()
    assert snapshot.backend is None
    assert snapshot.kernel_messages[-1] == (
        "Tensor-product backend 'cuequivariance' refused: it is a backend of the nequip "
        "network only; this run's is CGSchNet.")
    assert np.all([e.backend is None for e in snapshot.events])


def test_the_workbench_starts_a_run_with_the_panels_backend(fake_nequip):
    pytest.importorskip("nglview")
    from widgets import Workbench

    prepare, _ = fake_nequip
    workbench = Workbench(RunSettings(replicas=2, steps=2, architecture="nequip",
                                      tp_backend="cuequivariance"), prepare=prepare)
    assert workbench.kernels.backend.value == "cuequivariance"
    workbench.kernels.set_backend("openequivariance")
    assert workbench.launch.settings().tp_backend == "openequivariance"
    workbench.launch.architecture.value = "egnn"  # no backends: the selector hides
    assert workbench.kernels.backend.layout.display == "none"
    assert workbench.launch.settings().tp_backend == "e3nn"
    workbench.launch.architecture.value = "dp"
    assert workbench.kernels.backend.description == "DP backend"
    workbench.kernels.set_backend("deepmd")
    assert (workbench.launch.settings().tp_backend,
            workbench.launch.settings().dp_backend) == ("e3nn", "deepmd")


@pytest.mark.parametrize(("architecture", "default", "backend", "subject"), [
    ("nequip", "e3nn", "cuequivariance", "Tensor-product backend"),
    ("dp", "engine", "deepmd", "Deep Potential backend"),
])
def test_a_backend_that_fails_in_a_chunk_falls_back_to_the_networks_default(
        monkeypatch, architecture, default, backend, subject):
    monkeypatch.setattr("workbench.runner.backend_problem", lambda backend, device: None)
    monkeypatch.setattr("workbench.runner.deepmd_backend_problem", lambda network: None)
    prepare, sim = fake_backend_run(architecture=architecture, backend=default)
    step = sim.step

    def step_or_fail(steps=1):
        if sim.potential.network.backend == backend:
            raise RuntimeError("no kernel for this model")
        step(steps)

    sim.step = step_or_fail
    controller = SimulationController(nequip_settings(steps=40, architecture=architecture),
                                      prepare=prepare, chunk_seconds=0.01)
    controller.start()
    wait_for(lambda: sim.step_count > 3)
    controller.set_backend(backend)
    assert controller.wait(10) is RunState.STOPPED
    snapshot = controller.snapshot()
    assert snapshot.error is None and sim.step_count == 40 and snapshot.backend == default
    assert snapshot.kernel_messages[-1] == (f"{subject} {backend!r} failed "
                                            "(RuntimeError: no kernel for this model); "
                                            f"switched back to {default}.")
    switched, failed = snapshot.events[-2:]
    assert _switch_label(switched, failed) == f"backend {backend}→{default} (failed)"


def dp_settings(**changes):
    return nequip_settings(**{"architecture": "dp", "model": "demo", **changes})


@needs_deepmd
def test_a_deep_potential_switches_to_deepmd_kit_and_back_live():
    tables = KernelOptions(tabulated_filter=True)
    controller = SimulationController(dp_settings(options=tables), until_stopped=True,
                                      chunk_seconds=0.01)
    panel = KernelsPanel(controller, options=tables, architecture="dp")
    plots = LivePlots(controller)
    controller.start()
    wait_for(lambda: controller.snapshot().step > 2, timeout=60)
    assert (controller.snapshot().backend, controller.snapshot().options) == ("engine", tables)
    panel.set_backend("deepmd")
    wait_for(lambda: controller.snapshot().backend == "deepmd", timeout=30)
    step = controller.snapshot().step
    wait_for(lambda: controller.snapshot().step > step + 1, timeout=60)
    snapshot = controller.snapshot()
    to_deepmd = snapshot.events[-1]
    # the engine's tables do not apply to deepmd-kit's model: off in the run's options
    assert (to_deepmd.requested_backend, to_deepmd.backend) == ("deepmd", "deepmd")
    assert (to_deepmd.requested, to_deepmd.applied) == (tables, KernelOptions())
    assert snapshot.options == controller.simulation.options == KernelOptions()
    assert to_deepmd.message == snapshot.kernel_messages[-1] == (
        "Deep Potential backend 'deepmd': deepmd-kit's model runs, so the engine's "
        "tabulated_filter is switched off.")
    panel.refresh()  # the toggles follow the run's options
    assert panel.options == KernelOptions() and not panel.toggles["tabulated_filter"].value
    assert "in use: <code>deepmd</code>" in panel.backend_status.value
    # a technique asked for while deepmd-kit's model runs stays off, and the run says why
    panel.toggles["tabulated_filter"].value = True
    wait_for(lambda: len(controller.snapshot().events) > len(snapshot.events), timeout=30)
    refused = controller.snapshot().events[-1]
    assert (refused.requested, refused.applied) == (tables, KernelOptions())
    assert refused.message == to_deepmd.message
    panel.set_backend("engine")
    wait_for(lambda: controller.snapshot().backend == "engine", timeout=30)
    step = controller.snapshot().step
    wait_for(lambda: controller.snapshot().step > step + 1, timeout=60)
    controller.stop()
    assert controller.wait(30) is RunState.STOPPED
    snapshot = controller.snapshot()
    assert snapshot.error is None and snapshot.backend == "engine"
    back = snapshot.events[-1]
    assert (back.requested_backend, back.backend) == ("engine", "engine")
    # the switches last asked for (the tables, asked while deepmd-kit ran) as the engine runs them
    assert back.applied == snapshot.options == tables and back.message is None
    plots.refresh()
    texts = [a.text for a in plots.throughput_figure.layout.annotations]
    for label in ("backend engine→deepmd", "backend deepmd→engine"):
        assert any(label in text for text in texts)
    # each backend's throughput from its switch on
    rows = snapshot.throughput["step"]
    assert np.any((rows > to_deepmd.step) & (rows <= back.step)) and np.any(rows > back.step)


def test_a_deep_potential_that_deepmd_kit_cannot_run_keeps_the_engine(monkeypatch):
    monkeypatch.setattr("workbench.runner.deepmd_backend_problem",
                        lambda network: "No module named 'deepmd'")
    prepare, sim = fake_backend_run(architecture="dp", backend="engine")
    tables = KernelOptions(tabulated_filter=True)
    controller = SimulationController(dp_settings(options=tables), until_stopped=True,
                                      prepare=prepare, chunk_seconds=0.01)
    panel = KernelsPanel(controller, options=tables, architecture="dp")
    controller.start()
    wait_for(lambda: sim.step_count > 2)
    panel.set_backend("deepmd")
    wait_for(lambda: any(e.requested_backend for e in controller.snapshot().events))
    at = sim.step_count
    wait_for(lambda: sim.step_count > at)  # it goes on
    controller.stop()
    controller.wait(5)
    snapshot = controller.snapshot()
    assert snapshot.backend == "engine" and set(sim.backends_seen) == {"engine"}
    assert snapshot.options == tables  # nothing switched off
    event = snapshot.events[-1]
    assert (event.requested_backend, event.backend) == ("deepmd", "engine")
    assert snapshot.kernel_messages[-1] == ("Deep Potential backend 'deepmd' refused (No module "
                                            "named 'deepmd'); the run keeps engine.")
    assert _switch_label(snapshot.events[0], event) == "backend engine→deepmd (not run)"
    panel.refresh()
    assert "in use: <code>engine</code>" in panel.backend_status.value
    assert "⚠ Deep Potential backend &#x27;deepmd&#x27; refused" in panel.backend_status.value
    assert panel.options == tables
