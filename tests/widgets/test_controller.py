import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from widgets.controller import InvalidTransition, SimulationController, plan_chunk
from widgets.snapshot import RunState
from workbench.model.options import KernelOptions
from workbench.runner import RunSettings


def settings(**changes):
    return RunSettings(**{"replicas": 2, "steps": 20, "save_interval": 5, **changes})


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_runs_the_requested_steps_and_records_every_save_interval(fake_run):
    prepare, sim = fake_run()
    controller = SimulationController(settings(), prepare=prepare)
    assert controller.state is RunState.IDLE
    controller.start()
    assert controller.wait(10) is RunState.STOPPED
    snapshot = controller.snapshot()
    assert sim.step_count == 20
    assert snapshot.message == "finished 20 steps"
    assert list(snapshot.metrics["step"]) == [0, 5, 10, 15, 20]
    assert snapshot.metrics["rmsd"].shape == (5, 2)
    assert list(snapshot.frame_steps) == [0, 5, 10, 15, 20]
    assert snapshot.throughput["steps"].sum() == 20
    assert snapshot.notices == ("fake engine",)
    assert snapshot.memory_gb is None


def test_a_wall_time_budget_stops_the_run(fake_run):
    prepare, sim = fake_run(step_seconds=0.002)
    controller = SimulationController(
        settings(steps=10**6), prepare=prepare, chunk_seconds=0.02, max_seconds=0.3
    )
    started = time.monotonic()
    controller.start()
    assert controller.wait(10) is RunState.STOPPED
    assert time.monotonic() - started < 5 and 0 < sim.step_count < 10**6
    message = controller.snapshot().message
    assert message == f"stopped at the 0.3-s budget after {sim.step_count} steps"


def test_pause_resume_stop_state_machine(fake_run):
    prepare, sim = fake_run(step_seconds=0.005)
    controller = SimulationController(
        settings(), until_stopped=True, prepare=prepare, chunk_seconds=0.02
    )
    states = []
    controller.add_listener(lambda c, forced: forced and states.append(c.state))
    with pytest.raises(InvalidTransition):
        controller.pause()
    controller.start()
    with pytest.raises(InvalidTransition):
        controller.start()
    wait_for(lambda: sim.step_count > 3)
    controller.pause()
    time.sleep(0.1)
    paused_at = sim.step_count
    time.sleep(0.2)
    assert sim.step_count == paused_at
    with pytest.raises(InvalidTransition):
        controller.pause()
    controller.resume()
    wait_for(lambda: sim.step_count > paused_at + 3)
    controller.stop()
    assert controller.wait(5) is RunState.STOPPED
    assert not controller._thread.is_alive()
    controller.stop()  # stopping twice is harmless
    with pytest.raises(InvalidTransition):
        controller.resume()
    assert RunState.PAUSED in states and states[-1] is RunState.STOPPED


def test_errors_in_the_engine_end_the_run_with_a_message(fake_run):
    prepare, _ = fake_run(fail_at=7)
    controller = SimulationController(settings(), prepare=prepare)
    controller.start()
    assert controller.wait(10) is RunState.ERROR
    snapshot = controller.snapshot()
    assert snapshot.error == "RuntimeError: engine exploded"
    assert "engine exploded" in snapshot.traceback
    assert snapshot.step == 7


def test_errors_while_building_are_shown():
    def prepare(_settings):
        raise ValueError("bad PDB: no protein")

    controller = SimulationController(settings(), prepare=prepare)
    controller.start()
    assert controller.wait(10) is RunState.ERROR
    assert controller.snapshot().error == "ValueError: bad PDB: no protein"


