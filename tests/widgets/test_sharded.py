"""Runs over several processes launched and watched from the workbench: a real 2-process
gloo run (metrics, frames, tempering, the panels), stop at a report, refused pause and
live kernel switches, and settings refused before anything starts."""

import time

import numpy as np
import pytest
import torch

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")
pytest.importorskip("nglview")

from widgets import (  # noqa: E402
    AdjacencyPanel,
    InvalidTransition,
    ShardedController,
    TemperingPanel,
    Workbench,
)
from widgets.sharded import FIXED_SWITCHES  # noqa: E402
from widgets.snapshot import RunState  # noqa: E402
from workbench.distributed import MetricsReport, ShardedResult, split_replicas  # noqa: E402
from workbench.distributed.reports import METRIC_KEYS  # noqa: E402
from workbench.model.options import KernelOptions  # noqa: E402
from workbench.runner import RunSettings  # noqa: E402


def fake_launch(config, on_report, should_stop):
    """Reports every save interval (one replica frozen from step 4) until stopped."""
    run = config.run
    step = 0
    while step < run.steps and not should_stop():
        step += run.save_interval
        metrics = {key: np.full(run.replicas, 0.5, dtype=np.float32) for key in METRIC_KEYS}
        metrics["frozen"] = np.arange(run.replicas) == (0 if step >= 4 else -1)
        on_report(MetricsReport(step, 0.004 * step, np.arange(run.replicas), metrics, 100.0))
        time.sleep(0.02)
    return ShardedResult(
        split_replicas(run.replicas, config.ranks), "gloo", steps=step,
        stopped=step < run.steps, timestep_mol_per_s=123.0,
    )


def test_workbench_runs_a_ladder_over_two_processes(ladder_settings):
    workbench = Workbench(ladder_settings)
    workbench.launch.gpus.value = 2
    controller = workbench.start()
    assert isinstance(controller, ShardedController)
    workbench.launch.refresh()
    assert workbench.launch.pause_button.disabled  # another process's simulation cannot pause
    assert controller.wait(120) is RunState.STOPPED, controller.snapshot().error
    snapshot = controller.snapshot()
    assert snapshot.message == "finished 20 steps on 2 processes (gloo)"
    assert snapshot.step == 20 and snapshot.mean_timestep_mol_per_s > 0
    assert list(snapshot.metrics["step"]) == [5, 10, 15, 20]
    assert snapshot.metrics["q"].shape == (4, 4)
    assert list(snapshot.frame_steps) == [5, 10, 15, 20]
    assert snapshot.latest_positions.shape == (4, snapshot.system.n_beads, 3)
    assert np.isnan(snapshot.throughput["timestep_mol_per_s"][0])  # start-up interval
    assert (snapshot.throughput["timestep_mol_per_s"][1:] > 0).all()
    # walkers' temperatures and acceptance come through the reports
    tempering = snapshot.tempering
    assert tempering.rounds == 10 and tempering.groups.tolist() == [[0, 1], [2, 3]]
    assert set(np.unique(tempering.history["temperature"])) <= {300.0, 400.0}
    panel = TemperingPanel(controller)
    assert panel.shown and "10 rounds" in panel.info.value
    # the adjacency panel draws the recorded frames; the live graph is not here
    adjacency = AdjacencyPanel(controller)
    adjacency.refresh()
    assert adjacency.frame.max == 3
    adjacency.source_choice.value = "neighbour graph (now)"
    assert "No live neighbour graph" in adjacency.info.value
    assert not adjacency.error_html.value and not panel.error_html.value


def test_stop_ends_the_run_at_a_report_and_frozen_replicas_are_listed():
    controller = ShardedController(
        RunSettings(replicas=3, steps=10**6, save_interval=2, device="cpu"),
        ranks=2, until_stopped=True, launch=fake_launch,
    )
    controller.start()
    deadline = time.monotonic() + 20
    while controller.snapshot().step < 6:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(InvalidTransition, match="cannot pause"):
        controller.pause()
    controller.set_options(KernelOptions.all_on())
    controller.stop()
    assert controller.wait(10) is RunState.STOPPED
    snapshot = controller.snapshot()
    assert snapshot.message.startswith(f"stopped by the user at step {snapshot.step:,}")
    assert snapshot.target_steps is None and snapshot.mean_timestep_mol_per_s == 123.0
    assert snapshot.frozen == ((0, 4),)
    assert snapshot.kernel_messages == (FIXED_SWITCHES,)
    assert snapshot.options == KernelOptions()  # what the run was launched with


def test_impossible_spreads_are_refused_in_the_launch_panel(ladder_settings):
    workbench = Workbench(ladder_settings)
    workbench.launch.gpus.value = 8
    assert workbench.start() is None
    assert "4 replicas cannot be spread over 8 ranks" in workbench.launch.status.value
    workbench.launch.gpus.value = 2
    workbench.launch.device.value = "cuda"
    if not torch.cuda.is_available():
        assert workbench.start() is None
        assert "no CUDA GPU is visible" in workbench.launch.status.value
