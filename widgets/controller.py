"""Run a simulation in a background thread that the UI can start, pause, resume and stop.

The controller holds no widgets. A worker thread builds the simulation from
:class:`~workbench.runner.RunSettings`, then steps it in short timed chunks; after
each chunk it records throughput and memory, at every save interval the metrics
and a frame (and, with a temperature ladder, the exchange statistics and every
replica's temperature), and it calls the listeners (the panels), which throttle
themselves. A run with a ladder is stepped through its replica exchange.
Kernel switches requested from the UI, and the backend of a network that has run-time
backends (`workbench.runner.NETWORK_BACKENDS`), are applied between chunks. Whatever goes
wrong in the thread ends the run in the ``error`` state with the message kept in
the snapshot; the thread never dies silently.
"""

from __future__ import annotations

import copy
import math
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

from widgets.background import BackgroundWork
from widgets.kernel_switches import (
    KernelEvent,
    backend_options,
    failure_message,
    network_backend,
    network_backends,
    usable_backend,
    usable_options,
    warning_message,
)
from widgets.run_record import RunRecord
from widgets.snapshot import (
    RunState,
    Snapshot,
    TemperingSnapshot,
)
from workbench.model.options import KernelOptions
from workbench.runner import (
    PreparedRun,
    RunSettings,
    ThroughputMeter,
    backends_of,
    large_system_off,
    prepare_run,
)
from workbench.units import ns_per_day

#: Legal user transitions: action -> states it may start from.
TRANSITIONS = {
    "start": (RunState.IDLE,),
    "pause": (RunState.RUNNING,),
    "resume": (RunState.PAUSED,),
    "stop": (RunState.IDLE, RunState.RUNNING, RunState.PAUSED),
}


class InvalidTransition(RuntimeError):
    """A start/pause/resume/stop that the current state does not allow."""


def plan_chunk(
    step: int,
    remaining: int | None,
    save_interval: int,
    seconds_per_step: float | None,
    chunk_seconds: float,
) -> int:
    """Number of steps for the next chunk.

    Aims at ``chunk_seconds`` of wall time (one step while nothing is measured yet),
    never crosses the next save boundary and never exceeds what is left.

    Parameters
    ----------
    step : int
        Steps done so far.
    remaining : int or None
        Steps left; None when running until stopped.
    save_interval : int
    seconds_per_step : float or None
        Measured on the previous chunk.
    chunk_seconds : float

    Returns
    -------
    int
        At least 1 (0 only when ``remaining`` is 0).
    """
    if seconds_per_step is None or seconds_per_step <= 0:
        steps = 1
    else:
        steps = max(1, int(chunk_seconds / seconds_per_step))
    steps = min(steps, save_interval - step % save_interval)
    if remaining is not None:
        steps = min(steps, remaining)
    return steps


