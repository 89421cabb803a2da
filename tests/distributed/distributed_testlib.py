"""Reference runs of the distributed tests: the shards stepped directly in this process."""

from __future__ import annotations

import torch

from workbench.distributed.shards import build_shard, split_replicas
from workbench.runner import RunSettings


def run_shards_directly(settings: RunSettings, shards: int, on_report=None):
    """Each shard's simulation built and stepped in this process (the reference).

    Returns the simulations, shard 0 first; ``on_report(sims)`` is called at every report
    step (``settings.steps`` must be a multiple of ``settings.save_interval``).
    """
    sims = [
        build_shard(settings, s, "cpu").simulation
        for s in split_replicas(settings.replicas, shards)
    ]
    for _ in range(settings.steps // settings.save_interval):
        for sim in sims:
            sim.step(settings.save_interval)
        if on_report is not None:
            on_report(sims)
    return sims


def concatenated(sims, name: str) -> torch.Tensor:
    """An attribute of every simulation, concatenated over the replica axis."""
    return torch.cat([getattr(sim, name) for sim in sims])
