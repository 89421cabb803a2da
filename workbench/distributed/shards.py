"""Replica shards: which replicas a process or actor owns, its seed and its simulation.

An ensemble of R replicas is cut into contiguous shards; shard k owns global
replicas ``first .. first + replicas - 1`` and runs them as one
:class:`~workbench.md.Simulation` with a seed derived from the run's seed and k.
A replica's trajectory is therefore fixed by the run's settings, the number of
shards and its shard, whichever process, GPU or machine runs the shard. A shard runs in
chunks of steps that end at the next report, checkpoint or exchange (:func:`next_stop`);
the ranks' per-replica rows come back together in global replica order
(:func:`gather_replicas`, a torch.distributed collective, NCCL or gloo).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.distributed as dist

from workbench.runner import PreparedRun, RunSettings, prepare_run


@dataclass(frozen=True)
class Shard:
    """A contiguous block of an ensemble's replicas.

    Attributes
    ----------
    index : int
        Shard number, ``0 .. count - 1``.
    count : int
        Number of shards of the ensemble.
    first : int
        Global number of the shard's first replica.
    replicas : int
        Number of replicas in the shard.
    """

    index: int
    count: int
    first: int
    replicas: int

    @property
    def stop(self) -> int:
        """Global number one past the shard's last replica."""
        return self.first + self.replicas

    def __str__(self) -> str:
        return f"shard {self.index}/{self.count} (replicas {self.first}..{self.stop - 1})"


def split_replicas(total: int, shards: int) -> list[Shard]:
    """Cut ``total`` replicas into ``shards`` contiguous shards of near-equal size.

    Sizes differ by at most one; the larger shards come first.

    Raises
    ------
    ValueError
        Fewer than one shard, or fewer replicas than shards.
    """
    if shards < 1:
        raise ValueError(f"need at least one shard, got {shards}")
    if total < shards:
        raise ValueError(
            f"{total} replicas cannot be spread over {shards} shards (processes, GPUs or "
            "actors): each needs at least one replica"
        )
    base, extra = divmod(total, shards)
    out, first = [], 0
    for index in range(shards):
        size = base + (index < extra)
        out.append(Shard(index, shards, first, size))
        first += size
    return out


def shard_seed(seed: int, index: int) -> int:
    """Seed of shard ``index`` of a run seeded with ``seed`` (63 bits).

    The pair is mixed by :class:`numpy.random.SeedSequence`, so neighbouring seeds
    and shard numbers give unrelated random streams.
    """
    words = np.random.SeedSequence([seed % 2**64, index]).generate_state(2, np.uint32)
    return (int(words[0]) << 31) ^ int(words[1])


def shard_settings(settings: RunSettings, shard: Shard, device: str) -> RunSettings:
    """The run settings of one shard of the ensemble that ``settings`` describes.

    ``settings.replicas`` is the whole ensemble; the copy has the shard's replica
    count, seed, device and first replica (for starting structures), and no
    temperature ladder: exchanges span the shards, so they are run across them
    (:mod:`workbench.distributed.tempering_across_ranks`), not inside one.
    """
    if shard.stop > settings.replicas:
        raise ValueError(f"{shard} lies outside an ensemble of {settings.replicas} replicas")
    return replace(
        copy.deepcopy(settings),
        replicas=shard.replicas,
        seed=shard_seed(settings.seed, shard.index),
        device=device,
        first_replica=settings.first_replica + shard.first,
        ladder=None,
    )


def build_shard(settings: RunSettings, shard: Shard, device: str) -> PreparedRun:
    """System, potential and simulation of one shard (see :func:`shard_settings`)."""
    return prepare_run(shard_settings(settings, shard, device))


def next_stop(done: int, total: int, *intervals: int) -> int:
    """The first step after ``done`` that is a multiple of one of ``intervals``, or ``total``.

    Parameters
    ----------
    done : int
        Steps taken so far.
    total : int
        Last step of the run.
    *intervals : int
        Positive step intervals (reports, checkpoints, exchanges).
    """
    return min([total, *((done // i + 1) * i for i in intervals)])


def gather_replicas(local: torch.Tensor, shards: list[Shard]) -> torch.Tensor:
    """Every rank's per-replica rows, on every rank, in global replica order.

    Shards may differ in size by one, and an all-gather needs equal sizes, so each
    rank's rows are padded to the largest shard and the padding is dropped after.

    Parameters
    ----------
    local : torch.Tensor, shape (R_k, ...)
        This rank's rows (replica axis first), on the device of the process
        group's backend (CUDA for NCCL, CPU for gloo). Any dtype NCCL and gloo carry.
    shards : list of Shard
        The shards of all ranks, rank k holding ``shards[k]``.

    Returns
    -------
    torch.Tensor, shape (R, ...)
        Same dtype and device as ``local``.
    """
    rank = dist.get_rank()
    if local.shape[0] != shards[rank].replicas:
        raise ValueError(f"rank {rank} gives {local.shape[0]} rows for {shards[rank]}")
    largest = max(s.replicas for s in shards)
    padded = local.new_zeros((largest, *local.shape[1:]))
    padded[: local.shape[0]] = local
    parts = [torch.empty_like(padded) for _ in shards]
    dist.all_gather(parts, padded.contiguous())
    return torch.cat([part[: s.replicas] for part, s in zip(parts, shards, strict=True)])