def test_switches_reach_the_simulation_at_the_next_chunk(fake_run, gpu_like):
    prepare, sim = fake_run(step_seconds=0.005)
    controller = SimulationController(
        settings(), until_stopped=True, prepare=prepare, chunk_seconds=0.02
    )
    controller.start()
    wait_for(lambda: sim.step_count > 3)
    controller.set_options(KernelOptions.all_on("bf16"))
    wait_for(lambda: sim.options_seen[-1] == KernelOptions.all_on("bf16"))
    controller.set_options(KernelOptions.baseline())
    wait_for(lambda: sim.options_seen[-1].is_baseline and sim.step_count > 10)
    controller.stop()
    controller.wait(5)
    events = controller.snapshot().events
    assert [e.label for e in events] == [
        "baseline",
        "fused_radial_basis+fused_message_passing+csr_aggregation+fused_update"
        "+fused_pair_search+fused_integrator+pair_filter+mlp_bf16",
        "baseline",
    ]
    assert events[1].step > 0 and events[2].step > events[1].step
    switched = sim.options_seen.index(KernelOptions.all_on("bf16"))
    assert switched == events[1].step


def test_a_system_searched_by_cells_keeps_its_graph_and_pair_search_off(fake_run, gpu_like):
    problem = "the system has 100,068 beads per replica, above the 4,096 up to which ..."
    cells = SimpleNamespace(dense=False, dense_problem=lambda: problem)
    prepare, sim = fake_run(step_seconds=0.005, neighbor_list=cells)
    controller = SimulationController(
        settings(), until_stopped=True, prepare=prepare, chunk_seconds=0.02
    )
    controller.start()
    wait_for(lambda: sim.step_count > 3)
    controller.set_options(KernelOptions.parse("all+tables+graph"))
    wait_for(lambda: sim.options_seen[-1].tabulated_filter)
    controller.stop()
    controller.wait(5)
    ran = sim.options_seen[-1]
    assert not ran.cuda_graph and not ran.fused_pair_search and ran.fused_update
    message = controller.snapshot().kernel_messages[-1]
    assert f"fused_pair_search off: {problem}." in message
    assert message.endswith(f"cuda_graph off: {problem}.")


def test_switches_before_the_build_become_the_starting_options(fake_run, gpu_like):
    prepare, sim = fake_run()
    controller = SimulationController(settings(steps=2), prepare=prepare)
    controller.set_options(KernelOptions(fused_update=True))
    controller.start()
    controller.wait(10)
    assert sim.options_seen[0] == KernelOptions(fused_update=True)


def test_without_a_gpu_the_fused_path_falls_back_with_one_message(fake_run):
    prepare, sim = fake_run(step_seconds=0.005)
    controller = SimulationController(
        settings(), until_stopped=True, prepare=prepare, chunk_seconds=0.02
    )
    controller.start()
    wait_for(lambda: sim.step_count > 2)
    controller.set_options(KernelOptions.all_on())
    wait_for(lambda: len(controller.snapshot().kernel_messages) == 1)
    controller.stop()
    controller.wait(5)
    snapshot = controller.snapshot()
    assert "need a CUDA GPU" in snapshot.kernel_messages[0]
    assert snapshot.options.is_baseline
    assert all(o.is_baseline for o in sim.options_seen)


def test_engine_that_raises_on_fused_kernels_falls_back(fake_run, gpu_like):
    prepare, sim = fake_run(refuse_fused=True, step_seconds=0.002)
    controller = SimulationController(settings(steps=30), prepare=prepare, chunk_seconds=0.01)
    controller.set_options(KernelOptions.all_on())
    controller.start()
    assert controller.wait(10) is RunState.STOPPED
    snapshot = controller.snapshot()
    assert sim.step_count == 30
    assert snapshot.options.is_baseline
    assert len(snapshot.kernel_messages) == 1
    assert "no fused kernel for this device" in snapshot.kernel_messages[0]


@pytest.mark.filterwarnings("ignore:fused kernel unavailable")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_engine_that_warns_on_fused_kernels_is_reported_once(fake_run, gpu_like):
    prepare, sim = fake_run(warn_fused=True, step_seconds=0.002)
    controller = SimulationController(
        settings(), until_stopped=True, prepare=prepare, chunk_seconds=0.01
    )
    controller.start()
    wait_for(lambda: sim.step_count > 2)
    controller.set_options(KernelOptions(fused_radial_basis=True))
    wait_for(lambda: controller.snapshot().kernel_messages)
    wait_for(lambda: sim.step_count > 30)
    controller.stop()
    controller.wait(5)
    messages = controller.snapshot().kernel_messages
    assert len(messages) == 1 and "engine warned" in messages[0]
    # each step of the chunk warned: shown once; the library's deprecation notice not at all
    assert messages[0].count("fused kernel unavailable") == 1
    assert "deprecated" not in messages[0]