class SimulationController(BackgroundWork):
    """Owns one run and the thread that advances it (listeners, state and the worker
    thread as in :class:`~widgets.background.BackgroundWork`).

    Parameters
    ----------
    settings : RunSettings
        What to simulate; ``settings.options`` are the starting kernel switches.
    until_stopped : bool
        Ignore ``settings.steps`` and run until :meth:`stop`.
    prepare : callable, optional
        ``prepare(settings) -> PreparedRun``; :func:`workbench.runner.prepare_run` by default.
    chunk_seconds : float
        Wall time aimed at per chunk: how quickly pause, stop and switches take effect.
    history_points : int
        Bound on stored metric and throughput rows (older rows are thinned).
    frame_capacity : int
        Bound on stored position frames.
    clock : callable
        Seconds, monotonic; ``time.perf_counter`` by default.
    max_seconds : float, optional
        Wall-time budget: the run stops after the chunk that passes it (a notebook run
        sized to minutes whatever the machine's speed).
    """

    thread_name = "workbench-simulation"
    #: Pause and resume are offered.
    pausable = True

    def __init__(
        self,
        settings: RunSettings,
        until_stopped: bool = False,
        prepare: Callable[[RunSettings], PreparedRun] = prepare_run,
        chunk_seconds: float = 0.25,
        history_points: int = 2000,
        frame_capacity: int = 200,
        clock: Callable[[], float] = time.perf_counter,
        max_seconds: float | None = None,
    ):
        super().__init__()
        self.max_seconds = max_seconds
        self.settings = copy.deepcopy(settings)
        self.until_stopped = bool(until_stopped)
        self.chunk_seconds = float(chunk_seconds)
        self._prepare = prepare
        self._clock = clock
        self._wake = threading.Condition(self._lock)
        self._sim_lock = threading.Lock()
        self._notices: list[str] = []
        self._kernel_messages: list[str] = []
        self._pending_options: KernelOptions | None = None
        # the switches last asked for: a change of backend fits them to the new backend
        self._wanted_options = replace(self.settings.options)
        self._pending_backend: str | None = None
        self._watch_warnings = False
        self._events: list[KernelEvent] = []
        self._record = RunRecord(history_points, frame_capacity)
        self._sim = None
        self._prepared: PreparedRun | None = None
        self._meter: ThroughputMeter | None = None
        self._started_at = 0.0
        self._seconds_per_step: float | None = None

    # -- public state -------------------------------------------------------------
    @property
    def simulation(self):
        """The simulation once built (None before)."""
        return self._sim

    @property
    def target_steps(self) -> int | None:
        """Steps to run, or None when running until stopped."""
        return None if self.until_stopped else int(self.settings.steps)

    # -- transitions --------------------------------------------------------------
    def _transition(self, action: str, new_state: RunState, message: str) -> None:
        with self._lock:
            if self._state not in TRANSITIONS[action]:
                raise InvalidTransition(f"cannot {action} a run that is {self._state.value}")
            self._state = new_state
            self._message = message
            self._wake.notify_all()
            if action == "start":
                self._start_worker()
        self._notify(forced=True)

    def start(self) -> None:
        """Build the simulation and start stepping it in a background thread."""
        self._transition("start", RunState.RUNNING, f"building {self.settings.protein}…")

    def pause(self) -> None:
        """Stop stepping after the current chunk; :meth:`resume` continues."""
        self._transition("pause", RunState.PAUSED, "paused")

    def resume(self) -> None:
        """Continue a paused run."""
        self._transition("resume", RunState.RUNNING, "running")

    def stop(self) -> None:
        """End the run after the current chunk (nothing happens once it has ended)."""
        if self._state in (RunState.STOPPED, RunState.ERROR):
            return
        self._transition("stop", RunState.STOPPED, "stopped by the user")

    def set_options(self, options: KernelOptions) -> None:
        """Request kernel switches; a running simulation takes them at its next chunk."""
        options = replace(options)
        with self._lock:
            self._wanted_options = replace(options)
            if self._sim is None:
                self.settings.options = options
            else:
                self._pending_options = options

    def set_backend(self, backend: str) -> None:
        """Request the network's backend (`workbench.runner.NETWORK_BACKENDS`: a
        tensor-product network's convolution backend, who evaluates a Deep Potential); a
        running simulation takes it at its next chunk, or keeps its backend with the reason
        where it cannot run there (a message and a switch event say which). A Deep
        Potential that goes to deepmd-kit's model switches off the engine's own techniques
        of the network in the run's options, and says so. Before the run is built it is the
        run's setting (``settings.tp_backend``, ``settings.dp_backend``).

        Raises
        ------
        ValueError
            A backend of no network.
        """
        setting = backends_of(backend).setting
        with self._lock:
            if self._sim is None:
                setattr(self.settings, setting, backend)
            else:
                self._pending_backend = backend

    # -- data for the panels --------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """A consistent copy of everything the panels show."""
        with self._lock:
            sim = self._sim
            meter = self._meter
            memory, peak = gpu_memory_gb(sim.device) if sim is not None else (None, None)
            mean = meter.timestep_mol_per_s() if meter and meter.chunks else 0.0
            return Snapshot(
                **self._status_fields(),
                notices=tuple(self._notices),
                kernel_messages=tuple(self._kernel_messages),
                step=sim.step_count if sim is not None else 0,
                target_steps=self.target_steps,
                replicas=sim.replicas if sim is not None else self.settings.replicas,
                timestep_fs=self.settings.timestep_fs,
                device=str(sim.device) if sim is not None else self.settings.device,
                system=getattr(sim, "system", None),
                cutoff=float(getattr(getattr(sim, "potential", None), "cutoff", 0.0)),
                options=replace(sim.options) if sim is not None else self.settings.options,
                backend=network_backend(sim.potential) if sim is not None else None,
                events=tuple(self._events),
                frozen=tuple(sim.frozen_report()) if sim is not None else (),
                mean_timestep_mol_per_s=mean,
                mean_ns_per_day=ns_per_day(mean, self.settings.timestep_fs),
                memory_gb=memory,
                peak_memory_gb=peak,
                **self._record.snapshot_fields(),
            )

    def frames(self) -> list[tuple[int, np.ndarray]]:
        """Recorded frames ``(step, positions [R, n, 3] float32)``, oldest first (decimated)."""
        with self._lock:
            return self._record.frames.rows()

    def with_simulation(self, fn: Callable):
        """Call ``fn(simulation)`` between chunks (so the state is not changing meanwhile)."""
        with self._sim_lock:
            if self._sim is None:
                raise RuntimeError("the simulation has not been built yet")
            return fn(self._sim)

    # -- worker ---------------------------------------------------------------------
    def _set(self, state: RunState | None = None, message: str | None = None) -> None:
        with self._lock:
            if state is not None:
                self._state = state
            if message is not None:
                self._message = message

    def _work(self) -> None:
        self._build()
        self._loop()

    def _build(self) -> None:
        prepared = self._prepare(self.settings)
        sim = prepared.simulation
        with self._lock:
            self._notices.extend(prepared.notices)
        with self._sim_lock:
            requested = sim.options
            applied, message = usable_options(requested, sim.device,
                                              sim.potential.architecture)
            sim.options = applied
            with self._lock:
                self._sim = sim
                self._prepared = prepared
                self._started_at = self._clock()
                self._meter = ThroughputMeter(sim.replicas, self.settings.timestep_fs, sim.device)
                self._events.append(KernelEvent(sim.step_count, 0.0, requested, applied, message,
                                                backend=network_backend(sim.potential)))
                if message:
                    self._kernel_messages.append(message)
                if self._state is RunState.RUNNING:
                    self._message = "running"
            self._record_point(sim)
        self._notify(forced=True)

    def _loop(self) -> None:
        sim = self._sim
        target = self.target_steps
        while True:
            with self._lock:
                while self._state is RunState.PAUSED:
                    self._wake.wait()
                if self._state is not RunState.RUNNING:
                    return
            remaining = None if target is None else target - sim.step_count
            if remaining is not None and remaining <= 0:
                self._set(RunState.STOPPED, f"finished {target} steps")
                return
            if self.max_seconds is not None and (
                self._clock() - self._started_at >= self.max_seconds
            ):
                self._set(
                    RunState.STOPPED,
                    f"stopped at the {self.max_seconds:g}-s budget after {sim.step_count} steps",
                )
                return
            with self._sim_lock:
                self._apply_pending_options(sim)
                self._apply_pending_backend(sim)
                steps = plan_chunk(
                    sim.step_count,
                    remaining,
                    self.settings.save_interval,
                    self._seconds_per_step,
                    self.chunk_seconds,
                )
                self._run_chunk(sim, steps)
            self._notify()

    def _apply_pending_options(self, sim) -> None:
        with self._lock:
            requested, self._pending_options = self._pending_options, None
        if requested is None or requested == sim.options:
            return
        self._switch(sim, requested, *self._fitted(sim, requested))

    @staticmethod
    def _fitted(sim, requested: KernelOptions) -> tuple[KernelOptions, str | None]:
        """``requested`` as ``sim`` runs it here, on its network's backend, and why not all."""
        applied, message = usable_options(requested, sim.device, sim.potential.architecture)
        backends = network_backends(sim.potential)
        if backends is not None:  # what the network's backend does not run stays off
            applied, notice = backend_options(backends, sim.potential.network.backend, applied)
            message = " ".join(m for m in (message, notice) if m) or None
        off = large_system_off(sim.neighbor_list, applied)  # a system searched by cells
        if off:
            applied = replace(applied, **dict.fromkeys(off, False))
            message = " ".join([m for m in (message,) if m] + list(off.values()))
        return applied, message

    def _apply_pending_backend(self, sim) -> None:
        with self._lock:
            requested, self._pending_backend = self._pending_backend, None
        current = network_backend(sim.potential)
        if requested is None or requested == current:
            return
        applied, message = usable_backend(requested, sim.device, sim.potential, current)
        before = sim.options
        if applied != current:  # the switches last asked for, as the new backend runs them
            sim.potential.network.backend = applied
            with self._lock:
                wanted = self._wanted_options
            sim.options, message = self._fitted(sim, wanted)
        with self._lock:
            wall = self._clock() - self._started_at
            self._events.append(KernelEvent(sim.step_count, wall, before, sim.options,
                                            message, backend=applied,
                                            requested_backend=requested))
            if message:
                self._kernel_messages.append(message)
            if applied != current:  # a new backend: its own throughput from here on
                self._meter = ThroughputMeter(sim.replicas, self.settings.timestep_fs,
                                              sim.device)
                self._watch_warnings = True
                self._seconds_per_step = None

    def _backend_failed(self, sim, backend: str, exc: BaseException) -> None:
        backends = network_backends(sim.potential)
        sim.potential.network.backend = backends.default
        message = (f"{backends.subject} {backend!r} failed ({type(exc).__name__}: {exc}); "
                   f"switched back to {backends.default}.")
        with self._lock:
            wall = self._clock() - self._started_at
            self._events.append(KernelEvent(sim.step_count, wall, sim.options, sim.options,
                                            message, backend=backends.default,
                                            requested_backend=backend))
            self._kernel_messages.append(message)
            self._meter = ThroughputMeter(sim.replicas, self.settings.timestep_fs, sim.device)
            self._seconds_per_step = None

    def _switch(self, sim, requested: KernelOptions, applied: KernelOptions, message) -> None:
        sim.options = applied
        with self._lock:
            wall = self._clock() - self._started_at
            self._events.append(KernelEvent(sim.step_count, wall, requested, applied, message,
                                            backend=network_backend(sim.potential)))
            if message:
                self._kernel_messages.append(message)
            self._meter = ThroughputMeter(sim.replicas, self.settings.timestep_fs, sim.device)
            self._watch_warnings = not applied.is_baseline
            self._seconds_per_step = None

    def _run_chunk(self, sim, steps: int) -> None:
        meter = self._meter
        meter.synchronize()
        start = self._clock()
        try:
            self._step_watching_warnings(sim, steps)
        except Exception as exc:
            backends = network_backends(sim.potential)
            if backends is not None and sim.potential.network.backend != backends.default:
                self._backend_failed(sim, sim.potential.network.backend, exc)
                return
            if sim.options.is_baseline:
                raise
            self._switch(
                sim, sim.options, KernelOptions.baseline(), failure_message(sim.options, exc)
            )
            return
        meter.synchronize()
        seconds = self._clock() - start
        meter.record(steps, seconds)
        self._seconds_per_step = seconds / steps
        self._record_chunk(sim, steps, seconds)
        if sim.step_count % self.settings.save_interval == 0 or sim.step_count == self.target_steps:
            self._record_point(sim)

    def _step_watching_warnings(self, sim, steps: int) -> None:
        if not self._watch_warnings:
            self._prepared.advance(steps)
            return
        self._watch_warnings = False
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self._prepared.advance(steps)
        # what the user should see: the engine's own warnings (fallbacks are RuntimeWarning),
        # once each; library deprecation notices say nothing about the run
        texts = list(dict.fromkeys(
            str(w.message) for w in caught
            if not issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning))
        ))
        if texts:
            message = warning_message(sim.options, texts)
            with self._lock:
                self._kernel_messages.append(message)
                self._events.append(
                    KernelEvent(
                        sim.step_count,
                        self._clock() - self._started_at,
                        sim.options,
                        sim.options,
                        message,
                        backend=network_backend(sim.potential),
                    )
                )

    def _record_chunk(self, sim, steps: int, seconds: float) -> None:
        rate = steps * sim.replicas / seconds if seconds > 0 else math.nan
        memory, peak = gpu_memory_gb(sim.device)
        row = {
            "step": sim.step_count,
            "wall_s": self._clock() - self._started_at,
            "steps": steps,
            "seconds": seconds,
            "timestep_mol_per_s": rate,
            "ns_per_day": ns_per_day(rate, self.settings.timestep_fs),
            "memory_gb": math.nan if memory is None else memory,
            "peak_memory_gb": math.nan if peak is None else peak,
        }
        with self._lock:
            self._record.throughput.append(row)

    def _record_point(self, sim) -> None:
        metrics = {k: v.detach().cpu().numpy() for k, v in sim.metrics().items()}
        positions = sim.positions.detach().to("cpu", torch.float32).numpy().copy()
        row = {
            "step": sim.step_count,
            "time_ps": sim.step_count * self.settings.timestep_fs / 1000.0,
            "wall_s": self._clock() - self._started_at,
            "rmsd": metrics["rmsd"],
            "q": metrics["q"],
            "potential_energy": metrics["potential_energy"],
            "temperature": metrics["temperature"],
        }
        exchange = self._prepared.tempering
        if exchange is not None:
            tempering = TemperingSnapshot(
                temperatures=exchange.temperatures.numpy(),
                groups=exchange.groups.numpy(),
                exchange_every=exchange.exchange_every,
                rounds=exchange.rounds,
                acceptance=exchange.acceptance_rates().numpy(),
            )
            temperatures = {
                "step": sim.step_count,
                "time_ps": row["time_ps"],
                "temperature": exchange.replica_temperatures().numpy(),
            }
        with self._lock:
            self._record.metrics.append(row)
            self._record.frames.append((sim.step_count, positions))
            if exchange is not None:
                self._record.tempering = tempering
                self._record.temperatures.append(temperatures)


def gpu_memory_gb(device: torch.device) -> tuple[float | None, float | None]:
    """Currently allocated and peak allocated memory on a CUDA device, GB.

    Parameters
    ----------
    device : torch.device

    Returns
    -------
    (float or None, float or None)
        ``torch.cuda.memory_allocated`` and ``torch.cuda.max_memory_allocated`` in GB;
        ``(None, None)`` on any other device.
    """
    if device.type != "cuda":
        return None, None
    return (
        torch.cuda.memory_allocated(device) / 1e9,
        torch.cuda.max_memory_allocated(device) / 1e9,
    )
