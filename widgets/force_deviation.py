"""How far two kernel configurations disagree on the forces of the same coordinates."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.model.options import KernelOptions
from workbench.model.potential import Potential
from workbench.neighbors import Graph


@dataclass(frozen=True)
class ForceDeviation:
    """Largest force difference between configurations A and B.

    Attributes
    ----------
    max_abs : float
        ``max |F_A - F_B|`` over replicas, beads and components, kcal/mol/Å.
    max_force : float
        ``max |F_A|``, for scale, kcal/mol/Å.
    """

    max_abs: float
    max_force: float

    @property
    def relative(self) -> float:
        """``max_abs / max_force`` (0 when all forces vanish)."""
        return self.max_abs / self.max_force if self.max_force > 0 else 0.0


def force_deviation(
    potential: Potential,
    positions: torch.Tensor,
    graph: Graph | None,
    options_a: KernelOptions,
    options_b: KernelOptions,
) -> ForceDeviation:
    """Evaluate the forces of both configurations on identical positions and compare them.

    Parameters
    ----------
    potential : Potential
    positions : torch.Tensor, shape (R, n, 3)
    graph : Graph or None
        Neighbour graph valid for ``positions``.
    options_a, options_b : KernelOptions
    """
    _, forces_a = potential.energy_and_forces(positions, graph, options_a)
    _, forces_b = potential.energy_and_forces(positions, graph, options_b)
    return ForceDeviation(
        max_abs=float((forces_a - forces_b).abs().max()),
        max_force=float(forces_a.abs().max()),
    )
