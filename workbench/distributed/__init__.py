"""Replicas spread over several GPUs (torch.distributed) or many machines (Ray).

* :mod:`.shards`: which replicas a process owns, its seed, its simulation, where its
  chunks of steps end, and the ranks' rows gathered in replica order.
* :mod:`.launcher`: one process per GPU, metrics gathered to the driver
  (:func:`launch_sharded`); :mod:`.tempering_across_ranks`: parallel tempering
  across those processes.
* :mod:`.ray_ensemble`: shards as Ray actors with checkpoints and restarts
  (imported on its own; it needs the ``cluster`` extra).
* :mod:`.scaling`: aggregate throughput on N GPUs against 1.
"""

from workbench.distributed.launcher import (
    ShardedResult,
    ShardedRunError,
    ShardedSettings,
    launch_sharded,
)
from workbench.distributed.reports import MetricsReport
from workbench.distributed.shards import Shard, build_shard, shard_seed, split_replicas

__all__ = [
    "MetricsReport",
    "Shard",
    "ShardedResult",
    "ShardedRunError",
    "ShardedSettings",
    "build_shard",
    "launch_sharded",
    "shard_seed",
    "split_replicas",
]
