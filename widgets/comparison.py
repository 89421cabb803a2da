"""A/B race of two kernel configurations, two network architectures, or two backends of one
network (`workbench.runner.NETWORK_BACKENDS`: a tensor-product network's convolution
backends, the engine against deepmd-kit evaluating a Deep Potential), on the same system,
seeds and device.

Both simulations start from the same coordinates with the same seed; of one architecture
they share one potential, of two each side has the untrained demo model of its own (or the
model file, which must hold that side's network). A background thread advances them in
alternating chunks, so both lines of the race plot grow together and both feel the same
machine load. Each chunk is timed on its own (with a device synchronisation), peak memory
is taken per chunk, Q is sampled after every chunk, and the forces of both configurations
are compared on identical coordinates at the start and at the end (sides of one potential
only: two networks' forces differ by design). Two backends of one network share its
potential: each side's backend is set on the network before each of its chunks and force
evaluations.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from widgets.background import BackgroundWork
from widgets.kernel_switches import (
    backend_options,
    failure_message,
    network_backends,
    options_label,
    usable_backend,
    usable_options,
)
from widgets.snapshot import RunState
from workbench.md import LangevinIntegrator, Simulation
from workbench.model.options import FASTEST, KernelOptions
from workbench.model.potential import Potential
from workbench.neighbors import Graph
from workbench.runner import (
    NETWORK_BACKENDS,
    PreparedRun,
    RunSettings,
    ThroughputMeter,
    backends_of,
    prepare_run,
)
from workbench.units import FS_PER_PS


@dataclass(frozen=True)
class ForceDeviation:
    """Largest force difference between configurations A and B.

    Attributes
    ----------
    max_abs : float
        ``max |F_A - F_B|`` over replicas, beads and components, kcal/mol/Å.
    max_force : float
        ``max |F_A|``, for scale, kcal/mol/Å.
    """

    max_abs: float
    max_force: float

    @property
    def relative(self) -> float:
        """``max_abs / max_force`` (0 when all forces vanish)."""
        return self.max_abs / self.max_force if self.max_force > 0 else 0.0


def force_deviation(
    potential: Potential,
    positions: torch.Tensor,
    graph: Graph | None,
    options_a: KernelOptions,
    options_b: KernelOptions,
    backends: tuple[str | None, str | None] = (None, None),
) -> ForceDeviation:
    """Evaluate the forces of both configurations on identical positions and compare them.

    Parameters
    ----------
    potential : Potential
    positions : torch.Tensor, shape (R, n, 3)
    graph : Graph or None
        Neighbour graph valid for ``positions``.
    options_a, options_b : KernelOptions
    backends : (str or None, str or None)
        Backend of A and of B for a network with run-time backends (None: as it is); the
        network's own is restored afterwards.
    """
    network = potential.network
    kept = getattr(network, "backend", None)
    try:
        if backends[0] is not None:
            network.backend = backends[0]
        _, forces_a = potential.energy_and_forces(positions, graph, options_a)
        if backends[1] is not None:
            network.backend = backends[1]
        _, forces_b = potential.energy_and_forces(positions, graph, options_b)
    finally:
        if kept is not None:
            network.backend = kept
    return ForceDeviation(
        max_abs=float((forces_a - forces_b).abs().max()),
        max_force=float(forces_a.abs().max()),
    )


#: Configurations offered for A and B: their labels and `KernelOptions.parse` names.
PRESETS: dict[str, str] = {
    "baseline (PyTorch)": "baseline",
    "fastest: tables + CUDA graph": FASTEST,
    "all fused + tables + CUDA graph": "all+tables+graph",
    "all fused, fp32": "all",
    "all fused, bf16": "all-bf16",
    "all fused, fp16": "all-fp16",
}


@dataclass(frozen=True)
class SideSnapshot:
    """Progress of one configuration.

    Attributes
    ----------
    name : str
        ``"A"`` or ``"B"``.
    network : str or None
        Architecture of the side's network (None: a prior-only potential).
    backend : str or None
        The backend the network ran with, for a network with run-time backends
        (`workbench.runner.NETWORK_BACKENDS`; None for other networks).
    requested_backend : str or None
        The backend asked for; it differs from ``backend`` where the side fell back.
    label : str
        Applied switches (``"baseline"``, ``"fused_radial_basis+…"``).
    requested_label : str
        The switches asked for; they differ from ``label`` where the side fell back.
    wall_s : numpy.ndarray, shape (c,)
        Own cumulative wall time after each chunk.
    timestep_mol : numpy.ndarray, shape (c,)
        Cumulative steps × replicas after each chunk.
    rate : numpy.ndarray, shape (c,)
        timestep·mol/s of each chunk.
    mean_rate : float
        Aggregate timestep·mol/s, first (warm-up) chunk excluded.
    peak_memory_gb : float or None
        CUDA only.
    q : numpy.ndarray, shape (samples,)
        Q of every replica after every chunk.
    """

    name: str
    network: str | None
    label: str
    requested_label: str
    wall_s: np.ndarray
    timestep_mol: np.ndarray
    rate: np.ndarray
    mean_rate: float
    peak_memory_gb: float | None
    q: np.ndarray
    backend: str | None = None
    requested_backend: str | None = None

    @property
    def fell_back(self) -> bool:
        """True when this side runs other switches, or another backend, than were asked
        for."""
        return self.label != self.requested_label or self.backend != self.requested_backend

    @property
    def network_label(self) -> str:
        """``"egnn"``, ``"nequip/openequivariance"``, ``"dp/deepmd"`` (with its backend),
        ``"priors only"``."""
        name = self.network or "priors only"
        return name if self.backend is None else f"{name}/{self.backend}"

    @property
    def ran(self) -> str:
        """What the side ran: ``"nequip/e3nn · baseline"``."""
        return f"{self.network_label} · {self.label}"

    @property
    def asked(self) -> str:
        """What the side asked for, in the same form as :attr:`ran`."""
        name = self.network or "priors only"
        if self.requested_backend is not None:
            name = f"{name}/{self.requested_backend}"
        return f"{name} · {self.requested_label}"


@dataclass(frozen=True)
class CompareSnapshot:
    """State of a comparison; ``a`` and ``b`` are None until the simulations exist."""

    state: RunState
    message: str = ""
    error: str | None = None
    traceback: str | None = None
    messages: tuple[str, ...] = ()
    display_errors: tuple[str, ...] = ()
    a: SideSnapshot | None = None
    b: SideSnapshot | None = None
    deviation_start: ForceDeviation | None = None
    deviation_end: ForceDeviation | None = None

    @property
    def speedup(self) -> float | None:
        """timestep·mol/s of B over A: None until both are measured, and None when a side
        fell back (the race then compares something else than was asked for)."""
        if self.a is None or self.b is None or not self.a.mean_rate > 0:
            return None
        if self.a.fell_back or self.b.fell_back:
            return None
        return self.b.mean_rate / self.a.mean_rate

    @property
    def fallback_note(self) -> str | None:
        """Why there is no speedup to show, when a side fell back (None otherwise)."""
        sides = [side for side in (self.a, self.b) if side is not None and side.fell_back]
        if not sides:
            return None
        return "; ".join(
            f"{side.name} asked for {side.requested_label} but ran {side.label}"
            if side.backend == side.requested_backend else
            f"{side.name} asked for {side.asked} but ran {side.ran}"
            for side in sides
        ) + ": no speedup to show"


@dataclass
class _Side:
    name: str
    sim: Simulation
    meter: ThroughputMeter
    requested: KernelOptions
    backend: str | None = None
    requested_backend: str | None = None
    wall_s: list[float] = field(default_factory=list)
    timestep_mol: list[float] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)
    peak_memory_gb: float | None = None
    q: list[np.ndarray] = field(default_factory=list)

    def snapshot(self) -> SideSnapshot:
        chunks = self.meter.chunks
        return SideSnapshot(
            name=self.name,
            network=self.sim.potential.architecture,
            label=options_label(self.sim.options),
            requested_label=options_label(self.requested),
            wall_s=np.array(self.wall_s),
            timestep_mol=np.array(self.timestep_mol),
            rate=np.array(self.rate),
            mean_rate=self.meter.timestep_mol_per_s() if chunks else 0.0,
            peak_memory_gb=self.peak_memory_gb,
            q=np.concatenate(self.q) if self.q else np.empty(0),
            backend=self.backend,
            requested_backend=self.requested_backend,
        )


def twin_simulation(sim: Simulation, settings: RunSettings, options: KernelOptions) -> Simulation:
    """A second simulation of the same system and potential, same seed, other switches."""
    integrator = LangevinIntegrator(
        settings.timestep_fs / FS_PER_PS, settings.friction, settings.temperature
    )
    return Simulation(
        sim.system,
        sim.potential,
        integrator,
        replicas=sim.replicas,
        device=sim.device,
        seed=settings.seed,
        options=options,
        neighbors=copy.deepcopy(settings.neighbors),
    )


class CompareRunner(BackgroundWork):
    """Race configuration A against B.

    Parameters
    ----------
    settings : RunSettings
        System, model, replicas, temperature, time step, seed and device of both runs.
    options_a, options_b : KernelOptions
    steps : int
        Steps each configuration runs.
    chunk_steps : int, optional
        Steps per timed chunk; default ``steps // 10`` (at least 1).
    prepare : callable, optional
        ``prepare(settings) -> PreparedRun``.
    clock : callable
    architectures : (str, str), optional
        Network architecture of A and of B (default both ``settings.architecture``); two
        different ones race two networks, each prepared from the settings with its own.
    backends : (str or None, str or None), optional
        Backend of A and of B (`workbench.runner.NETWORK_BACKENDS`), for a side whose network
        has run-time backends (None, the default: the settings' backend of that network,
        ``settings.tp_backend`` or ``settings.dp_backend``); two of one network race its
        backends on one potential. A backend that cannot run on the device is refused with
        its reason and the side runs the network's default (no speedup is shown). A side
        on deepmd-kit's model runs none of the engine's techniques of the network: they
        are off in what it asks for, and a message says so.

    Raises
    ------
    SettingsError
        An architecture that is not registered.
    ValueError
        A backend of no network, or of another network than its side's.
    """

    thread_name = "workbench-compare"

    def __init__(
        self,
        settings: RunSettings,
        options_a: KernelOptions,
        options_b: KernelOptions,
        steps: int,
        chunk_steps: int | None = None,
        prepare: Callable[[RunSettings], PreparedRun] = prepare_run,
        clock: Callable[[], float] = time.perf_counter,
        architectures: tuple[str, str] | None = None,
        backends: tuple[str, str] | None = None,
    ):
        if steps < 1:
            raise ValueError(f"steps must be at least 1, got {steps}")
        self.settings = copy.deepcopy(settings)
        self.architectures = tuple(architectures or (settings.architecture or "schnet",) * 2)
        for architecture in self.architectures:  # refused here, not in the worker
            replace(self.settings, architecture=architecture)
        chosen = []
        for side, architecture, backend in zip("AB", self.architectures,
                                               backends or (None, None), strict=True):
            if backend is None:
                own = NETWORK_BACKENDS.get(architecture)
                backend = None if own is None else getattr(self.settings, own.setting)
            else:
                try:
                    owner = backends_of(backend).architecture
                except ValueError as exc:
                    raise ValueError(f"{side}: {exc}") from None
                if owner != architecture:
                    raise ValueError(f"{side}: {backend!r} is a backend of the {owner} "
                                     f"network; {side}'s is {architecture}")
            chosen.append(backend)
        self.backends = tuple(chosen)
        self.options_a = replace(options_a)
        self.options_b = replace(options_b)
        self.steps = int(steps)
        self.chunk_steps = int(chunk_steps) if chunk_steps else max(1, self.steps // 10)
        super().__init__()
        self._prepare = prepare
        self._clock = clock
        self._messages: list[str] = []
        self._sides: list[_Side] = []
        self._deviation: dict[str, ForceDeviation | None] = {"start": None, "end": None}

    def start(self) -> None:
        """Start the race in a background thread."""
        with self._lock:
            if self._state is not RunState.IDLE:
                raise RuntimeError(f"cannot start a comparison that is {self._state.value}")
            self._state = RunState.RUNNING
            self._message = "building both simulations…"
            self._start_worker()
        self._notify(True)

    def stop(self) -> None:
        """End the race after the current chunk."""
        with self._lock:
            if self._state is RunState.RUNNING:
                self._state = RunState.STOPPED
                self._message = "stopped by the user"
        self._notify(True)

    def snapshot(self) -> CompareSnapshot:
        """A consistent copy of the race so far."""
        with self._lock:
            sides = [side.snapshot() for side in self._sides]
            return CompareSnapshot(
                **self._status_fields(),
                messages=tuple(self._messages),
                a=sides[0] if sides else None,
                b=sides[1] if sides else None,
                deviation_start=self._deviation["start"],
                deviation_end=self._deviation["end"],
            )

    # -- worker ---------------------------------------------------------------------
    def _work(self) -> None:
        self._build()
        self._measure_deviation("start")
        self._race()
        self._measure_deviation("end")
        with self._lock:
            if self._state is RunState.RUNNING:
                self._state = RunState.STOPPED
                self._message = f"finished {self.steps} steps each"

    def _build(self) -> None:
        # a race of kernel switches: both sides at one temperature, without exchanges
        arch_a, arch_b = self.architectures
        settings = replace(self.settings, options=KernelOptions.baseline(), ladder=None,
                           architecture=arch_a,
                           **{b.setting: b.default for b in NETWORK_BACKENDS.values()})
        prepared = self._prepare(settings)
        notices = list(prepared.notices)
        sim_a = prepared.simulation
        if arch_b == arch_a:
            sim_b = twin_simulation(sim_a, self.settings, KernelOptions.baseline())
        else:
            other = self._prepare(replace(settings, architecture=arch_b))
            sim_b = other.simulation
            notices = [f"A: {n}" for n in notices] + [f"B: {n}" for n in other.notices]
        sides = []
        for name, sim, requested, backend in (("A", sim_a, self.options_a, self.backends[0]),
                                              ("B", sim_b, self.options_b, self.backends[1])):
            side = _Side(name, sim, ThroughputMeter(sim.replicas, self.settings.timestep_fs,
                                                    sim.device), requested)
            own = network_backends(sim.potential)
            if own is not None:
                side.requested_backend = backend or own.default
                side.backend, refusal = usable_backend(side.requested_backend, sim.device,
                                                       sim.potential, own.default)
                side.requested, notice = backend_options(own, side.backend, requested)
                self._messages += [f"{name}: {m}" for m in (refusal, notice) if m]
            sim.options, message = usable_options(side.requested, sim.device,
                                                  sim.potential.architecture)
            if message:
                self._messages.append(f"{name}: {message}")
            sides.append(side)
        with self._lock:
            self._messages[:0] = notices
            self._sides = sides
            self._message = "racing"
        self._notify(True)

    def _measure_deviation(self, when: str) -> None:
        sim_a, sim_b = self._sides[0].sim, self._sides[1].sim
        if sim_b.potential is not sim_a.potential:
            if when == "start":
                with self._lock:
                    self._messages.append(
                        f"A ({sim_a.potential.architecture}) and B "
                        f"({sim_b.potential.architecture}) are different networks: their "
                        "forces are not compared")
            return
        try:
            deviation = force_deviation(
                sim_a.potential, sim_a.positions, sim_a.graph, sim_a.options, sim_b.options,
                (self._sides[0].backend, self._sides[1].backend),
            )
        except Exception as exc:  # noqa: BLE001 - reported, the race itself is still valid
            with self._lock:
                self._messages.append(f"force comparison ({when}) failed: {exc}")
            return
        with self._lock:
            self._deviation[when] = deviation

    def _race(self) -> None:
        done = 0
        while done < self.steps:
            steps = min(self.chunk_steps, self.steps - done)
            for side in self._sides:
                if self._state is not RunState.RUNNING:
                    return
                self._timed_chunk(side, steps)
                self._notify()
            done += steps

    def _timed_chunk(self, side: _Side, steps: int) -> None:
        sim, meter = side.sim, side.meter
        if sim.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(sim.device)
        if side.backend is not None:  # the sides of one network share it
            sim.potential.network.backend = side.backend
        meter.synchronize()
        start = self._clock()
        try:
            sim.step(steps)
        except Exception as exc:
            own = network_backends(sim.potential)
            if side.backend is not None and side.backend != own.default:
                message = (f"{own.subject} {side.backend!r} failed ({type(exc).__name__}: "
                           f"{exc}); switched back to {own.default}")
                side.backend = sim.potential.network.backend = own.default
                with self._lock:
                    self._messages.append(f"{side.name}: {message}")
                return
            if sim.options.is_baseline:
                raise
            message = failure_message(sim.options, exc)
            sim.options = KernelOptions.baseline()
            with self._lock:
                self._messages.append(f"{side.name}: {message}")
            start = self._clock()
            sim.step(steps)
        meter.synchronize()
        seconds = self._clock() - start
        q = sim.metrics()["q"].detach().cpu().numpy()
        with self._lock:
            meter.record(steps, seconds)
            side.wall_s.append((side.wall_s[-1] if side.wall_s else 0.0) + seconds)
            previous = side.timestep_mol[-1] if side.timestep_mol else 0.0
            side.timestep_mol.append(previous + steps * sim.replicas)
            side.rate.append(steps * sim.replicas / seconds if seconds > 0 else 0.0)
            if sim.device.type == "cuda":
                peak = torch.cuda.max_memory_allocated(sim.device) / 1e9
                side.peak_memory_gb = max(peak, side.peak_memory_gb or 0.0)
            side.q.append(q)
