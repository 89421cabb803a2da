"""A simulation: one system, one potential, one integrator, R replicas.

The pieces stay apart as in OpenMM's Python layer: :class:`~workbench.system.CGSystem`
(what is simulated), :class:`~workbench.model.Potential` (its energy),
an :class:`~workbench.md.integrators.Integrator` (how it moves), and this class,
which owns the state, the random generator, the neighbour list and the reporters.

A replica whose positions or forces become non-finite, whose largest force
exceeds ``max_force`` or whose extent exceeds ``max_extent`` is frozen at its
last good configuration and reported; the other replicas go on. The check runs
on the device every step without host synchronisation.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from workbench.analysis import fraction_native_contacts, rmsd
from workbench.files import atomic_save
from workbench.md.captured_steps import (
    SEARCHED_HEADROOM,
    CapturedSteps,
    DynamicState,
    captured_steps_problem,
)
from workbench.md.integrators import Integrator, LangevinIntegrator, maxwell_boltzmann
from workbench.model.force_paths import reads_candidates
from workbench.model.fused_schnet import warn_fallback_once
from workbench.model.options import KernelOptions
from workbench.model.potential import Potential
from workbench.neighbors import CELL_LIST_ABOVE, Graph, NeighborList, NeighborListOverflow
from workbench.system.cg_system import CGSystem
from workbench.system.topology import bonded_exclusions
from workbench.units import KB, KCAL_TO_AMU_A2_PS2

CHECKPOINT_FORMAT = "cg-workbench-checkpoint"


class CheckpointError(ValueError):
    """A checkpoint that does not belong to this simulation or is unreadable."""


@dataclass
class NeighborSettings:
    """How the SchNet graph is built.

    Attributes
    ----------
    skin : float
        Verlet skin, Å.
    exclude_bonded : bool
        Leave 1-2, 1-3 and 1-4 bonded pairs out of the SchNet graph.
    capacity : int or None
        Fixed number of edge slots (for graph capture); None for exact lists.
    cell_list_above : int
        Beads per replica above which the candidates come from a cell list instead of
        dense blocks (`workbench.neighbors.CELL_LIST_ABOVE`; docs/large-systems.md).
    """

    skin: float = 2.0
    exclude_bonded: bool = False
    capacity: int | None = None
    cell_list_above: int = CELL_LIST_ABOVE


@dataclass
class SafetyLimits:
    """Per-replica blow-up thresholds.

    Attributes
    ----------
    max_force : float
        Largest allowed force component magnitude, kcal/mol/Å.
    max_extent : float or None
        Largest allowed distance of a bead from its replica's centroid, Å
        (None: 50 Å + 4 Å per residue).
    """

    max_force: float = 1.0e4
    max_extent: float | None = None


class Simulation:
    """R replicas of one coarse-grained system.

    Parameters
    ----------
    system : CGSystem
    potential : Potential
    integrator : Integrator
    replicas : int
    positions : torch.Tensor, shape (n, 3) or (R, n, 3), optional
        Starting coordinates (Å); default: the native structure for every replica.
    device : str or torch.device
    seed : int
        Seed of the generator that draws initial velocities and Langevin noise.
    options : KernelOptions, optional
        Which fused kernels to use; may be changed between steps.
    neighbors : NeighborSettings, optional
    limits : SafetyLimits, optional
    """

    def __init__(
        self,
        system: CGSystem,
        potential: Potential,
        integrator: Integrator,
        replicas: int = 1,
        positions: torch.Tensor | None = None,
        device: str | torch.device = "cpu",
        seed: int = 0,
        options: KernelOptions | None = None,
        neighbors: NeighborSettings | None = None,
        limits: SafetyLimits | None = None,
    ):
        if int(replicas) < 1:
            raise ValueError(f"need at least one replica, got {replicas}")
        if potential.n_beads != system.n_beads:
            raise ValueError(
                f"potential is for {potential.n_beads} beads, system {system.name} "
                f"has {system.n_beads}"
            )
        self.device = torch.device(device)
        self.system = system.to(self.device)
        self.potential = potential.to(self.device)
        self.integrator = integrator
        self.replicas = int(replicas)
        self.seed = int(seed)
        self.options = options or KernelOptions()
        self.neighbor_settings = neighbors or NeighborSettings()
        self.limits = limits or SafetyLimits()
        if self.limits.max_extent is None:
            self.limits.max_extent = 50.0 + 4.0 * system.n_residues
        self.reporters: list = []
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(self.seed)
        self.inv_mass = (KCAL_TO_AMU_A2_PS2 / self.system.masses.float())[:, None]
        self.neighbor_list = self._make_neighbor_list()
        self.graph: Graph | None = None
        self._captured: CapturedSteps | None = None
        self._search_slots = 0  # edge slots per replica of eager pair searches

        pos = self._initial_positions(positions)
        temperature = getattr(integrator, "temperature", torch.tensor([300.0]))
        masses = self.system.masses.float()
        vel = maxwell_boltzmann(masses, temperature, self.replicas, self.generator)
        self.positions = pos
        self.velocities = vel
        self.step_count = 0
        self.frozen = torch.zeros(self.replicas, dtype=torch.bool, device=self.device)
        self.frozen_step = torch.full((self.replicas,), -1, dtype=torch.long, device=self.device)
        self.energy, self.forces = self._evaluate(pos)

    # -- set-up -------------------------------------------------------------------
    def _make_neighbor_list(self) -> NeighborList | None:
        if self.potential.network is None:
            return None
        settings = self.neighbor_settings
        exclusions = bonded_exclusions(self.system) if settings.exclude_bonded else None
        return NeighborList(
            self.system.n_beads,
            self.potential.cutoff,
            skin=settings.skin,
            exclusions=exclusions,
            capacity=settings.capacity,
            cell_list_above=settings.cell_list_above,
        )

    def _initial_positions(self, positions: torch.Tensor | None) -> torch.Tensor:
        n = self.system.n_beads
        if positions is None:
            positions = self.system.native_positions
        positions = torch.as_tensor(positions, dtype=torch.float32, device=self.device)
        if tuple(positions.shape) == (n, 3):
            positions = positions[None].expand(self.replicas, n, 3)
        if tuple(positions.shape) != (self.replicas, n, 3):
            raise ValueError(
                f"starting positions must have shape ({n}, 3) or ({self.replicas}, {n}, 3), "
                f"got {tuple(positions.shape)}"
            )
        if not torch.isfinite(positions).all():
            raise ValueError("starting positions contain NaN or infinite coordinates")
        return positions.contiguous().clone()

    # -- force evaluation ---------------------------------------------------------
    def _triton_here(self) -> bool:
        from kernels import triton_available
        from kernels._triton import INTERPRET

        return triton_available() and (self.device.type == "cuda" or INTERPRET)

    def fuses_steps(self) -> bool:
        """Whether Langevin steps run as the two Triton kernels of ``kernels.langevin`` (the
        ``fused_integrator`` switch, a Langevin integrator, Triton on this device)."""
        return (self.options.fused_integrator and isinstance(self.integrator, LangevinIntegrator)
                and self._triton_here())

    def searches_pairs(self) -> bool:
        """Whether the SchNet graph comes from the Triton pair search (the
        ``fused_pair_search`` switch, where Triton runs on this device and the system is
        small enough for dense search, `NeighborList.dense`)."""
        return (self.options.fused_pair_search and self.neighbor_list is not None
                and self.neighbor_list.dense and self._triton_here())

    def _searched_graph(self, pos: torch.Tensor) -> Graph:
        """An eager step's searched graph; its capacity grows (one host check per step)."""
        nl = self.neighbor_list
        if not self._search_slots:
            self._search_slots = math.ceil(SEARCHED_HEADROOM * nl.slots_needed(pos)) + 1
        graph, needed = nl.searched_graph(pos, self._search_slots)
        needed = int(needed)
        if needed > self._search_slots:
            self._search_slots = math.ceil(SEARCHED_HEADROOM * needed) + 1
            graph, _ = nl.searched_graph(pos, self._search_slots)
        return graph

    def _graph_for(self, pos: torch.Tensor) -> Graph | None:
        if self.neighbor_list is None:
            return None
        if self.searches_pairs():
            return self._searched_graph(pos)
        # Paths that materialise edge tensors get the exact edge list (as CGSchNet users run
        # it); the fused per-edge kernels get the static candidate arrays and drop edges
        # beyond the cutoff on the device, without a host synchronisation.
        exact = not reads_candidates(self.potential.network, self.options)
        try:
            return self.neighbor_list.update(pos, exact=exact)
        except NeighborListOverflow as overflow:
            self.neighbor_list.capacity = int(overflow.needed * 1.25) + 1
            self.neighbor_settings.capacity = self.neighbor_list.capacity
            return self.neighbor_list.update(pos, exact=exact)

    def _evaluate(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.graph = self._graph_for(pos)
        return self.potential.energy_and_forces(pos, self.graph, self.options)

    # -- stepping -----------------------------------------------------------------
    def _blown_up(self, pos: torch.Tensor, forces: torch.Tensor) -> torch.Tensor:
        """Replicas that left the safe region, shape (R,) bool (no host sync)."""
        finite = torch.isfinite(pos).flatten(1).all(1) & torch.isfinite(forces).flatten(1).all(1)
        too_strong = forces.abs().flatten(1).amax(1) > self.limits.max_force
        centred = pos - pos.mean(1, keepdim=True)
        too_wide = torch.linalg.vector_norm(centred, dim=-1).amax(1) > self.limits.max_extent
        return ~finite | too_strong | too_wide

    @property
    def state(self) -> DynamicState:
        """The dynamic state (positions, velocities, forces, energy, frozen flags)."""
        return DynamicState(
            self.positions, self.velocities, self.forces, self.energy,
            self.frozen, self.frozen_step,
        )

    def _set_state(self, state: DynamicState) -> None:
        (self.positions, self.velocities, self.forces, self.energy,
         self.frozen, self.frozen_step) = state

    def integrate(
        self, state: DynamicState, next_step, evaluate, in_place: bool = False
    ) -> DynamicState:
        """One integrator step of ``state`` with per-replica blow-up freezing.

        Parameters
        ----------
        state : DynamicState
        next_step : int or torch.Tensor
            Number of the step being taken (recorded for replicas frozen by it).
        evaluate : callable
            ``evaluate(pos) -> (energy (R,), forces (R, n, 3))``.
        in_place : bool
            Allow the new state to be written over ``state`` (the fused Langevin kernels do;
            a captured step, whose state lives in fixed buffers, then copies nothing).

        Returns
        -------
        DynamicState
            Frozen replicas keep their old values. No host synchronisation.
        """
        if self.fuses_steps():
            return self._integrate_fused(state, next_step, evaluate, in_place)
        energy = []

        def force_fn(pos):
            e, f = evaluate(pos)
            energy.append(e)
            return f

        pos, vel, forces = self.integrator.step(
            state.positions, state.velocities, state.forces, self.inv_mass, force_fn,
            self.generator,
        )
        bad = self._blown_up(pos, forces) & ~state.frozen
        frozen = state.frozen | bad
        keep = frozen[:, None, None]
        return DynamicState(
            torch.where(keep, state.positions, pos),
            torch.where(keep, state.velocities, vel),
            torch.where(keep, state.forces, forces),
            torch.where(frozen, state.energy, energy[-1]),
            frozen,
            torch.where(bad, next_step, state.frozen_step),
        )

    def _integrate_fused(
        self, state: DynamicState, next_step, evaluate, in_place: bool
    ) -> DynamicState:
        """:meth:`integrate` through ``kernels.langevin`` (same BAOAB step, same checks)."""
        from kernels.langevin import langevin_drift, langevin_finish

        it = self.integrator
        pos, vel = state.positions, state.velocities
        kt = it.thermal_energy(pos.shape[0], pos.device, pos.dtype)
        noise = torch.randn(vel.shape, generator=self.generator, device=vel.device,
                            dtype=vel.dtype)
        pos, vel = langevin_drift(pos, vel, state.forces, self.inv_mass, kt, noise,
                                  it.timestep, *it.ou_coefficients())
        energy, forces = evaluate(pos)
        limits = self.limits
        return DynamicState(*langevin_finish(
            state, pos, vel, forces, energy, self.inv_mass, it.timestep, limits.max_force,
            limits.max_extent, next_step, in_place))

    def applied_options(self) -> KernelOptions:
        """The kernel options as they run here: a technique this device or network cannot
        run (no Triton, no kernels of the network's architecture for it, an unsupported
        model, no CUDA for graphs) is off, and so is a 16-bit precision no kernel reads."""
        from workbench.model.force_paths import drop_unimplemented, fused_problem

        network = self.potential.network
        options = replace(self.options)
        drop_unimplemented(options, self.potential.architecture)
        techniques = {name: False for name in KernelOptions.techniques()}
        if network is not None and fused_problem(network, self.device, options) is None:
            techniques.update({name: getattr(options, name) for name in techniques})
        techniques["fused_integrator"] = self.fuses_steps()
        techniques["fused_pair_search"] = self.searches_pairs()
        techniques["cuda_graph"] = (self.options.cuda_graph and self.device.type == "cuda"
                                    and captured_steps_problem(self) is None)
        return replace(options, **techniques)

    def _uses_cuda_graph(self) -> bool:
        if not self.options.cuda_graph:
            return False
        problem = captured_steps_problem(self)
        if problem is not None:
            warn_fallback_once(f"CUDA graphs off: {problem}")
            return False
        return True

    def _steps_to_next_report(self) -> int | None:
        gaps = [r.interval - self.step_count % r.interval for r in self.reporters]
        return min(gaps) if gaps else None

    def step(self, steps: int = 1) -> None:
        """Advance every live replica by ``steps`` integrator steps, calling reporters.

        With ``options.cuda_graph`` on (and a CUDA device), whole steps run as a
        captured CUDA graph in chunks between reporter calls; otherwise eagerly.
        """
        if steps < 0:
            raise ValueError(f"number of steps must be non-negative, got {steps}")
        remaining = int(steps)
        while remaining > 0:
            chunk = min(remaining, self._steps_to_next_report() or remaining)
            if self._uses_cuda_graph():
                if self._captured is None:
                    self._captured = CapturedSteps(self)
                self._captured.advance(chunk)
            else:
                for _ in range(chunk):
                    self._set_state(self.integrate(self.state, self.step_count + 1, self._evaluate))
                    self.step_count += 1
            remaining -= chunk
            for reporter in self.reporters:
                if self.step_count % reporter.interval == 0:
                    reporter.report(self)

    # -- observables --------------------------------------------------------------
    def kinetic_temperature(self) -> torch.Tensor:
        """Instantaneous temperature of each replica, K, shape (R,)."""
        masses = self.system.masses.float()[None, :, None]
        kinetic = 0.5 * (masses * self.velocities**2).sum((1, 2)) / KCAL_TO_AMU_A2_PS2
        dof = 3 * self.system.n_beads
        return 2.0 * kinetic / (dof * KB)

    def kinetic_energy(self) -> torch.Tensor:
        """Kinetic energy of each replica, kcal/mol, shape (R,)."""
        masses = self.system.masses.float()[None, :, None]
        return 0.5 * (masses * self.velocities**2).sum((1, 2)) / KCAL_TO_AMU_A2_PS2

    def metrics(self) -> dict[str, torch.Tensor]:
        """Per-replica observables on the device, each shape (R,).

        Keys: ``rmsd`` (CA, Å), ``q`` (fraction of native contacts),
        (NaN when the system has no native contacts),
        ``potential_energy``, ``kinetic_energy`` (kcal/mol), ``temperature`` (K),
        ``frozen`` (bool). For a system of several copies of a protein
        (`workbench.system.copies`) ``rmsd`` is the mean over copies of each copy's own
        CA RMSD from the native structure (each superposed alone, so copies drifting apart
        count for nothing) and ``q`` the fraction of all copies' native contacts formed
        (the mean of the copies' Q, as each has the same contacts).
        """
        copies = self.system.copies
        ca = self.positions[:, self.system.ca_index]
        ca = ca.reshape(self.replicas, copies, -1, 3)
        native_ca = self.system.native_positions[self.system.ca_index][: ca.shape[2]]
        return {
            "rmsd": rmsd(ca, native_ca).mean(1),
            "q": self.native_q(),
            "potential_energy": self.energy,
            "kinetic_energy": self.kinetic_energy(),
            "temperature": self.kinetic_temperature(),
            "frozen": self.frozen,
        }

    def native_q(self) -> torch.Tensor:
        """Fraction of native contacts of each replica, shape (R,), on the device (NaN when
        the system has no native contacts, e.g. one read from an mlcg configuration)."""
        if not len(self.system.native_contacts):
            return torch.full((self.replicas,), float("nan"), device=self.device)
        ca = self.positions[:, self.system.ca_index]
        return fraction_native_contacts(
            ca, self.system.native_contacts, self.system.native_contact_distances
        )

    def frozen_report(self) -> list[tuple[int, int]]:
        """(replica, step at which it was frozen) for every frozen replica."""
        idx = torch.nonzero(self.frozen).flatten().tolist()
        steps = self.frozen_step.tolist()
        return [(i, steps[i]) for i in idx]

    @property
    def time_ps(self) -> float:
        """Simulated time per replica, ps."""
        return self.step_count * self.integrator.timestep

    # -- checkpoints --------------------------------------------------------------
    def _identity(self) -> dict:
        return {
            "system": self.system.name,
            "n_beads": self.system.n_beads,
            "replicas": self.replicas,
            "integrator": self.integrator.config(),
            "neighbors": asdict(self.neighbor_settings),
        }

    def save_checkpoint(self, path: str | os.PathLike, extra: dict | None = None) -> Path:
        """Write the whole dynamic state atomically; an old file survives a failed write.

        ``extra`` (tensors, numbers, strings) is saved in the same file, so that state
        kept beside the simulation's (a replica exchange's) is one unit with it;
        :meth:`load_checkpoint` returns it.
        """
        payload = {
            "extra": extra or {},
            "format": CHECKPOINT_FORMAT,
            "identity": json.dumps(self._identity()),
            "step": self.step_count,
            "positions": self.positions.cpu(),
            "velocities": self.velocities.cpu(),
            "forces": self.forces.cpu(),
            "energy": self.energy.cpu(),
            "frozen": self.frozen.cpu(),
            "frozen_step": self.frozen_step.cpu(),
            "rng_state": self.generator.get_state(),
            "neighbor_list": {
                k: (v.cpu() if torch.is_tensor(v) else v)
                for k, v in (self.neighbor_list.state_dict() if self.neighbor_list else {}).items()
            },
        }
        return atomic_save(payload, path)

    def load_checkpoint(self, path: str | os.PathLike) -> dict:
        """Continue from a checkpoint written by :meth:`save_checkpoint` (bitwise); returns
        the ``extra`` saved with it."""
        payload, identity = read_checkpoint(path)
        mine = self._identity()
        for key in ("system", "n_beads", "replicas"):
            if identity[key] != mine[key]:
                raise CheckpointError(
                    f"checkpoint {path} is for {key}={identity[key]!r}, "
                    f"this simulation has {mine[key]!r}"
                )
        dev = self.device
        self.step_count = int(payload["step"])
        self.positions = payload["positions"].to(dev)
        self.velocities = payload["velocities"].to(dev)
        self.forces = payload["forces"].to(dev)
        self.energy = payload["energy"].to(dev)
        self.frozen = payload["frozen"].to(dev)
        self.frozen_step = payload["frozen_step"].to(dev)
        self.generator.set_state(payload["rng_state"])
        if self.neighbor_list is not None:
            if "builds" not in payload["neighbor_list"]:
                raise CheckpointError(f"checkpoint {path} holds no neighbour list for SchNet")
            state = {
                k: (v.to(dev) if torch.is_tensor(v) else v)
                for k, v in payload["neighbor_list"].items()
            }
            self.neighbor_list.load_state_dict(state)
        return payload.get("extra", {})


def read_checkpoint(path: str | os.PathLike) -> tuple[dict, dict]:
    """Read a file written by :meth:`Simulation.save_checkpoint` (tensors on the CPU).

    Returns
    -------
    (dict, dict)
        The payload (``positions`` (R, n, 3) float32, ``frozen`` (R,) bool, ...) and its
        identity (``system``, ``n_beads``, ``replicas``, integrator and neighbour settings).
    """
    payload = load_state_file(path, "checkpoint")
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a {CHECKPOINT_FORMAT} file")
    return payload, json.loads(payload["identity"])


def load_state_file(path: str | os.PathLike, what: str):
    """``torch.load`` of a state file with ``weights_only=True``, tensors on the CPU.

    Raises ``FileNotFoundError`` ("no {what} at ...") for a missing file and
    :class:`CheckpointError` ("... is not a readable {what}") for one that does not unpickle.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} at {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a format error
        raise CheckpointError(f"{path} is not a readable {what}: {exc}") from exc


def checkpoint_positions(path: str | os.PathLike, system: CGSystem) -> torch.Tensor:
    """Positions of the live replicas of a run's checkpoint, as starting structures.

    Parameters
    ----------
    path : str or os.PathLike
        A checkpoint file, or a run folder holding ``checkpoint.pt``.
    system : CGSystem
        The system the structures must belong to.

    Returns
    -------
    torch.Tensor, shape (R, n, 3), float32
        On the CPU; replicas frozen by the safety checks are left out.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "checkpoint.pt"
    payload, identity = read_checkpoint(path)
    if identity["system"] != system.name or identity["n_beads"] != system.n_beads:
        raise CheckpointError(
            f"checkpoint {path} is of {identity['system']} ({identity['n_beads']} beads), "
            f"not of {system.name} ({system.n_beads} beads)"
        )
    live = ~payload["frozen"]
    if not bool(live.any()):
        raise CheckpointError(f"every replica of checkpoint {path} is frozen")
    return payload["positions"][live].float()


def pooled_checkpoint_positions(
    paths: Sequence[str | os.PathLike], system: CGSystem
) -> torch.Tensor:
    """The live structures of several runs' checkpoints, taken in turn from each run.

    Replica ``r`` of a run that starts from ``starts[r mod S]`` (as the teacher-data runs
    do) thus starts from each run's structures alike, however few replicas there are:
    the order is run 0's first structure, run 1's first, ..., run 0's second, and so on,
    a run with fewer structures dropping out once they are used up.

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        At least one checkpoint file or run folder (:func:`checkpoint_positions`).
    system : CGSystem

    Returns
    -------
    torch.Tensor, shape (S, n, 3), float32
        ``S`` is the number of live structures of all the runs together.
    """
    if not paths:
        raise ValueError("give at least one run to take starting structures from")
    runs = [checkpoint_positions(path, system) for path in paths]
    order = sorted(
        ((index, k) for k, run in enumerate(runs) for index in range(run.shape[0]))
    )
    return torch.stack([runs[k][index] for index, k in order])
