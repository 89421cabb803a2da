"""Per-replica metrics of a whole ensemble at one step, wherever its shards ran.

A shard's metrics travel as one float64 matrix (one row per metric, one column
per replica) so that a single collective or message carries them; float32
values and flags survive the round trip exactly. Reports hold NumPy arrays:
they cross process boundaries (queues, Ray) by value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from workbench.distributed.shards import Shard
from workbench.md.reporters import MetricsReporter

#: Rows of a metrics matrix: the keys of ``Simulation.metrics()`` plus the bath temperature.
METRIC_KEYS = (
    "rmsd",
    "q",
    "potential_energy",
    "kinetic_energy",
    "temperature",
    "temperature_set",
    "frozen",
)


def bath_temperatures(sim) -> torch.Tensor:
    """Thermostat temperature of each replica of ``sim``, K, shape (R,), float64, CPU.

    NaN for an integrator without a thermostat.
    """
    t = getattr(sim.integrator, "temperature", None)
    if t is None:
        return torch.full((sim.replicas,), float("nan"), dtype=torch.float64)
    t = torch.as_tensor(t, dtype=torch.float64).flatten()
    return t.expand(sim.replicas).clone() if t.numel() == 1 else t.clone()


def metrics_matrix(sim) -> torch.Tensor:
    """``sim``'s per-replica metrics as one matrix on its device.

    Returns
    -------
    torch.Tensor, shape (len(METRIC_KEYS), R), float64
        Row order :data:`METRIC_KEYS`; ``frozen`` as 0/1.
    """
    metrics = sim.metrics()
    metrics["temperature_set"] = bath_temperatures(sim).to(sim.device)
    return torch.stack([metrics[k].to(torch.float64) for k in METRIC_KEYS])


def metrics_from_matrix(matrix: torch.Tensor | np.ndarray) -> dict[str, np.ndarray]:
    """Inverse of :func:`metrics_matrix`: a dict of arrays of shape (R,).

    ``frozen`` is bool, ``temperature_set`` float64, the others float32 (as
    ``Simulation.metrics()`` gives them).
    """
    matrix = torch.as_tensor(matrix).detach().cpu().numpy()
    out = {}
    for key, row in zip(METRIC_KEYS, matrix, strict=True):
        if key == "frozen":
            out[key] = row != 0
        elif key == "temperature_set":
            out[key] = row.copy()
        else:
            out[key] = row.astype(np.float32)
    return out


@dataclass
class MetricsReport:
    """Metrics of (part of) an ensemble at one step.

    Attributes
    ----------
    step : int
    time_ps : float
        Simulated time per replica, ps.
    replicas : numpy.ndarray, shape (R,), int64
        Global replica numbers, ascending.
    metrics : dict of str to numpy.ndarray, each shape (R,)
        Keys :data:`METRIC_KEYS`.
    timestep_mol_per_s : float
        Aggregate throughput over every process so far (warm-up excluded).
    positions : numpy.ndarray or None, shape (R, n, 3), float32
        Positions of these replicas, Å, where the run was asked to report them.
    tempering : dict or None
        Parallel tempering so far (ladder, exchange rounds, acceptance per level pair:
        ``RankExchange.summary()``), for a run with a temperature ladder.
    """

    step: int
    time_ps: float
    replicas: np.ndarray
    metrics: dict[str, np.ndarray]
    timestep_mol_per_s: float
    positions: np.ndarray | None = None
    tempering: dict | None = None

    def write_csv(self, reporter: MetricsReporter) -> None:
        """Append this report's rows to a metrics CSV (global replica numbers)."""
        reporter.write(self.step, self.time_ps, self.metrics, self.replicas)

    def summary(self) -> dict:
        """Ensemble means over live replicas (JSON-able; None where undefined)."""
        live = ~self.metrics["frozen"]
        q = self.metrics["q"][live]
        has_q = bool(live.any()) and not bool(np.isnan(q).all())
        rmsd = self.metrics["rmsd"][live]
        return {
            "step": self.step,
            "replicas": len(self.replicas),
            "timestep_mol_per_s": self.timestep_mol_per_s,
            "rmsd_mean": float(rmsd.mean()) if live.any() else None,
            "q_mean": float(np.nanmean(q)) if has_q else None,
            "frozen_replicas": [int(r) for r in self.replicas[~live]],
        }


def merge_reports(parts: list[MetricsReport]) -> MetricsReport:
    """One report from the reports of disjoint shards at the same step.

    Replicas are put in ascending global order; throughputs add up (the shards
    ran side by side).
    """
    steps = {p.step for p in parts}
    if len(steps) != 1:
        raise ValueError(f"reports of different steps cannot be merged: {sorted(steps)}")
    parts = sorted(parts, key=lambda p: int(p.replicas[0]))
    return MetricsReport(
        step=parts[0].step,
        time_ps=parts[0].time_ps,
        replicas=np.concatenate([p.replicas for p in parts]),
        metrics={k: np.concatenate([p.metrics[k] for p in parts]) for k in METRIC_KEYS},
        timestep_mol_per_s=sum(p.timestep_mol_per_s for p in parts),
    )


def shard_report(sim, shard: Shard, timestep_mol_per_s: float) -> MetricsReport:
    """The metrics of one shard's simulation now, under global replica numbers."""
    return MetricsReport(
        step=sim.step_count,
        time_ps=sim.time_ps,
        replicas=np.arange(shard.first, shard.stop),
        metrics=metrics_from_matrix(metrics_matrix(sim)),
        timestep_mol_per_s=timestep_mol_per_s,
    )
