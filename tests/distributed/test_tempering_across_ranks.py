"""Parallel tempering across ranks (gloo on the CPU): on one rank it is the single-process
driver bit for bit; on two ranks it equals the same rounds played in one process over the
two shards' simulations (energies gathered, decided once, temperatures scattered)."""

from __future__ import annotations

import numpy as np
import torch

from workbench.distributed import ShardedSettings, launch_sharded, shard_seed
from workbench.distributed.shards import build_shard, split_replicas
from workbench.md.tempering import (
    EXCHANGE_SEED_OFFSET,
    ReplicaExchange,
    attempt_exchanges,
    geometric_ladder,
)
from workbench.units import KB

LADDER = (300.0, 390.0, 3)
EVERY = 2


def sharded(run, ranks):
    return launch_sharded(ShardedSettings(run, ranks=ranks, timeout_s=120, threads_per_rank=1))


def test_one_rank_is_the_single_process_replica_exchange(settings):
    run = settings(replicas=6, steps=12, save_interval=4, ladder=LADDER, exchange_every=EVERY)
    result = sharded(run, 1)
    sim = build_shard(run, split_replicas(6, 1)[0], "cpu").simulation
    driver = ReplicaExchange(sim, geometric_ladder(*LADDER), EVERY)
    driver.run(12)
    assert torch.equal(result.positions, sim.positions)
    assert torch.equal(result.velocities, sim.velocities)
    assert torch.equal(result.levels, driver.level_of_replica)
    assert result.tempering["acceptance"] == driver.summary()["acceptance"]
    assert result.tempering["exchange_rounds"] == driver.rounds == 6


def retemper(sim, after):
    scale = torch.sqrt(after / sim.integrator.temperature.expand(sim.replicas)).to(sim.velocities)
    sim.velocities = sim.velocities * scale[:, None, None]
    sim.integrator.set_temperature(after)


def test_two_ranks_equal_the_rounds_played_over_both_shards_in_one_process(settings):
    run = settings(replicas=9, steps=12, save_interval=4, ladder=LADDER, exchange_every=EVERY)
    result = sharded(run, 2)  # shards of 5 and 4 replicas: group 1 (replicas 3-5) spans both

    shards = split_replicas(9, 2)
    sims = [build_shard(run, s, "cpu").simulation for s in shards]
    ladder = geometric_ladder(*LADDER)
    betas = 1.0 / (KB * ladder)
    generator = torch.Generator().manual_seed(shard_seed(run.seed, 0) + EXCHANGE_SEED_OFFSET)
    levels = torch.arange(9) % 3
    for sim, shard in zip(sims, shards, strict=True):
        retemper(sim, ladder[levels[shard.first : shard.stop]])
    for round_ in range(6):
        for sim in sims:
            sim.step(EVERY)
        energies = torch.cat([sim.energy for sim in sims]).double().view(3, 3)
        frozen = torch.cat([sim.frozen for sim in sims]).view(3, 3)
        levels = attempt_exchanges(
            energies, levels.view(3, 3), betas, round_ % 2, generator, frozen
        )[0].reshape(-1)
        for sim, shard in zip(sims, shards, strict=True):
            retemper(sim, ladder[levels[shard.first : shard.stop]])

    assert torch.equal(result.levels, levels)
    assert torch.equal(result.positions, torch.cat([s.positions for s in sims]))
    assert torch.equal(result.velocities, torch.cat([s.velocities for s in sims]))
    assert np.array_equal(result.reports[-1].metrics["temperature_set"], ladder[levels].numpy())
    assert not torch.equal(levels[3:6], torch.arange(3))  # the straddling group did swap
