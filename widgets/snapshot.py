"""What the panels draw: a consistent, read-only copy of a run's state."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from widgets.kernel_switches import KernelEvent
from workbench.model.options import KernelOptions
from workbench.system.cg_system import CGSystem

#: Columns of the metrics history; per-replica columns have shape (points, replicas).
METRIC_KEYS = ("step", "time_ps", "wall_s", "rmsd", "q", "potential_energy", "temperature")

#: Columns of the throughput history, one row per timed chunk.
THROUGHPUT_KEYS = (
    "step",
    "wall_s",
    "steps",
    "seconds",
    "timestep_mol_per_s",
    "ns_per_day",
    "memory_gb",
    "peak_memory_gb",
)


#: Columns of the temperature history of a run with a ladder; ``temperature`` is (points, R).
TEMPERING_KEYS = ("step", "time_ps", "temperature")


class RunState(str, Enum):
    """Life cycle of a run: idle → running ⇄ paused → stopped, or error."""

    IDLE = "idle"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"
    ERROR = "error"

    @property
    def active(self) -> bool:
        """True while the run can still make progress (running or paused)."""
        return self in (RunState.RUNNING, RunState.PAUSED)


@dataclass(frozen=True)
class TemperingSnapshot:
    """Parallel tempering of a run with a temperature ladder.

    Attributes
    ----------
    temperatures : numpy.ndarray, shape (L,)
        The ladder, K, increasing.
    groups : numpy.ndarray, shape (W, L), int
        Replica numbers of each exchange group (replicas that swap temperatures).
    exchange_every : int
        Steps between exchange rounds.
    rounds : int
        Exchange rounds so far.
    acceptance : numpy.ndarray, shape (L − 1,)
        Accepted fraction of attempted swaps per neighbouring pair (NaN before any).
    history : dict of str to numpy.ndarray
        Columns :data:`TEMPERING_KEYS` (decimated): each replica's bath temperature (K)
        at every recorded point.
    """

    temperatures: np.ndarray
    groups: np.ndarray
    exchange_every: int
    rounds: int
    acceptance: np.ndarray
    history: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    """State of a run at one moment.

    Attributes
    ----------
    state : RunState
    message : str
        Latest status message ("building cln025…", "finished 200 steps", ...).
    error : str or None
        ``"ExceptionType: text"`` of the failure that ended the run.
    traceback : str or None
    notices : tuple of str
        What preparing the run reported (CPU fallback, untrained model, ...).
    kernel_messages : tuple of str
        Kernel fallbacks and engine warnings, oldest first.
    display_errors : tuple of str
        Failures of display callbacks (the run itself went on).
    step : int
    target_steps : int or None
        None when running until stopped.
    replicas : int
    timestep_fs : float
    device : str
    system : CGSystem or None
        None until the simulation is built.
    cutoff : float
        SchNet graph radius, Å.
    options : KernelOptions
        Switches the simulation uses now.
    backend : str or None
        The backend the network uses now, for a network with run-time backends
        (`workbench.runner.NETWORK_BACKENDS`: a tensor-product network's convolution
        backend, who evaluates a Deep Potential); None for other networks and before the
        simulation is built.
    metrics : dict of str to numpy.ndarray
        Columns :data:`METRIC_KEYS` (decimated).
    throughput : dict of str to numpy.ndarray
        Columns :data:`THROUGHPUT_KEYS` (decimated; NaN memory off CUDA).
    events : tuple of KernelEvent
    frame_steps : numpy.ndarray, shape (F,)
        Steps of the recorded frames (see ``SimulationController.frame``).
    latest_positions : numpy.ndarray or None, shape (R, n, 3)
    frozen : tuple of (int, int)
        (replica, step) of frozen replicas.
    mean_timestep_mol_per_s : float
        Since the last kernel switch, warm-up chunk excluded.
    mean_ns_per_day : float
    memory_gb, peak_memory_gb : float or None
        Allocated now and peak since the last kernel switch (CUDA only).
    tempering : TemperingSnapshot or None
        None for a run without a temperature ladder.
    """

    state: RunState
    message: str = ""
    error: str | None = None
    traceback: str | None = None
    notices: tuple[str, ...] = ()
    kernel_messages: tuple[str, ...] = ()
    display_errors: tuple[str, ...] = ()
    step: int = 0
    target_steps: int | None = None
    replicas: int = 0
    timestep_fs: float = 0.0
    device: str = ""
    system: CGSystem | None = None
    cutoff: float = 0.0
    options: KernelOptions = field(default_factory=KernelOptions)
    backend: str | None = None
    metrics: dict[str, np.ndarray] = field(default_factory=dict)
    throughput: dict[str, np.ndarray] = field(default_factory=dict)
    events: tuple[KernelEvent, ...] = ()
    frame_steps: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    latest_positions: np.ndarray | None = None
    frozen: tuple[tuple[int, int], ...] = ()
    mean_timestep_mol_per_s: float = 0.0
    mean_ns_per_day: float = 0.0
    memory_gb: float | None = None
    peak_memory_gb: float | None = None
    tempering: TemperingSnapshot | None = None

    @property
    def points(self) -> int:
        """Number of recorded metric points."""
        step = self.metrics.get("step")
        return 0 if step is None else int(step.shape[0])
