"""Collectives over the ranks of a sharded run (torch.distributed, NCCL or gloo)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from workbench.distributed.shards import Shard


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
