"""A run spread over several GPUs (or CPU processes), driven from the workbench.

:class:`ShardedController` gives the panels what
:class:`~widgets.controller.SimulationController` gives them (snapshots, frames,
start and stop, kernel requests) for a run of
:func:`workbench.distributed.launch_sharded`: one process per GPU, the whole
ensemble's metrics and positions gathered to this process at every save interval.
The simulations live in those processes, so such a run cannot pause, its kernel
switches are fixed at launch, and there is no live neighbour graph to inspect
(the adjacency panel draws the recorded frames). Stop ends every process at the
next save interval.
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from widgets.background import BackgroundWork
from widgets.controller import InvalidTransition
from widgets.run_record import RunRecord
from widgets.snapshot import RunState, Snapshot, TemperingSnapshot
from workbench.distributed import MetricsReport, ShardedResult, ShardedSettings, launch_sharded
from workbench.model.options import KernelOptions
from workbench.runner import RunSettings, choose_potential
from workbench.system import build_system
from workbench.units import ns_per_day

#: Steps of a "run until stopped" (about 10^8 ns at 4 fs: never reached).
UNTIL_STOPPED_STEPS = 10**15

#: What a kernel request during a sharded run gets as an answer.
FIXED_SWITCHES = (
    "Kernel switches of a run over several processes are fixed at launch; the request "
    "applies to the next run."
)


class ShardedController(BackgroundWork):
    """One ensemble run sharded over processes, watched from the workbench.

    Parameters
    ----------
    settings : RunSettings
        The whole ensemble (``replicas`` in total; ``options`` are its kernel switches).
    ranks : int
        Processes: one per GPU with ``device`` ``cuda``/``auto`` (GPU k for rank k), CPU
        processes talking through gloo with ``device`` ``cpu``.
    until_stopped : bool
        Ignore ``settings.steps`` and run until :meth:`stop`.
    launch : callable, optional
        ``launch(config, on_report=..., should_stop=...) -> ShardedResult``;
        :func:`workbench.distributed.launch_sharded` by default (tests pass a fake).
    timeout_s : float
        Limit on the whole run and on any collective between the processes.
    history_points, frame_capacity : int
        Bounds on stored metric rows and position frames (older ones are thinned).
    clock : callable
        Seconds, monotonic; ``time.perf_counter`` by default.
    """

    thread_name = "workbench-sharded"
    #: The simulations run in other processes: no pause, no live graph.
    pausable = False

    def __init__(
        self,
        settings: RunSettings,
        ranks: int,
        until_stopped: bool = False,
        launch: Callable[..., ShardedResult] = launch_sharded,
        timeout_s: float = 86400.0,
        history_points: int = 2000,
        frame_capacity: int = 200,
        clock: Callable[[], float] = time.perf_counter,
    ):
        super().__init__()
        self.settings = copy.deepcopy(settings)
        self.ranks = int(ranks)
        self.until_stopped = bool(until_stopped)
        self.timeout_s = float(timeout_s)
        self._launch = launch
        self._clock = clock
        self._stop_requested = threading.Event()
        self._record = RunRecord(history_points, frame_capacity)
        self._notices: list[str] = []
        self._kernel_messages: list[str] = []
        self._system = None
        self._cutoff = 0.0
        self._step = 0
        self._mean_rate = 0.0
        self._started_at = 0.0
        self._previous: tuple[int, float] | None = None
        self._frozen: dict[int, int] = {}

    @property
    def target_steps(self) -> int | None:
        """Steps to run, or None when running until stopped."""
        return None if self.until_stopped else int(self.settings.steps)

    def config(self) -> ShardedSettings:
        """What :meth:`start` launches (positions reported for the structure views)."""
        steps = UNTIL_STOPPED_STEPS if self.until_stopped else self.settings.steps
        return ShardedSettings(
            replace(self.settings, steps=steps),
            ranks=self.ranks,
            timeout_s=self.timeout_s,
            report_positions=True,
        )

    # -- transitions --------------------------------------------------------------
    def start(self) -> None:
        """Start the processes from a background thread."""
        with self._lock:
            if self._state is not RunState.IDLE:
                raise InvalidTransition(f"cannot start a run that is {self._state.value}")
            self._state = RunState.RUNNING
            self._message = f"starting {self.ranks} processes…"
            self._start_worker()
        self._notify(forced=True)

    def pause(self) -> None:
        """Refused: the simulations run in other processes."""
        raise InvalidTransition(
            "a run over several processes cannot pause (its simulations run in those "
            "processes); stop it instead"
        )

    resume = pause

    def stop(self) -> None:
        """End the run at its next save interval (nothing happens once it has ended)."""
        with self._lock:
            if self._state in (RunState.STOPPED, RunState.ERROR):
                return
            if self._state is RunState.IDLE:
                self._state, self._message = RunState.STOPPED, "stopped by the user"
            else:
                self._stop_requested.set()
                self._message = "stopping at the next save interval…"
        self._notify(forced=True)

    def set_options(self, options: KernelOptions) -> None:
        """Kernel switches before the start; afterwards a message says they wait."""
        with self._lock:
            if self._thread is None:
                self.settings.options = replace(options)
            elif options != self.settings.options and FIXED_SWITCHES not in self._kernel_messages:
                self._kernel_messages.append(FIXED_SWITCHES)

    # -- data for the panels --------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """A consistent copy of everything the panels show."""
        with self._lock:
            unit = "GPU" if self.settings.device != "cpu" else "CPU process"
            return Snapshot(
                **self._status_fields(),
                notices=tuple(self._notices),
                kernel_messages=tuple(self._kernel_messages),
                step=self._step,
                target_steps=self.target_steps,
                replicas=self.settings.replicas,
                timestep_fs=self.settings.timestep_fs,
                device=f"{self.settings.device} · {self.ranks} × {unit}",
                system=self._system,
                cutoff=self._cutoff,
                options=replace(self.settings.options),
                frozen=tuple(sorted(self._frozen.items())),
                mean_timestep_mol_per_s=self._mean_rate,
                mean_ns_per_day=ns_per_day(self._mean_rate, self.settings.timestep_fs),
                **self._record.snapshot_fields(),
            )

    def frames(self) -> list[tuple[int, np.ndarray]]:
        """Recorded frames ``(step, positions [R, n, 3] float32)``, oldest first (decimated)."""
        with self._lock:
            return self._record.frames.rows()

    def with_simulation(self, fn: Callable):
        """Refused: the simulations are in the other processes."""
        raise RuntimeError(
            "the simulations of a run over several processes live in those processes; "
            "only the recorded frames are here"
        )

    # -- worker ---------------------------------------------------------------------
    def _work(self) -> None:
        settings = self.settings
        config = self.config()
        config.resolve()  # impossible settings end the run before anything loads
        system = build_system(settings.protein, settings.mapping)
        potential, notice = choose_potential(system, settings.model)
        with self._lock:
            self._system, self._cutoff = system, float(potential.cutoff)
            self._notices += [n for n in (notice,) if n]
            self._started_at = self._clock()
            self._message = f"running on {self.ranks} processes"
        self._notify(forced=True)
        result = self._launch(
            config, on_report=self._on_report, should_stop=self._stop_requested.is_set
        )
        with self._lock:
            self._state = RunState.STOPPED
            self._step = result.steps
            self._mean_rate = result.timestep_mol_per_s
            self._message = (
                f"stopped by the user at step {result.steps:,}"
                if result.stopped
                else f"finished {result.steps:,} steps"
            ) + f" on {self.ranks} processes ({result.backend})"

    def _on_report(self, report: MetricsReport) -> None:
        now = self._clock() - self._started_at
        metrics = report.metrics
        row = {
            "step": report.step,
            "time_ps": report.time_ps,
            "wall_s": now,
            **{k: metrics[k] for k in ("rmsd", "q", "potential_energy", "temperature")},
        }
        # the first interval includes the processes' start-up: no rate for it
        first_step, first_wall = self._previous or (0, math.nan)
        seconds = now - first_wall
        rate = (report.step - first_step) * len(report.replicas) / seconds
        throughput = {
            "step": report.step,
            "wall_s": now,
            "steps": report.step - first_step,
            "seconds": seconds,
            "timestep_mol_per_s": rate,
            "ns_per_day": ns_per_day(rate, self.settings.timestep_fs),
            "memory_gb": math.nan,
            "peak_memory_gb": math.nan,
        }
        with self._lock:
            self._previous = (report.step, now)
            self._step = report.step
            self._mean_rate = report.timestep_mol_per_s
            self._record.metrics.append(row)
            self._record.throughput.append(throughput)
            for replica in report.replicas[metrics["frozen"]]:
                self._frozen.setdefault(int(replica), report.step)
            if report.positions is not None:
                self._record.frames.append((report.step, report.positions))
            if report.tempering is not None:
                self._record_tempering(report)
        self._notify()

    def _record_tempering(self, report: MetricsReport) -> None:
        progress = report.tempering
        ladder = np.asarray(progress["temperatures"], dtype=np.float64)
        acceptance = [math.nan if a is None else a for a in progress["acceptance"].values()]
        self._record.tempering = TemperingSnapshot(
            temperatures=ladder,
            groups=np.arange(len(report.replicas)).reshape(-1, ladder.size),
            exchange_every=self.settings.exchange_every,
            rounds=int(progress["exchange_rounds"]),
            acceptance=np.asarray(acceptance, dtype=np.float64),
        )
        self._record.temperatures.append(
            {
                "step": report.step,
                "time_ps": report.time_ps,
                "temperature": report.metrics["temperature_set"],
            }
        )
