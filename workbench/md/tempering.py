"""Parallel tempering (replica exchange) over a ladder of temperatures.

The R replicas of a :class:`~workbench.md.Simulation` are split into ``walkers``
exchange groups of ``levels`` replicas each (R = levels × walkers). Within a
group every replica holds one temperature level at a time; replica ``r`` belongs
to group ``r // levels`` and starts at level ``r % levels``. Exchanges are
attempted between neighbouring levels, even pairs (0↔1, 2↔3, …) and odd pairs
(1↔2, 3↔4, …) alternately, with the Metropolis criterion on the potential energy.

Temperatures move, configurations stay: an accepted swap exchanges the two
replicas' bath temperatures and rescales their velocities by √(T_new / T_old),
while positions and forces stay with their configuration. The simulation's
integrator is kept and only told its new temperatures (in place on the device),
so a simulation stepping through a captured CUDA graph goes on with it.

:func:`attempt_exchanges` is the pure, vectorised exchange step on gathered
tensors; :class:`ReplicaExchange` drives a single simulation with it.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from pathlib import Path

import torch

from workbench.files import atomic_save
from workbench.md.integrators import LangevinIntegrator, as_temperatures
from workbench.md.simulation import CheckpointError, Simulation, load_state_file
from workbench.units import KB

TEMPERING_FORMAT = "cg-workbench-tempering"

#: Added to the simulation's seed for the exchange generator (a stream of its own).
EXCHANGE_SEED_OFFSET = 0x9E3779B9

#: Level indices are logged as int16.
MAX_LEVELS = torch.iinfo(torch.int16).max


def geometric_ladder(t_min: float, t_max: float, levels: int) -> torch.Tensor:
    """Temperatures spaced geometrically from ``t_min`` to ``t_max``.

    ``T_k = t_min · (t_max / t_min)^(k / (levels − 1))``, so neighbouring levels have
    a constant ratio, which gives roughly even acceptance when the heat capacity is
    roughly constant.

    Parameters
    ----------
    t_min, t_max : float
        Lowest and highest temperature, K; ``0 < t_min < t_max``.
    levels : int
        Number of temperatures, at least 2.

    Returns
    -------
    torch.Tensor, shape (levels,), float64
        K, increasing; the ends are exactly ``t_min`` and ``t_max``.

    Raises
    ------
    ValueError
        Non-positive or non-finite temperatures, ``t_max <= t_min``, fewer than 2 levels.
    """
    if isinstance(levels, bool) or int(levels) != levels or not 2 <= levels <= MAX_LEVELS:
        raise ValueError(f"a temperature ladder needs 2 to {MAX_LEVELS} levels, got {levels}")
    t_min, t_max = as_temperatures([t_min, t_max]).tolist()
    if not t_max > t_min:
        raise ValueError(
            f"the highest temperature must exceed the lowest, got {t_min:g} K to {t_max:g} K"
        )
    fraction = torch.arange(int(levels), dtype=torch.float64) / (int(levels) - 1)
    ladder = t_min * (t_max / t_min) ** fraction
    ladder[-1] = t_max
    return ladder


def pair_labels(temperatures: torch.Tensor | Sequence[float]) -> list[str]:
    """``"300–346 K"``-style names of the neighbouring level pairs, length ``levels − 1``."""
    t = [float(x) for x in temperatures]
    return [f"{low:.0f}–{high:.0f} K" for low, high in zip(t[:-1], t[1:], strict=True)]


def attempt_exchanges(
    energies: torch.Tensor,
    level_of_replica: torch.Tensor,
    betas: torch.Tensor,
    parity: int,
    generator: torch.Generator | None = None,
    frozen: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One round of neighbour exchanges in every group at once (no loop over replicas).

    In each group (row) the pairs of levels ``(k, k + 1)`` with ``k % 2 == parity``
    are attempted; these pairs are disjoint, so all are decided independently. A pair
    whose replicas hold energies ``E_i`` at level ``k`` (β_i) and ``E_j`` at level
    ``k + 1`` (β_j) swaps levels with probability ``min(1, exp((β_i − β_j)(E_i − E_j)))``.
    Pairs involving a frozen replica are not attempted. One uniform number is drawn
    per pair slot, attempted or not, so the generator advances by the same amount
    every round.

    Parameters
    ----------
    energies : torch.Tensor, shape (G, L), float
        Potential energy of each replica, kcal/mol; row = exchange group, column = the
        replica's slot in the group.
    level_of_replica : torch.Tensor, shape (G, L), int64
        Level each replica holds; each row is a permutation of ``0 … L − 1``.
    betas : torch.Tensor, shape (L,), float
        1 / (k_B T) of each level, mol/kcal.
    parity : int
        0: pairs (0, 1), (2, 3), …; 1: pairs (1, 2), (3, 4), ….
    generator : torch.Generator, optional
        Source of the uniform numbers (drawn on its device, then moved to that of
        ``energies``).
    frozen : torch.Tensor, shape (G, L), bool, optional
        Replicas that must keep their level.

    Returns
    -------
    new_level_of_replica : torch.Tensor, shape (G, L), int64
        Levels after the accepted swaps (same device as the input).
    accepted : torch.Tensor, shape (G, L − 1), bool
        ``accepted[g, k]``: the replicas at levels ``k`` and ``k + 1`` of group ``g`` swapped.
    attempted : torch.Tensor, shape (G, L − 1), bool
        ``attempted[g, k]``: that pair was tried (right parity, neither replica frozen).
    """
    if parity not in (0, 1):
        raise ValueError(f"parity must be 0 or 1, got {parity}")
    if energies.dim() != 2 or energies.shape != level_of_replica.shape:
        raise ValueError(
            "energies and levels must both have shape (groups, levels), got "
            f"{tuple(energies.shape)} and {tuple(level_of_replica.shape)}"
        )
    groups, levels = energies.shape
    if betas.shape != (levels,):
        raise ValueError(f"need {levels} inverse temperatures, got shape {tuple(betas.shape)}")
    device = energies.device
    level_of_replica = level_of_replica.to(torch.long)
    # per group, indexed by level: energy and frozen flag of the replica holding it
    energy_at = torch.empty((groups, levels), dtype=torch.float64, device=device)
    energy_at.scatter_(1, level_of_replica, energies.to(torch.float64))
    pair = torch.arange(levels - 1, device=device)
    attempted = (pair % 2 == parity).expand(groups, levels - 1)
    if frozen is not None:
        frozen_at = torch.zeros((groups, levels), dtype=torch.bool, device=device)
        frozen_at.scatter_(1, level_of_replica, frozen.to(device=device, dtype=torch.bool))
        attempted = attempted & ~(frozen_at[:, :-1] | frozen_at[:, 1:])
    betas = betas.to(device=device, dtype=torch.float64)
    log_ratio = (betas[:-1] - betas[1:]) * (energy_at[:, :-1] - energy_at[:, 1:])
    uniform = torch.rand(
        (groups, levels - 1),
        generator=generator,
        dtype=torch.float64,
        device=generator.device if generator is not None else device,
    ).to(device)
    accepted = attempted & (uniform < torch.exp(log_ratio.clamp(max=0.0)))
    # level k moves up where pair k swapped, level k + 1 moves down
    no_swap = torch.zeros((groups, 1), dtype=torch.long, device=device)
    up = torch.cat([accepted.long(), no_swap], 1)
    down = torch.cat([no_swap, accepted.long()], 1)
    shift = (up - down).gather(1, level_of_replica)
    return level_of_replica + shift, accepted, attempted


