"""Parallel tempering when the replicas are spread over ranks.

The ladder is the run's (``RunSettings.ladder``, ``exchange_every``); the layout
and the rule are those of :mod:`workbench.md.tempering`: R = L × W replicas,
replica r in exchange group ``r // L``, starting at level ``r % L``; rounds
alternate even and odd neighbour pairs. Every rank keeps the whole
ensemble's levels. At a round the potential energies and frozen flags are
all-gathered, rank 0 decides with :func:`~workbench.md.tempering.attempt_exchanges`
and its generator, the new levels are broadcast, and each rank moves its own
replicas' thermostats to their new temperatures and rescales their velocities by
``sqrt(T_new / T_old)``. Deciding on one rank keeps every rank's view identical
even where floating-point results could differ between devices.

The decision generator is seeded as :class:`~workbench.md.tempering.ReplicaExchange`
seeds its own, from the seed of shard 0's simulation: run on one rank, the two
drivers give the same trajectory bit for bit.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from workbench.distributed.reports import bath_temperatures
from workbench.distributed.shards import Shard, gather_replicas, shard_seed
from workbench.md.tempering import (
    EXCHANGE_SEED_OFFSET,
    attempt_exchanges,
    geometric_ladder,
    pair_labels,
)
from workbench.runner import RunSettings
from workbench.units import KB


class RankExchange:
    """The exchange state of one rank of a sharded run.

    Parameters
    ----------
    sim : Simulation
        This rank's shard, with a :class:`~workbench.md.LangevinIntegrator`; its
        thermostat is set to its replicas' starting levels.
    shards : list of Shard
        Rank k holds ``shards[k]``.
    settings : RunSettings
        The whole ensemble's settings, with a ``ladder``.

    Attributes
    ----------
    temperatures, betas : torch.Tensor, shape (L,), float64
        K and mol/kcal.
    exchange_every : int
        Steps between rounds.
    levels : torch.Tensor, shape (R,), int64
        Level of every replica of the ensemble (identical on all ranks).
    rounds : int
    attempts, accepts : torch.Tensor, shape (L − 1,), int64
        Per neighbouring pair, summed over groups (kept on rank 0 only).
    """

    def __init__(self, sim, shards: list[Shard], settings: RunSettings):
        self.sim = sim
        self.shards = shards
        self.shard = shards[dist.get_rank()]
        self.temperatures = geometric_ladder(*settings.ladder)
        self.exchange_every = settings.exchange_every
        self.betas = 1.0 / (KB * self.temperatures)
        total = shards[-1].stop
        self.levels = torch.arange(total) % self.temperatures.numel()
        self.generator = torch.Generator().manual_seed(
            shard_seed(settings.seed, 0) + EXCHANGE_SEED_OFFSET
        )
        self.rounds = 0
        self.attempts = torch.zeros(self.temperatures.numel() - 1, dtype=torch.long)
        self.accepts = torch.zeros_like(self.attempts)
        self._retemper()

    def _retemper(self) -> None:
        """Thermostat of this rank's replicas to their levels, velocities rescaled."""
        sim = self.sim
        after = self.temperatures[self.levels[self.shard.first : self.shard.stop]]
        scale = torch.sqrt(after / bath_temperatures(sim)).to(sim.velocities)
        sim.velocities = sim.velocities * scale[:, None, None]
        sim.integrator.set_temperature(after)

    def exchange(self) -> None:
        """One round of exchange attempts over every rank's replicas (a collective call)."""
        sim = self.sim
        local = torch.stack([sim.energy.to(torch.float64), sim.frozen.to(torch.float64)], 1)
        gathered = gather_replicas(local, self.shards).cpu()
        levels = self.temperatures.numel()
        shape = (gathered.shape[0] // levels, levels)
        decided = self.levels.clone()
        if dist.get_rank() == 0:
            new, accepted, attempted = attempt_exchanges(
                gathered[:, 0].view(shape),
                self.levels.view(shape),
                self.betas,
                self.rounds % 2,
                self.generator,
                gathered[:, 1].view(shape) != 0,
            )
            self.attempts += attempted.sum(0)
            self.accepts += accepted.sum(0)
            decided = new.reshape(-1)
        decided = decided.to(sim.device)  # NCCL carries CUDA tensors, gloo CPU ones
        dist.broadcast(decided, src=0)
        self.rounds += 1
        self.levels = decided.cpu()
        self._retemper()

    def summary(self) -> dict:
        """JSON-able ladder, rounds and acceptance per pair (meaningful on rank 0)."""
        attempts = self.attempts.to(torch.float64)
        rates = torch.where(attempts > 0, self.accepts / attempts, torch.nan).tolist()
        return {
            "temperatures": self.temperatures.tolist(),
            "exchange_rounds": self.rounds,
            "acceptance": {
                label: None if math.isnan(rate) else rate
                for label, rate in zip(pair_labels(self.temperatures), rates, strict=True)
            },
        }
