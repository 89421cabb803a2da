"""A tensor-product network's convolution backend as a kernel switch: changed live between
chunks and marked on the throughput plot, refused with its reason where it cannot run, and
raced in the Compare panel."""

import time
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import FakeSimulation
from helpers import needs_e3nn

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from widgets.controller import SimulationController  # noqa: E402
from widgets.panels.kernels import KernelsPanel  # noqa: E402
from widgets.panels.live_plots import LivePlots, _switch_label  # noqa: E402
from widgets.snapshot import RunState  # noqa: E402
from workbench.runner import PreparedRun, RunSettings  # noqa: E402


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


class FakeTensorProductRun(FakeSimulation):
    """The fake engine with a tensor-product network whose backend every step records."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.potential = SimpleNamespace(cutoff=10.0, architecture="nequip",
                                         network=SimpleNamespace(backend="e3nn"))
        self.backends_seen: list[str] = []

    def step(self, steps=1):
        for _ in range(steps):
            super().step(1)
            self.backends_seen.append(self.potential.network.backend)


@pytest.fixture
def fake_nequip():
    sim = FakeTensorProductRun(step_seconds=0.002)

    def prepare(settings):
        sim.options = settings.options
        return PreparedRun(settings, None, sim, ["fake engine"])

    return prepare, sim


@pytest.fixture
def backends_run(monkeypatch):
    """Pretend every backend can run here (as on a GPU with both packages)."""
    monkeypatch.setattr("widgets.kernel_switches.backend_problem", lambda backend, device: None)


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
    panel.set_tp_backend("openequivariance")
    wait_for(lambda: controller.snapshot().tp_backend == "openequivariance")
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


def test_a_backend_request_before_the_build_is_the_runs_backend(fake_nequip):
    prepare, _ = fake_nequip
    controller = SimulationController(nequip_settings(), prepare=prepare)
    controller.set_tp_backend("cuequivariance")
    assert controller.settings.tp_backend == "cuequivariance"
    with pytest.raises(ValueError, match="unknown tensor-product backend 'flash'"):
        controller.set_tp_backend("flash")


def test_the_backend_selector_shows_for_nequip_only_and_feeds_the_next_run():
    panel = KernelsPanel(architecture="schnet", tp_backend="openequivariance")
    assert panel.backend.layout.display == "none" and panel.tp_backend == "e3nn"
    panel.set_architecture("nequip")
    assert panel.backend.layout.display is None and panel.tp_backend == "openequivariance"
    panel.set_tp_backend("cuequivariance")
    assert "cuequivariance</code> (used by the next run)" in panel.backend_status.value


@needs_e3nn
def test_a_backend_that_cannot_run_is_refused_with_its_reason_and_the_run_keeps_e3nn():
    controller = SimulationController(nequip_settings(), until_stopped=True, chunk_seconds=0.01)
    panel = KernelsPanel(controller, architecture="nequip")
    controller.start()
    wait_for(lambda: controller.state is not RunState.RUNNING or controller.snapshot().step > 0,
             timeout=60)
    panel.set_tp_backend("openequivariance")
    wait_for(lambda: any(e.requested_backend for e in controller.snapshot().events), timeout=60)
    step = controller.snapshot().step
    wait_for(lambda: controller.snapshot().step > step, timeout=60)  # it goes on
    controller.stop()
    assert controller.wait(30) is RunState.STOPPED
    snapshot = controller.snapshot()
    assert controller.simulation.potential.network.backend == "e3nn"
    assert snapshot.tp_backend == "e3nn"
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
    controller.set_tp_backend("cuequivariance")
    wait_for(lambda: controller.snapshot().kernel_messages)
    controller.stop()
    controller.wait(5)
    snapshot = controller.snapshot()
    assert snapshot.tp_backend is None
    assert "CGSchNet has no tensor-product convolution" in snapshot.kernel_messages[-1]
    assert np.all([e.backend is None for e in snapshot.events])


def test_the_workbench_starts_a_nequip_run_with_the_panels_backend(fake_nequip):
    pytest.importorskip("nglview")
    from widgets import Workbench

    prepare, _ = fake_nequip
    workbench = Workbench(RunSettings(replicas=2, steps=2, architecture="nequip",
                                      tp_backend="cuequivariance"), prepare=prepare)
    assert workbench.kernels.backend.value == "cuequivariance"
    workbench.kernels.set_tp_backend("openequivariance")
    assert workbench.launch.settings().tp_backend == "openequivariance"
    workbench.launch.architecture.value = "egnn"  # no backends: the selector hides
    assert workbench.kernels.backend.layout.display == "none"
    assert workbench.launch.settings().tp_backend == "e3nn"


def test_a_backend_that_fails_in_a_chunk_falls_back_to_e3nn(fake_nequip, backends_run):
    prepare, sim = fake_nequip
    step = sim.step

    def step_or_fail(steps=1):
        if sim.potential.network.backend == "cuequivariance":
            raise RuntimeError("no kernel for this irreps")
        step(steps)

    sim.step = step_or_fail
    controller = SimulationController(nequip_settings(steps=40), prepare=prepare,
                                      chunk_seconds=0.01)
    controller.start()
    wait_for(lambda: sim.step_count > 3)
    controller.set_tp_backend("cuequivariance")
    assert controller.wait(10) is RunState.STOPPED
    snapshot = controller.snapshot()
    assert snapshot.error is None and sim.step_count == 40 and snapshot.tp_backend == "e3nn"
    assert snapshot.kernel_messages[-1] == ("Tensor-product backend 'cuequivariance' failed "
                                            "(RuntimeError: no kernel for this irreps); "
                                            "switched back to e3nn.")
    switched, failed = snapshot.events[-2:]
    assert _switch_label(switched, failed) == "backend cuequivariance→e3nn (failed)"
