"""An ensemble spread over the machines of a Ray cluster, restartable after faults.

Each shard of the ensemble (:mod:`workbench.distributed.shards`) lives in a Ray
actor that holds one GPU (or CPUs only) and advances its simulation one
*chunk* at a time: from one multiple of the checkpoint interval K to the next.
The driver keeps one chunk call in flight per actor, and merges the metrics
each chunk returns into whole-ensemble reports as soon as every shard has
reached a step (:func:`run_ensemble`'s ``on_report``).

Faults. A chunk call first writes the actor's state to its checkpoint
(:meth:`~workbench.md.Simulation.save_checkpoint`, atomic and bitwise exact)
unless that step is already saved; the checkpoint is therefore at most K steps
old, and never newer than the metrics the driver has received. Actors are
created with Ray's ``max_restarts`` and ``max_task_retries``: when an actor's
process or node dies, Ray starts it again (the constructor loads the last
checkpoint) and re-sends the interrupted chunk call, which recomputes the lost
steps from that checkpoint, bit for bit. Chunks are defined by absolute steps, so a
repeated call is harmless; the driver drops reports it already has. Ray's own
restarts were chosen over re-creating actors in the driver because they also
cover the loss of a whole node (the actor is placed elsewhere) with no
bookkeeping in the driver; the checkpoint folder must then be on storage that
every node sees. After ``max_restarts`` failures of one actor the run stops with
:class:`EnsembleError`, and ``resume=True`` continues it from the checkpoints.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from workbench.distributed.reports import MetricsReport, merge_reports, shard_report
from workbench.distributed.shards import Shard, build_shard, next_stop, split_replicas
from workbench.runner import RunSettings, ThroughputMeter, timed_steps

try:
    import ray
    from ray.exceptions import RayActorError, RayTaskError
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the Ray ensemble launcher needs Ray: pip install 'cg-workbench[cluster]'"
    ) from exc


class EnsembleError(RuntimeError):
    """An actor failed for good (restarts used up, or an error in its code)."""


@dataclass(frozen=True)
class CrashPlan:
    """Fault injection, to check recovery on a real cluster: one abrupt exit.

    The actor of shard ``shard`` ends its own process with ``os._exit`` the first
    time its simulation has reached ``step`` (at a report boundary at or after
    it), as a killed worker or a lost node would. A marker file in the checkpoint
    folder makes it happen once per run.

    Attributes
    ----------
    shard : int
    step : int
    """

    shard: int
    step: int


@dataclass
class EnsembleSettings:
    """An ensemble run on a Ray cluster.

    Attributes
    ----------
    run : RunSettings
        The whole ensemble (``replicas`` in total, ``steps``, ``save_interval`` =
        steps between metric reports, ``seed``); ``device`` is decided per actor.
    actors : int
        Shards, one actor each.
    checkpoint_dir : str
        Folder of the checkpoints ``shard_XXX.pt`` (shared storage on a cluster).
    checkpoint_interval : int
        K, steps between checkpoints; a multiple of ``run.save_interval``.
    gpus_per_actor : float or None
        Ray ``num_gpus`` of each actor; None: 1 if the cluster has GPUs (and
        ``run.device`` is not ``cpu``), else 0.
    cpus_per_actor : float
        Ray ``num_cpus`` of each actor.
    max_restarts : int
        Restarts allowed per actor (Ray ``max_restarts`` and ``max_task_retries``).
    chunk_timeout_s : float or None
        Longest wait for any chunk to finish; None: no limit.
    resume : bool
        Continue from the checkpoints in ``checkpoint_dir`` (otherwise it must hold none).
    crash : CrashPlan or None
        Fault injection (testing only).
    """

    run: RunSettings
    actors: int
    checkpoint_dir: str
    checkpoint_interval: int = 1000
    gpus_per_actor: float | None = None
    cpus_per_actor: float = 1.0
    max_restarts: int = 3
    chunk_timeout_s: float | None = None
    resume: bool = False
    crash: CrashPlan | None = None

    def checkpoint_paths(self) -> list[Path]:
        """Checkpoint file of each shard."""
        return [Path(self.checkpoint_dir) / f"shard_{k:03d}.pt" for k in range(self.actors)]

    def validate(self) -> None:
        """Raise ValueError for impossible settings."""
        self.run.validate()
        if self.run.ladder is not None:
            raise ValueError(
                "parallel tempering is not run across Ray actors; use the sharded launcher "
                "(workbench run --gpus) for a ladder"
            )
        split_replicas(self.run.replicas, self.actors)
        interval = self.run.save_interval
        if self.checkpoint_interval < 1 or self.checkpoint_interval % interval:
            raise ValueError(
                f"checkpoint interval ({self.checkpoint_interval} steps) must be a positive "
                f"multiple of the report interval ({interval} steps)"
            )
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be non-negative, got {self.max_restarts}")
        if self.crash is not None and not 0 <= self.crash.shard < self.actors:
            raise ValueError(f"crash plan names shard {self.crash.shard} of {self.actors}")


@dataclass
class ShardChunk:
    """What one chunk call returns.

    Attributes
    ----------
    shard : int
    start, stop : int
        Steps at the beginning and end of the chunk.
    reports : list of MetricsReport
        The shard's metrics at each report step in ``(start, stop]``.
    resumed_from : int or None
        Step of the checkpoint the actor was restored from, if Ray restarted it
        since its last chunk; None otherwise.
    """

    shard: int
    start: int
    stop: int
    reports: list[MetricsReport]
    resumed_from: int | None = None


class ShardActor:
    """One shard's simulation inside a Ray actor (see the module docstring).

    Parameters
    ----------
    settings : RunSettings
        The whole ensemble's settings.
    shard : Shard
    device : str
    checkpoint : str
        This shard's checkpoint file; loaded if it exists.
    checkpoint_interval : int
    crash : CrashPlan or None
    """

    def __init__(
        self,
        settings: RunSettings,
        shard: Shard,
        device: str,
        checkpoint: str,
        checkpoint_interval: int,
        crash: CrashPlan | None = None,
    ):
        self.settings = settings
        self.shard = shard
        self.sim = build_shard(settings, shard, device).simulation
        self.path = Path(checkpoint)
        self.saved_step = -1
        if self.path.is_file():
            self.sim.load_checkpoint(self.path)
            self.saved_step = self.sim.step_count
        restarted = ray.get_runtime_context().was_current_actor_reconstructed
        self.resumed_from = self.sim.step_count if restarted else None
        self.checkpoint_interval = checkpoint_interval
        self.crash = crash if crash is not None and crash.shard == shard.index else None
        self.meter = ThroughputMeter(shard.replicas, settings.timestep_fs, self.sim.device)

    def save(self) -> int:
        """Write the checkpoint unless this step is saved already; returns the step."""
        if self.saved_step != self.sim.step_count:
            self.sim.save_checkpoint(self.path)
            self.saved_step = self.sim.step_count
        return self.saved_step

    def advance(self) -> ShardChunk:
        """Checkpoint, then run to the next multiple of the checkpoint interval."""
        self.save()
        sim, total = self.sim, self.settings.steps
        start = sim.step_count
        target = next_stop(start, total, self.checkpoint_interval) if start < total else start
        reports = []
        while sim.step_count < target:
            stop = next_stop(sim.step_count, target, self.settings.save_interval)
            timed_steps(sim, self.meter, stop - sim.step_count)
            self._crash_if_planned()
            if stop % self.settings.save_interval == 0 or stop == total:
                reports.append(shard_report(sim, self.shard, self.meter.timestep_mol_per_s()))
        chunk = ShardChunk(self.shard.index, start, target, reports, self.resumed_from)
        self.resumed_from = None
        return chunk

    def _crash_if_planned(self) -> None:
        if self.crash is None or self.sim.step_count < self.crash.step:
            return
        marker = self.path.with_name(f"{self.path.stem}.crashed")
        if marker.exists():
            return
        marker.write_text(f"crashed at step {self.sim.step_count}\n")
        os._exit(1)


@dataclass
class EnsembleResult:
    """What :func:`run_ensemble` gives back.

    Attributes
    ----------
    shards : list of Shard
    reports : list of MetricsReport
        Whole-ensemble metrics at every report step, in step order.
    checkpoints : list of Path
        Final checkpoint of each shard (state at ``run.steps``).
    restarts : dict of int to list of int
        For each restarted shard, the steps of the checkpoints it resumed from.
    timestep_mol_per_s : float
        Sum of the actors' stepping throughputs (warm-up excluded).
    wall_s : float
        Driver wall time, actor start-up included.
    """

    shards: list[Shard]
    reports: list[MetricsReport] = field(default_factory=list)
    checkpoints: list[Path] = field(default_factory=list)
    restarts: dict[int, list[int]] = field(default_factory=dict)
    timestep_mol_per_s: float = 0.0
    wall_s: float = 0.0


def _actor_device(settings: EnsembleSettings) -> tuple[str, float]:
    """Device string inside each actor and its Ray ``num_gpus``."""
    gpus = settings.gpus_per_actor
    if gpus is None:
        on_cluster = ray.cluster_resources().get("GPU", 0) > 0
        gpus = 1.0 if on_cluster and settings.run.device != "cpu" else 0.0
    if gpus == 0 and settings.run.device.startswith("cuda"):
        raise ValueError("run.device asks for CUDA but the actors get no GPU (gpus_per_actor=0)")
    return ("cuda" if gpus > 0 else "cpu"), gpus


def run_ensemble(settings: EnsembleSettings, on_report=None) -> EnsembleResult:
    """Run (or resume) the ensemble on the connected Ray cluster.

    Call ``ray.init(...)`` first (``ray.init(address="auto")`` on a cluster).

    Parameters
    ----------
    settings : EnsembleSettings
    on_report : callable, optional
        Called with each whole-ensemble :class:`MetricsReport` once every shard has
        reached its step.

    Returns
    -------
    EnsembleResult

    Raises
    ------
    ValueError
        Impossible settings; checkpoints present without ``resume`` (or missing with it).
    EnsembleError
        An actor failed beyond its restarts, or a chunk timed out.
    """
    settings.validate()
    if not ray.is_initialized():
        raise RuntimeError("connect to a Ray cluster first: ray.init() or ray.init(address=...)")
    folder = Path(settings.checkpoint_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = settings.checkpoint_paths()
    present = [p for p in paths if p.exists()]
    if present and not settings.resume:
        raise ValueError(
            f"{folder} already holds checkpoints ({present[0].name}, ...); resume=True "
            "continues that run, or choose an empty folder"
        )
    if settings.resume and len(present) != len(paths):
        raise ValueError(f"resume: {folder} holds {len(present)} of {len(paths)} checkpoints")
    device, gpus = _actor_device(settings)
    shards = split_replicas(settings.run.replicas, settings.actors)
    remote = ray.remote(ShardActor).options(
        num_gpus=gpus,
        num_cpus=settings.cpus_per_actor,
        max_restarts=settings.max_restarts,
        max_task_retries=settings.max_restarts,
    )
    start = time.monotonic()
    actors = [
        remote.remote(
            settings.run, shard, device, str(path), settings.checkpoint_interval, settings.crash
        )
        for shard, path in zip(shards, paths, strict=True)
    ]
    result = EnsembleResult(shards)
    try:
        # Every shard holds a checkpoint before any chunk runs, so a failure at any later
        # point leaves a complete set for ``resume`` (a loaded checkpoint is not rewritten).
        _wait(settings, [actor.save.remote() for actor in actors])
        _drive(settings, actors, result, on_report)
        finals = _wait(settings, [actor.save.remote() for actor in actors])
        if set(finals) != {settings.run.steps}:
            raise EnsembleError(f"shards ended at steps {finals}, not {settings.run.steps}")
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
    result.checkpoints = paths
    result.wall_s = time.monotonic() - start
    return result


def _wait(settings: EnsembleSettings, refs: list) -> list:
    """``ray.get`` with the chunk timeout and clear errors."""
    try:
        return ray.get(refs, timeout=settings.chunk_timeout_s)
    except (RayActorError, RayTaskError) as exc:
        raise EnsembleError(_failure(settings, exc)) from exc
    except ray.exceptions.GetTimeoutError as exc:
        raise EnsembleError(f"no answer within {settings.chunk_timeout_s:g} s") from exc


def _failure(settings: EnsembleSettings, exc: Exception) -> str:
    return (
        f"an actor failed for good ({type(exc).__name__}; restarts allowed: "
        f"{settings.max_restarts}); its last checkpoint is in {settings.checkpoint_dir}: "
        f"run again with resume=True to continue.\n{exc}"
    )


def _drive(settings: EnsembleSettings, actors: list, result: EnsembleResult, on_report) -> None:
    """Keep one chunk in flight per actor until every shard reaches the last step."""
    total = settings.run.steps
    pending = {actor.advance.remote(): k for k, actor in enumerate(actors)}
    parts: dict[int, dict[int, MetricsReport]] = {}
    merged_steps: set[int] = set()
    rates = [0.0] * len(actors)
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=settings.chunk_timeout_s)
        if not ready:
            raise EnsembleError(f"no chunk finished within {settings.chunk_timeout_s:g} s")
        ref = ready[0]
        k = pending.pop(ref)
        chunk: ShardChunk = _wait(settings, [ref])[0]
        if chunk.resumed_from is not None:
            result.restarts.setdefault(k, []).append(chunk.resumed_from)
        for report in chunk.reports:
            rates[k] = report.timestep_mol_per_s
            if report.step not in merged_steps:  # a chunk repeated after a restart
                parts.setdefault(report.step, {})[k] = report
        for step in sorted(s for s, got in parts.items() if len(got) == len(actors)):
            merged_steps.add(step)
            merged = merge_reports(list(parts.pop(step).values()))
            result.reports.append(merged)
            if on_report is not None:
                on_report(merged)
        if chunk.stop < total:
            pending[actors[k].advance.remote()] = k
    result.reports.sort(key=lambda r: r.step)
    result.timestep_mol_per_s = sum(rates)


def load_ensemble_state(checkpoints: list[Path]) -> dict[str, torch.Tensor | int]:
    """Step, positions and velocities of a whole ensemble from its shards' checkpoints.

    Returns
    -------
    dict
        ``step`` (int), ``positions`` and ``velocities`` (torch.Tensor, shape (R, n, 3),
        float32, global replica order).
    """
    payloads = [torch.load(p, map_location="cpu", weights_only=True) for p in checkpoints]
    steps = {int(p["step"]) for p in payloads}
    if len(steps) != 1:
        raise ValueError(f"shard checkpoints are at different steps: {sorted(steps)}")
    return {
        "step": steps.pop(),
        "positions": torch.cat([p["positions"] for p in payloads]),
        "velocities": torch.cat([p["velocities"] for p in payloads]),
    }