class ReplicaExchange:
    """Parallel tempering of an existing simulation.

    On construction the integrator's temperatures become the ladder's (replica ``r``
    at level ``r % levels``) and the velocities are rescaled by √(T_level / T_before).
    To continue a checkpointed run, build the simulation and this driver, then load the
    simulation's checkpoint, then this driver's state (:meth:`load`).

    Parameters
    ----------
    simulation : Simulation
        With a :class:`~workbench.md.LangevinIntegrator`; ``replicas`` must be a
        multiple of the number of levels.
    temperatures : sequence of float or torch.Tensor, shape (L,)
        The ladder, K, strictly increasing (e.g. :func:`geometric_ladder`).
    exchange_every : int
        Steps between exchange rounds; rounds happen when the simulation's step count
        is a multiple of it, however :meth:`run` is called.

    Attributes
    ----------
    simulation : Simulation
    temperatures : torch.Tensor, shape (L,), float64
        K.
    betas : torch.Tensor, shape (L,), float64
        mol/kcal.
    exchange_every : int
    generator : torch.Generator
        CPU generator of the acceptance tests, seeded with the simulation's seed plus
        :data:`EXCHANGE_SEED_OFFSET`.
    rounds : int
        Exchange rounds so far (its parity picks the pairs of the next round).
    attempts, accepts : torch.Tensor, shape (L − 1,), int64
        Attempted and accepted swaps per neighbouring pair, summed over groups.
    """

    def __init__(
        self,
        simulation: Simulation,
        temperatures: Sequence[float] | torch.Tensor,
        exchange_every: int = 100,
    ):
        integrator = simulation.integrator
        if not isinstance(integrator, LangevinIntegrator):
            raise TypeError(
                "replica exchange needs a LangevinIntegrator (a thermostat), "
                f"got {type(integrator).__name__}"
            )
        temperatures = as_temperatures(temperatures)
        levels = temperatures.numel()
        if not 2 <= levels <= MAX_LEVELS:
            raise ValueError(f"a temperature ladder needs 2 to {MAX_LEVELS} levels, got {levels}")
        if not bool((temperatures[1:] > temperatures[:-1]).all()):
            raise ValueError(f"ladder temperatures must increase, got {temperatures.tolist()}")
        if simulation.replicas % levels:
            raise ValueError(
                f"{simulation.replicas} replicas is not a multiple of the {levels} ladder "
                "levels (replicas = levels × walkers)"
            )
        if int(exchange_every) < 1:
            raise ValueError(f"exchange interval must be at least 1 step, got {exchange_every}")
        self.simulation = simulation
        self.temperatures = temperatures
        self.betas = 1.0 / (KB * temperatures)
        self.exchange_every = int(exchange_every)
        self.generator = torch.Generator().manual_seed(simulation.seed + EXCHANGE_SEED_OFFSET)
        self.rounds = 0
        self.attempts = torch.zeros(levels - 1, dtype=torch.long)
        self.accepts = torch.zeros(levels - 1, dtype=torch.long)
        self._level = torch.arange(simulation.replicas) % levels
        self._history_steps: list[int] = []
        self._history: list[torch.Tensor] = []
        self._log = None
        self._log_handle = None
        before = integrator.temperature.expand(simulation.replicas)
        self._retemper(before, self.replica_temperatures())
        self._remember()

    # -- layout ---------------------------------------------------------------------
    @property
    def levels(self) -> int:
        """Number of temperatures L."""
        return self.temperatures.numel()

    @property
    def walkers(self) -> int:
        """Replicas per level W (= number of exchange groups)."""
        return self.simulation.replicas // self.levels

    @property
    def groups(self) -> torch.Tensor:
        """Replica indices of each exchange group, shape (W, L), int64."""
        return torch.arange(self.simulation.replicas).view(self.walkers, self.levels)

    @property
    def level_of_replica(self) -> torch.Tensor:
        """Level each replica holds now, shape (R,), int64 (a copy)."""
        return self._level.clone()

    def replica_temperatures(self) -> torch.Tensor:
        """Bath temperature of each replica now, K, shape (R,), float64."""
        return self.temperatures[self._level]

    def acceptance_rates(self) -> torch.Tensor:
        """Accepted / attempted swaps per neighbouring pair, shape (L − 1,), float64.

        NaN for a pair that has not been attempted yet.
        """
        attempts = self.attempts.to(torch.float64)
        return torch.where(attempts > 0, self.accepts / attempts, torch.nan)

    def level_history(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Levels of all replicas after every round since construction or loading.

        Returns
        -------
        steps : torch.Tensor, shape (E,), int64
            Step of each entry (the first is the assignment at construction or load).
        levels : torch.Tensor, shape (E, R), int16
        """
        return torch.tensor(self._history_steps, dtype=torch.long), torch.stack(self._history)

    # -- dynamics -------------------------------------------------------------------
    def run(self, steps: int) -> None:
        """Advance the simulation ``steps`` steps, exchanging every ``exchange_every`` steps.

        The simulation is stepped with ``simulation.step`` up to the next multiple of
        ``exchange_every``, then a round of exchanges is attempted, and so on.
        """
        if steps < 0:
            raise ValueError(f"number of steps must be non-negative, got {steps}")
        sim = self.simulation
        remaining = int(steps)
        while remaining > 0:
            chunk = min(remaining, self.exchange_every - sim.step_count % self.exchange_every)
            sim.step(chunk)
            remaining -= chunk
            if sim.step_count % self.exchange_every == 0:
                self.exchange()

    def exchange(self) -> torch.Tensor:
        """Attempt one round of exchanges now (see :func:`attempt_exchanges`).

        Returns
        -------
        torch.Tensor, shape (W, L − 1), bool
            Accepted swaps per group and pair.
        """
        sim = self.simulation
        shape = (self.walkers, self.levels)
        parity = self.rounds % 2
        new_level, accepted, attempted = attempt_exchanges(
            sim.energy.detach().to("cpu", torch.float64).view(shape),
            self._level.view(shape),
            self.betas,
            parity,
            self.generator,
            sim.frozen.cpu().view(shape),
        )
        self.rounds += 1
        self.attempts += attempted.sum(0)
        self.accepts += accepted.sum(0)
        if bool(accepted.any()):
            before = self.replica_temperatures()
            self._level = new_level.reshape(-1)
            self._retemper(before, self.replica_temperatures())
        self._remember()
        if self._log is not None:
            self._log.writerow(
                [
                    sim.step_count,
                    parity,
                    *attempted.sum(0).tolist(),
                    *accepted.sum(0).tolist(),
                    *self._level.tolist(),
                ]
            )
            self._log_handle.flush()
        return accepted

    def _retemper(self, before: torch.Tensor, after: torch.Tensor) -> None:
        """Set the bath to ``after`` (R,) K and rescale velocities from ``before`` (R,) K."""
        sim = self.simulation
        scale = torch.sqrt(after / before).to(sim.velocities)
        sim.velocities = sim.velocities * scale[:, None, None]
        sim.integrator.set_temperature(after)

    def _remember(self) -> None:
        self._history_steps.append(self.simulation.step_count)
        self._history.append(self._level.to(torch.int16))

    # -- logging --------------------------------------------------------------------
    def open_log(self, path: str | os.PathLike, append: bool = False) -> Path:
        """Write one CSV row per exchange round to ``path`` from now on.

        Columns: ``step``, ``parity``, ``attempted_<k>_<k+1>`` and ``accepted_<k>_<k+1>``
        (swaps summed over the groups, one column per pair), ``level_<r>`` (level of
        each replica after the round).

        Parameters
        ----------
        path : str or PathLike
        append : bool
            Keep the rows of an existing file (a resumed run).
        """
        self.close()
        path = Path(path)
        append = append and path.is_file() and path.stat().st_size > 0
        self._log_handle = open(path, "a" if append else "w", newline="")  # noqa: SIM115
        self._log = csv.writer(self._log_handle)
        if not append:
            pairs = [f"{k}_{k + 1}" for k in range(self.levels - 1)]
            self._log.writerow(
                [
                    "step",
                    "parity",
                    *(f"attempted_{p}" for p in pairs),
                    *(f"accepted_{p}" for p in pairs),
                    *(f"level_{r:03d}" for r in range(self.simulation.replicas)),
                ]
            )
            self._log_handle.flush()
        return path

    def flush(self) -> None:
        """Hand the log's rows written so far to the operating system (before a checkpoint
        covers them)."""
        if self._log_handle is not None:
            self._log_handle.flush()

    def close(self) -> None:
        """Close the CSV log, if one is open."""
        if self._log_handle is not None:
            self._log_handle.close()
        self._log = self._log_handle = None

    def summary(self) -> dict:
        """JSON-able description: ladder, layout, rounds and acceptance per pair."""
        rates = self.acceptance_rates().tolist()
        return {
            "temperatures": self.temperatures.tolist(),
            "walkers": self.walkers,
            "exchange_every": self.exchange_every,
            "rounds": self.rounds,
            "acceptance": {
                label: None if math.isnan(rate) else rate
                for label, rate in zip(pair_labels(self.temperatures), rates, strict=True)
            },
        }

    # -- checkpoints ----------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to continue bitwise (with the simulation's own checkpoint)."""
        return {
            "format": TEMPERING_FORMAT,
            "step": self.simulation.step_count,
            "temperatures": self.temperatures.clone(),
            "level_of_replica": self._level.clone(),
            "rounds": self.rounds,
            "attempts": self.attempts.clone(),
            "accepts": self.accepts.clone(),
            "rng_state": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict` of the same ladder at the simulation's step.

        Load the simulation's checkpoint first: its velocities already belong to the
        saved temperatures, so they are not rescaled here.

        Raises
        ------
        CheckpointError
            Another format, ladder, replica count or step.
        """
        if not isinstance(state, dict) or state.get("format") != TEMPERING_FORMAT:
            raise CheckpointError(f"not a {TEMPERING_FORMAT} state")
        temperatures = state["temperatures"]
        if not torch.equal(temperatures, self.temperatures):
            raise CheckpointError(
                f"exchange state is for the ladder {temperatures.tolist()} K, this run has "
                f"{self.temperatures.tolist()} K"
            )
        levels = state["level_of_replica"]
        if levels.shape != self._level.shape:
            raise CheckpointError(
                f"exchange state is for {levels.numel()} replicas, this run has "
                f"{self._level.numel()}"
            )
        if state["step"] != self.simulation.step_count:
            raise CheckpointError(
                f"exchange state is from step {state['step']}, the simulation is at step "
                f"{self.simulation.step_count}"
            )
        self._level = levels.clone()
        self.rounds = int(state["rounds"])
        self.attempts = state["attempts"].clone()
        self.accepts = state["accepts"].clone()
        self.generator.set_state(state["rng_state"])
        self.simulation.integrator.set_temperature(self.replica_temperatures())
        self._history_steps, self._history = [], []
        self._remember()

    def save(self, path: str | os.PathLike) -> Path:
        """Write :meth:`state_dict` atomically; an old file survives a failed write (a run
        saves the state inside the simulation's checkpoint instead, as one unit)."""
        return atomic_save(self.state_dict(), path)

    def load(self, path: str | os.PathLike) -> None:
        """Read a file written by :meth:`save` and continue from it."""
        self.load_state_dict(load_state_file(path, "exchange state"))
