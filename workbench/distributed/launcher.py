"""One process per GPU: an ensemble's replicas sharded over ranks (torch.distributed).

:func:`launch_sharded` spawns one process per rank (NCCL on CUDA, rank k on GPU k;
gloo on the CPU). Each rank builds the simulation of its shard
(:mod:`workbench.distributed.shards`) and runs it; at every report interval the
per-replica metrics (and, if asked, the positions) are all-gathered and rank 0
sends the whole ensemble's :class:`~workbench.distributed.reports.MetricsReport`
to the driver, which passes it to ``on_report`` as it arrives. With a
temperature ladder, replicas exchange temperatures across ranks
(:mod:`.tempering_across_ranks`). At the end the final positions and velocities
are gathered too. A run can be stopped early (``should_stop``): the driver sets
an event that rank 0 reads at the next report and broadcasts, so every rank
stops at the same step and the final state is gathered as usual.

The processes meet through a file store in a temporary folder (no network port),
and every wait is bounded: collectives by the process group's timeout, the
whole run by ``timeout_s``, after which the ranks are stopped.
"""

from __future__ import annotations

import math
import os
import queue as queue_module
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException

from workbench.distributed.reports import MetricsReport, metrics_from_matrix, metrics_matrix
from workbench.distributed.shards import (
    Shard,
    build_shard,
    gather_replicas,
    next_stop,
    split_replicas,
)
from workbench.distributed.tempering_across_ranks import RankExchange
from workbench.md import Simulation
from workbench.runner import RunSettings, ThroughputMeter, timed_steps


class ShardedRunError(RuntimeError):
    """A rank failed, died or did not finish in time."""


@dataclass
class ShardedSettings:
    """A run of one ensemble spread over several processes.

    Attributes
    ----------
    run : RunSettings
        The whole ensemble: ``replicas`` in total, ``steps``, ``save_interval`` (steps
        between gathered metric reports), ``seed``; with a ``ladder``, parallel
        tempering across all ranks every ``exchange_every`` steps. Only the type of
        ``device`` counts (``auto``, ``cpu``, ``cuda``): rank k runs on visible GPU k
        (choose GPUs with ``CUDA_VISIBLE_DEVICES``).
    ranks : int or None
        Processes; None: one per visible GPU (one process on the CPU).
    timeout_s : float
        Limit on the whole run (start-up included) and on any single collective, s.
    threads_per_rank : int or None
        CPU threads of each process on the CPU (default: the cores shared out).
    report_positions : bool
        Gather every replica's positions into each report (for live structure views).
    """

    run: RunSettings
    ranks: int | None = None
    timeout_s: float = 600.0
    threads_per_rank: int | None = None
    report_positions: bool = False

    def resolve(self) -> tuple[str, int]:
        """Check the settings; returns the device type and the number of ranks.

        Raises
        ------
        ValueError
            Impossible settings, or more GPUs asked for than are visible.
        """
        self.run.validate()
        device = torch.device("cuda" if self.run.device == "auto" else self.run.device).type
        if self.run.device == "auto" and not torch.cuda.is_available():
            device = "cpu"
        if device not in ("cpu", "cuda"):
            raise ValueError(f"sharded runs need a CPU or CUDA device, got {self.run.device!r}")
        visible = torch.cuda.device_count() if device == "cuda" else 0
        if device == "cuda" and visible == 0:
            raise ValueError(f"device {self.run.device!r} requested but no CUDA GPU is visible")
        ranks = self.ranks if self.ranks is not None else (visible if device == "cuda" else 1)
        if ranks < 1:
            raise ValueError(f"need at least one rank, got {ranks}")
        if device == "cuda" and ranks > visible:
            raise ValueError(f"{ranks} GPUs requested but only {visible} visible")
        if self.run.replicas < ranks:
            raise ValueError(
                f"{self.run.replicas} replicas cannot be spread over {ranks} ranks: each "
                "needs at least one"
            )
        if not self.timeout_s > 0:
            raise ValueError(f"timeout must be positive, got {self.timeout_s} s")
        return device, ranks


