"""Molecular dynamics: integrators, simulations, checkpoints, reporters and parallel tempering."""

from workbench.md.integrators import LangevinIntegrator, VelocityVerletIntegrator
from workbench.md.simulation import (
    CheckpointError,
    NeighborSettings,
    SafetyLimits,
    Simulation,
)
from workbench.md.tempering import ReplicaExchange, attempt_exchanges, geometric_ladder

__all__ = [
    "CheckpointError",
    "LangevinIntegrator",
    "NeighborSettings",
    "ReplicaExchange",
    "SafetyLimits",
    "Simulation",
    "VelocityVerletIntegrator",
    "attempt_exchanges",
    "geometric_ladder",
]
