"""Stress without a browser: every panel attached, thousands of frames, repeated starts and
stops, a pause and the end of a run while a panel is drawing. Each scenario runs under a
deadline, so a deadlock fails the test (with every thread's stack) instead of hanging it."""

from __future__ import annotations

import sys
import threading
import time
import traceback

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")
pytest.importorskip("nglview")

from conftest import FakeSimulation  # noqa: E402

from widgets import Workbench  # noqa: E402
from widgets.snapshot import RunState  # noqa: E402
from workbench.runner import PreparedRun, RunSettings  # noqa: E402

#: Seconds a scenario may take before it counts as hung (a 2-core CI machine does each in
#: a fraction of this).
DEADLINE = 120.0


def _thread_dump() -> str:
    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(
        f"--- {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame))
        for ident, frame in sys._current_frames().items()
    )


def within_deadline(body, seconds: float = DEADLINE):
    """Run ``body()`` on a daemon thread; fail with a thread dump when it does not return."""
    outcome: dict = {}

    def target():
        try:
            outcome["value"] = body()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="scenario", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"hung: no return within {seconds:.0f} s\n{_thread_dump()}")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def wait_until(predicate, what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout:.0f} s")
        time.sleep(0.005)


@pytest.fixture
def long_bench(cln025_system):
    """A workbench with every panel, on a fake engine that moves CLN025's beads and records
    a frame at every step; each Start builds a new fake simulation (``sims``, in order)."""
    sims: list[FakeSimulation] = []

    def prepare(settings: RunSettings) -> PreparedRun:
        sim = FakeSimulation(replicas=settings.replicas, system=cln025_system)
        sim.options = settings.options
        sims.append(sim)
        return PreparedRun(settings, None, sim, ["fake engine"])

    settings = RunSettings(protein="cln025", replicas=2, steps=3000, save_interval=1)
    return Workbench(settings, prepare=prepare), sims


@pytest.fixture(scope="module")
def cln025_system():
    from helpers import system

    return system("cln025")


def settle(panel) -> None:
    """Redraw ``panel`` and wait until no thread is drawing it (a refresh asked for while
    another thread draws returns at once and is drawn by that thread)."""
    panel.refresh()
    wait_until(lambda: not panel.drawing, "redraw finished")


def _finish(controller) -> RunState:
    state = controller.wait(DEADLINE)
    assert not controller._thread.is_alive(), "the run's thread did not end"
    return state


def test_ten_thousand_frames_thin_the_slider_without_hanging(long_bench):
    bench, sims = long_bench
    bench.launch.steps.value = 10_000

    def scenario():
        controller = bench.start()
        assert _finish(controller) is RunState.STOPPED
        settle(bench.adjacency)
        return controller

    controller = within_deadline(scenario)
    frames = controller.frames()
    assert sims[0].step_count == 10_000
    assert 100 <= len(frames) <= 200  # thinned 6 times, evenly spread
    slider = bench.adjacency.frame
    assert (slider.max, slider.value) == (len(frames) - 1, len(frames) - 1)
    assert bench.adjacency.follow.value
    assert f"step {frames[-1][0]} " in bench.adjacency.info.value
    assert "step 10,000 / 10,000" in bench.launch.status.value
    edges = bench.adjacency.counts.data[0]
    assert list(edges.x) == [step for step, _ in frames]
    assert not bench.adjacency.error_html.value and not bench.plots.error_html.value


def test_a_slider_left_behind_keeps_its_step_when_frames_are_thinned(long_bench):
    bench, _ = long_bench
    bench.launch.steps.value = 1_000

    def scenario():
        controller = bench.start()
        wait_until(lambda: len(controller.frames()) > 50, "50 frames")
        settle(bench.adjacency)
        shown = bench.adjacency._frame_steps[30]
        bench.adjacency.frame.value = 30  # the user looks back at one frame
        assert not bench.adjacency.follow.value
        _finish(controller)
        settle(bench.adjacency)
        return controller, shown

    controller, shown = within_deadline(scenario)
    steps = [step for step, _ in controller.frames()]
    index = bench.adjacency.frame.value
    assert steps[index] <= shown < (steps[index + 1] if index + 1 < len(steps) else shown + 1)
    assert f"step {steps[index]} " in bench.adjacency.info.value


def test_start_stop_and_start_again_after_a_long_run(long_bench):
    """Each new run shrinks the frame slider and may change the replica menus: the
    observers that fires call back into the panels while they draw."""
    bench, sims = long_bench

    def scenario():
        bench.launch.replicas.value = 3
        first = bench.start()
        assert _finish(first) is RunState.STOPPED  # 3,000 frames: thinned on the way
        for panel in (bench.adjacency, bench.structure, bench.plots):
            panel.replica.value = 2  # the user looks at the last replica
        bench.launch.replicas.value = 2  # ... which the next run does not have
        second = bench.start()
        assert second is not first
        wait_until(lambda: len(sims) == 2 and sims[1].step_count > 20, "second run stepping")
        second.stop()
        assert _finish(second) is RunState.STOPPED
        third = bench.start()
        assert _finish(third) is RunState.STOPPED
        settle(bench.adjacency)
        return third

    third = within_deadline(scenario)
    assert [sim.replicas for sim in sims] == [3, 2, 2]
    assert sims[1].step_count < 3000 and sims[2].step_count == 3000
    assert third.snapshot().step == 3000
    assert bench.adjacency.frame.max == len(third.frames()) - 1
    assert len(bench.adjacency.replica.options) == len(bench.structure.replica.options) == 2
    assert bench.launch.start_button.description == "Start new run"


def test_pause_and_the_end_of_a_run_during_a_redraw(long_bench):
    """A redraw blocked mid-way (as a slow browser would) stops neither Pause nor the run;
    refreshes asked for meanwhile are folded into one more redraw of the final state."""
    bench, sims = long_bench
    bench.launch.steps.value = 2000
    panel = bench.adjacency
    drawing, release = threading.Event(), threading.Event()
    block = {"thread": None}  # None: block the next redraw on any thread
    blocking = threading.Event()
    original = panel.update

    def slow_update(snapshot):
        mine = block["thread"] in (None, threading.current_thread())
        if blocking.is_set() and mine:
            blocking.clear()
            drawing.set()
            assert release.wait(DEADLINE), "never released"
        original(snapshot)

    panel.update = slow_update

    def scenario():
        controller = bench.start()
        wait_until(lambda: sims, "simulation built")
        sim = sims[-1]
        sim.step_seconds = 0.001  # a few seconds of run: room for both collisions
        wait_until(lambda: sim.step_count > 300, "300 steps")
        blocking.set()
        assert drawing.wait(DEADLINE), "the panel never redrew"
        controller.pause()  # while the panel is stuck in its redraw
        assert controller.state is RunState.PAUSED
        release.set()
        wait_until(lambda: not panel.drawing, "redraw finished")
        controller.resume()
        # now a redraw stuck on another thread while the run ends
        drawing.clear()
        release.clear()
        side = threading.Thread(target=panel.refresh, daemon=True)
        block["thread"] = side
        blocking.set()
        side.start()
        assert drawing.wait(DEADLINE)
        assert _finish(controller) is RunState.STOPPED
        panel.refresh()  # returns at once: the stuck redraw draws once more
        release.set()
        side.join(DEADLINE)
        assert not side.is_alive()
        return controller

    controller = within_deadline(scenario)
    frames = controller.frames()
    assert sims[-1].step_count == 2000
    assert f"step {frames[-1][0]} " in panel.info.value  # the final state was drawn