@dataclass
class ShardedResult:
    """What a sharded run gives back to the driver.

    Attributes
    ----------
    shards : list of Shard
        Rank k ran ``shards[k]``.
    backend : str
        ``"nccl"`` or ``"gloo"``.
    reports : list of MetricsReport
        Whole-ensemble metrics at every report interval (and at the last step).
    positions, velocities : torch.Tensor, shape (R, n, 3), float32, CPU
        Final state of every replica, global order.
    levels : torch.Tensor or None, shape (R,), int64
        Final temperature level of each replica (parallel tempering only).
    tempering : dict or None
        Ladder, exchange rounds and acceptance per level pair (parallel tempering only).
    timestep_mol_per_s : float
        Aggregate throughput of all ranks over the wall time of rank 0, metric
        gathering and exchanges included, first report interval excluded.
    rank_timestep_mol_per_s : list of float
        Each rank's own stepping throughput (warm-up excluded).
    wall_s : float
        Driver wall time, process start-up included.
    steps : int
        Steps run: ``run.steps``, or fewer when the run was stopped early.
    stopped : bool
        Whether ``should_stop`` ended the run early.
    """

    shards: list[Shard]
    backend: str
    reports: list[MetricsReport] = field(default_factory=list)
    positions: torch.Tensor | None = None
    velocities: torch.Tensor | None = None
    levels: torch.Tensor | None = None
    tempering: dict | None = None
    timestep_mol_per_s: float = 0.0
    rank_timestep_mol_per_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    steps: int = 0
    stopped: bool = False


@dataclass
class _Job:
    """What every rank is given (pickled into the spawned processes)."""

    settings: ShardedSettings
    shards: list[Shard]
    backend: str
    init_method: str
    threads: int


def _rank_main(rank: int, job: _Job, results, stop_event) -> None:
    """Body of rank ``rank`` (runs in a spawned process)."""
    if job.backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(job.threads)
    # the shard (its model and structures read from disk) is built before the group forms:
    # a rank whose input is bad then fails on its own, not as a peer that left a half-made
    # group under another rank (whose gloo error would be reported in its place)
    sim = build_shard(job.settings.run, job.shards[rank], str(device)).simulation
    dist.init_process_group(
        job.backend,
        init_method=job.init_method,
        rank=rank,
        world_size=len(job.shards),
        timeout=timedelta(seconds=job.settings.timeout_s),
    )
    try:
        _run_rank(rank, job, sim, device, results, stop_event)
    finally:
        dist.destroy_process_group()