def test_history_stays_bounded_on_long_runs(fake_run):
    prepare, _ = fake_run()
    controller = SimulationController(
        settings(steps=3000, save_interval=1), prepare=prepare, history_points=16, frame_capacity=8
    )
    controller.start()
    controller.wait(30)
    snapshot = controller.snapshot()
    assert snapshot.points <= 16 and len(snapshot.throughput["step"]) <= 16
    assert len(controller.frames()) <= 8
    assert snapshot.step == 3000


def test_snapshots_are_consistent_while_running(fake_run):
    prepare, sim = fake_run(step_seconds=0.001)
    controller = SimulationController(
        settings(steps=400, save_interval=2), prepare=prepare, chunk_seconds=0.005
    )
    failures = []

    def reader():
        while controller.state in (RunState.IDLE, RunState.RUNNING):
            s = controller.snapshot()
            if s.points and s.metrics["rmsd"].shape[0] != s.metrics["step"].shape[0]:
                failures.append(s)
            time.sleep(0.001)

    controller.start()
    thread = threading.Thread(target=reader)
    thread.start()
    controller.wait(30)
    thread.join(5)
    assert not failures and sim.step_count == 400


def test_listener_errors_do_not_stop_the_run(fake_run):
    prepare, sim = fake_run()

    def broken(_controller, _forced):
        raise KeyError("plot gone")

    controller = SimulationController(settings(), prepare=prepare)
    controller.add_listener(broken)
    controller.start()
    assert controller.wait(10) is RunState.STOPPED
    assert sim.step_count == 20
    assert "KeyError" in controller.snapshot().display_errors[-1]


def test_a_ladder_run_records_exchanges_and_every_replicas_temperature(ladder_settings):
    controller = SimulationController(ladder_settings, chunk_seconds=0.01)
    controller.start()
    assert controller.wait(60) is RunState.STOPPED, controller.snapshot().error
    tempering = controller.snapshot().tempering
    assert tempering.temperatures.tolist() == [300.0, 400.0]
    assert tempering.groups.tolist() == [[0, 1], [2, 3]]
    assert tempering.exchange_every == 2 and tempering.rounds == 10  # steps 2, 4, …, 20
    assert tempering.acceptance.shape == (1,) and 0.0 <= tempering.acceptance[0] <= 1.0
    history = tempering.history
    assert list(history["step"]) == [0, 5, 10, 15, 20]
    assert history["temperature"].shape == (5, 4)
    # at every point each group holds each level once, and the bath agrees with it
    for row in history["temperature"]:
        for group in tempering.groups:
            assert sorted(row[group]) == [300.0, 400.0]
    final = controller.simulation.integrator.temperature.numpy()
    assert (history["temperature"][-1] == final).all()


def test_a_run_without_ladder_has_no_tempering(fake_run):
    prepare, _ = fake_run()
    controller = SimulationController(settings(steps=4), prepare=prepare)
    controller.start()
    controller.wait(10)
    assert controller.snapshot().tempering is None


@pytest.mark.parametrize(
    ("step", "remaining", "seconds_per_step", "expected"),
    [
        (0, None, None, 1),
        (0, None, 0.001, 10),
        (7, None, 0.0001, 3),
        (0, 4, 0.0001, 4),
        (0, None, 10.0, 1),
    ],
)
def test_plan_chunk(step, remaining, seconds_per_step, expected):
    assert plan_chunk(step, remaining, 10, seconds_per_step, 0.01) == expected


def test_controller_imports_without_the_ui_libraries():
    # a GPU machine drives runs from scripts without ipywidgets, plotly or nglview
    code = (
        "import sys\n"
        "for name in ('ipywidgets', 'plotly', 'nglview'):\n"
        "    sys.modules[name] = None  # any import of it fails\n"
        "from widgets.controller import SimulationController\n"
        "import widgets\n"
        "assert widgets.SimulationController is SimulationController\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert done.returncode == 0, done.stderr
