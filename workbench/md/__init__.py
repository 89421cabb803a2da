"""Molecular dynamics: integrators, simulations, checkpoints and reporters."""

from workbench.md.integrators import LangevinIntegrator, VelocityVerletIntegrator
from workbench.md.simulation import (
    CheckpointError,
    NeighborSettings,
    SafetyLimits,
    Simulation,
)

__all__ = [
    "CheckpointError",
    "LangevinIntegrator",
    "NeighborSettings",
    "SafetyLimits",
    "Simulation",
    "VelocityVerletIntegrator",
]
