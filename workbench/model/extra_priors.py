"""Prior terms beyond :mod:`workbench.model.priors`, needed to import mlcg priors.

Formulas follow docs/mlcg-format.md §7.3–§7.4 (no ½ factors). All classes are
registered with :func:`~workbench.model.priors.register_prior_class`, so saved
potentials that use them load again (import this module first; importing
:mod:`workbench.model.mlcg_import` does).
"""

from __future__ import annotations

import torch

from workbench.model.geometry import bond_lengths, gather_beads, torsions
from workbench.model.priors import PriorTerm, register_prior_class


def bend_angles(pos: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Angles θ in [0, π] of triplets ``(i, apex j, k)``, shape (R, P), radians.

    ``θ = atan2(|a × b|, a · b)`` with ``a = x_i − x_j``, ``b = x_k − x_j``.
    """
    a = gather_beads(pos, index, 0) - gather_beads(pos, index, 1)
    b = gather_beads(pos, index, 2) - gather_beads(pos, index, 1)
    cross = torch.linalg.vector_norm(torch.linalg.cross(a, b), dim=-1)
    return torch.atan2(cross, (a * b).sum(-1))


@register_prior_class
class HarmonicImpropers(PriorTerm):
    """``E = k (φ − x0)²`` on the torsion φ in (−π, π] (no periodic wrap), k in kcal/mol."""

    order = 4
    parameter_names = ("x0", "k")
    energy_parameters = ("k",)

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        return self.k * (torsions(pos, self.index) - self.x0) ** 2


@register_prior_class
class HarmonicThetaAngles(PriorTerm):
    """``E = k (θ − x0)²`` on the bend angle θ in radians (apex in column 1)."""

    order = 3
    parameter_names = ("x0", "k")
    energy_parameters = ("k",)

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        return self.k * (bend_angles(pos, self.index) - self.x0) ** 2


@register_prior_class
class ExpRepulsion(PriorTerm):
    """``E = (6 / α) exp(α (1 − r / r0))`` over a fixed pair list (α dimensionless, r0 in Å)."""

    order = 2
    parameter_names = ("alpha", "r0")

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        r = bond_lengths(pos, self.index)
        return 6.0 / self.alpha * torch.exp(self.alpha * (1.0 - r / self.r0))


@register_prior_class
class ConstantEnergy(PriorTerm):
    """Constant offsets ``E = Σ V0`` (the ``V0`` of specialised mlcg priors).

    ``index`` holds one bead per offset (the first bead of the term it came from);
    it is bookkeeping only and the energy does not depend on positions.
    """

    order = 1
    parameter_names = ("V0",)

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        return self.V0.to(pos.dtype).expand(pos.shape[0], -1)
