"""The live-switch demo: its own Start and Stop, the walk through the techniques, and
switch markers labelled by what changed."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from widgets.kernel_switches import (  # noqa: E402
    WALKTHROUGH,
    change_label,
    walk_note,
    walkthrough,
)
from widgets.panels.live_plots import segment_mean  # noqa: E402
from widgets.panels.live_switch import LiveSwitchPanel  # noqa: E402
from widgets.snapshot import RunState  # noqa: E402
from workbench.model.options import KernelOptions  # noqa: E402
from workbench.runner import RunSettings  # noqa: E402


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_the_walk_adds_one_technique_per_stage():
    stages = walkthrough()
    assert stages[0].is_baseline and len(stages) == len(WALKTHROUGH) + 1
    labels = [change_label(a, b) for a, b in zip(stages, stages[1:], strict=False)]
    assert labels == [
        "+fused_radial_basis", "+fused_message_passing", "+csr_aggregation", "+fused_update",
        "+fused_pair_search", "+fused_integrator", "+pair_filter", "fp32→fp16", "+cuda_graph",
        "+tabulated_filter",
    ]
    assert stages[7] == KernelOptions.parse("all")  # the ablation's cumulative order
    assert stages[-1].cuda_graph and stages[-1].tabulated_filter
    assert stages[-1].mlp_precision == "fp16"
    assert walk_note(0) == "" and "CSR" in walk_note(3)


def test_change_labels_name_what_changed():
    on = KernelOptions.all_on()
    assert change_label(None, on) == "+".join(on.enabled())
    assert change_label(on, KernelOptions.baseline()) == "baseline"
    fewer = KernelOptions(fused_update=True, cuda_graph=True)
    assert change_label(KernelOptions(fused_update=True), fewer) == "+cuda_graph"
    assert change_label(fewer, KernelOptions(cuda_graph=True)) == "−fused_update"
    assert change_label(fewer, fewer) == "no change"


def test_the_smoothed_line_restarts_at_each_switch():
    steps = np.arange(10)
    values = np.array([1.0, 3, 1, 3, 1, 10, 10, np.nan, 10, 10])
    smooth = segment_mean(steps, values, breaks=[5], window=3)
    np.testing.assert_allclose(smooth[:5], [2, 5 / 3, 7 / 3, 5 / 3, 2])
    np.testing.assert_allclose(smooth[5:], 10.0)  # never mixed with the slower segment


def test_start_walk_stop_and_start_again(fake_run, gpu_like):
    prepare, sim = fake_run(step_seconds=0.002)
    panel = LiveSwitchPanel(RunSettings(replicas=2, save_interval=5), hold_seconds=0.15,
                            prepare=prepare)
    walk = panel.walk_through()
    assert panel.running and panel.start_button.disabled and panel.walk_button.disabled
    walk.join(30)
    assert not walk.is_alive() and "walk done" in panel.status.value
    wait_for(lambda: panel.controller.snapshot().options.cuda_graph)
    events = panel.controller.snapshot().events
    assert [e.applied for e in events][-1] == walkthrough()[-1]
    panel.plots.refresh()
    wait_for(lambda: not panel.plots.drawing)
    labels = [a.text for a in panel.plots.throughput_figure.layout.annotations]
    # two switches that land in one chunk share its label ("+csr_aggregation +fused_update")
    assert any("+csr_aggregation" in label.split() for label in labels)
    assert any("fp32→fp16" in label.split() for label in labels)
    smoothed = panel.plots.throughput_figure.data[1]
    assert np.isfinite(np.asarray(smoothed.y, dtype=float)).any()
    first = panel.controller
    panel.stop()
    assert first.state is RunState.STOPPED and panel.stop_button.disabled
    second = panel.start()  # a new run, no InvalidTransition
    assert second is not first and panel.running
    panel.stop()
    assert second.state is RunState.STOPPED and not panel.start_button.disabled


def test_stop_ends_a_walk_at_once(fake_run, gpu_like):
    prepare, _ = fake_run(step_seconds=0.002)
    panel = LiveSwitchPanel(RunSettings(replicas=2), hold_seconds=60, prepare=prepare)
    walk = panel.walk_through()
    wait_for(lambda: panel.controller.state is RunState.RUNNING)
    started = time.monotonic()
    panel.stop()
    assert not walk.is_alive() and time.monotonic() - started < 10