def _stop_requested(rank: int, stop_event, device: torch.device) -> bool:
    """Rank 0's reading of the driver's stop event, the same on every rank (a collective)."""
    flag = torch.tensor([int(rank == 0 and stop_event.is_set())], device=device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def _run_rank(
    rank: int, job: _Job, sim: Simulation, device: torch.device, results, stop_event
) -> None:
    settings, shards = job.settings.run, job.shards
    shard = shards[rank]
    total = settings.replicas
    intervals = [settings.save_interval]
    exchange = None
    if settings.ladder is not None:
        exchange = RankExchange(sim, shards, settings)
        intervals.append(exchange.exchange_every)

    own = ThroughputMeter(shard.replicas, settings.timestep_fs, device)
    aggregate = ThroughputMeter(total, settings.timestep_fs, device)
    done = reported = 0
    since = time.perf_counter()
    while done < settings.steps:
        stop = next_stop(done, settings.steps, *intervals)
        timed_steps(sim, own, stop - done)
        done = stop
        if exchange is not None and done % exchange.exchange_every == 0:
            exchange.exchange()
        if done % settings.save_interval == 0 or done == settings.steps:
            matrix = gather_replicas(metrics_matrix(sim).T.contiguous(), shards).T
            aggregate.synchronize()
            now = time.perf_counter()
            aggregate.record(done - reported, now - since)
            reported, since = done, now
            positions = None
            if job.settings.report_positions:
                positions = gather_replicas(sim.positions, shards).cpu().numpy()
            if rank == 0:
                report = MetricsReport(
                    step=sim.step_count,
                    time_ps=sim.time_ps,
                    replicas=np.arange(total),
                    metrics=metrics_from_matrix(matrix),
                    timestep_mol_per_s=aggregate.timestep_mol_per_s(),
                    positions=positions,
                    tempering=None if exchange is None else exchange.summary(),
                )
                results.put(("report", report))
            if done < settings.steps and _stop_requested(rank, stop_event, device):
                break

    positions = gather_replicas(sim.positions, shards)
    velocities = gather_replicas(sim.velocities, shards)
    rates = torch.tensor([own.timestep_mol_per_s()], dtype=torch.float64, device=device)
    parts = [torch.empty_like(rates) for _ in shards]
    dist.all_gather(parts, rates)
    if rank == 0:
        final = {
            "positions": positions.cpu().numpy(),
            "velocities": velocities.cpu().numpy(),
            "levels": None if exchange is None else exchange.levels.numpy(),
            "tempering": None if exchange is None else exchange.summary(),
            "timestep_mol_per_s": aggregate.timestep_mol_per_s(),
            "rank_timestep_mol_per_s": [float(p) for p in parts],
            "steps": done,
        }
        results.put(("final", final))


def _stop_all(context) -> None:
    """Terminate the ranks still running (only the processes this launch started)."""
    for process in context.processes:
        if process.is_alive():
            process.terminate()
    for process in context.processes:
        process.join(timeout=10)
        if process.is_alive():
            process.kill()


def launch_sharded(
    config: ShardedSettings,
    on_report: Callable[[MetricsReport], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> ShardedResult:
    """Run ``config.run``'s ensemble sharded over ``config.ranks`` processes.

    Parameters
    ----------
    config : ShardedSettings
    on_report : callable, optional
        Called in the driver with each :class:`MetricsReport` as it arrives.
    should_stop : callable, optional
        Polled by the driver (every 0.2 s); once it returns True the ranks stop at
        their next report (``result.stopped``, ``result.steps``).

    Returns
    -------
    ShardedResult

    Raises
    ------
    ValueError
        Impossible settings (checked before anything starts).
    ShardedRunError
        A rank raised or died (the message holds its traceback), or the run took
        longer than ``config.timeout_s``.
    """
    device, ranks = config.resolve()
    shards = split_replicas(config.run.replicas, ranks)
    backend = "nccl" if device == "cuda" else "gloo"
    threads = config.threads_per_rank or max(1, (os.cpu_count() or 1) // ranks)
    result = ShardedResult(shards, backend)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="workbench-ranks-") as folder:
        job = _Job(config, shards, backend, f"file://{folder}/store", threads)
        spawn = mp.get_context("spawn")
        results, stop_event = spawn.Queue(), spawn.Event()
        context = mp.start_processes(
            _rank_main,
            args=(job, results, stop_event),
            nprocs=ranks,
            join=False,
            start_method="spawn",
        )
        final = None

        def stop_request() -> None:
            # polled after every message: reports can arrive faster than the queue empties
            if should_stop is not None and not stop_event.is_set() and should_stop():
                stop_event.set()

        try:
            while True:
                final = _drain(results, result, on_report, stop_request, 0.2) or final
                try:
                    if context.join(timeout=0.2):
                        break
                except ProcessException as exc:
                    raise ShardedRunError(
                        f"rank {exc.error_index} of {ranks} failed ({backend}):\n{exc}"
                    ) from None
                if time.monotonic() - start > config.timeout_s:
                    raise ShardedRunError(
                        f"sharded run did not finish within {config.timeout_s:g} s "
                        f"({len(result.reports)} reports received); ranks stopped"
                    )
            final = _drain(results, result, on_report, stop_request) or final
        finally:
            _stop_all(context)
            results.close()
    if final is None:
        raise ShardedRunError("the ranks finished without sending their final state")
    result.positions = torch.from_numpy(final["positions"])
    result.velocities = torch.from_numpy(final["velocities"])
    result.levels = None if final["levels"] is None else torch.from_numpy(final["levels"])
    result.tempering = final["tempering"]
    result.timestep_mol_per_s = final["timestep_mol_per_s"]
    result.rank_timestep_mol_per_s = final["rank_timestep_mol_per_s"]
    result.steps = final["steps"]
    result.stopped = final["steps"] < config.run.steps
    result.wall_s = time.monotonic() - start
    return result


def _drain(
    results, result: ShardedResult, on_report, stop_request, budget_s: float = math.inf
) -> dict | None:
    """Take the waiting messages off the queue; returns the final state if it came.

    ``stop_request`` runs before the first message and after each one, and the drain
    returns after ``budget_s`` at most, so that while the ranks run, a stop and the time
    limit are seen even when reports keep the queue from ever running empty.
    """
    final = None
    until = time.monotonic() + budget_s
    while time.monotonic() < until:
        stop_request()
        try:
            kind, payload = results.get(timeout=0.05)
        except queue_module.Empty:
            return final
        if kind == "report":
            result.reports.append(payload)
            if on_report is not None:
                on_report(payload)
        else:
            final = payload
    return final
