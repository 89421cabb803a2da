"""Choosing among training epochs by what the model does in MD, not by its force error.

A folded fraction is a small free-energy difference: two models with the same force
error can fold and unfold in different proportions. :func:`folded_fraction_gap` scores a
model being trained by how far its folded fraction in a short Langevin run lies from the
teacher's in the same run (same starting structures, temperature and seed), for
:func:`~workbench.training.force_matching.train_force_matching`'s ``selector``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from workbench.model.potential import Potential
from workbench.model.priors import PriorTerm
from workbench.model.schnet import CGSchNet
from workbench.system.cg_system import CGSystem
from workbench.teacher import folded_fraction, mixed_starts


def folded_fraction_gap(
    system: CGSystem,
    teacher: Potential,
    schnet: CGSchNet,
    priors: dict[str, PriorTerm],
    temperature: float,
    replicas: int,
    steps: int,
    device: str | torch.device = "cpu",
    seed: int = 0,
    bead_types: torch.Tensor | None = None,
) -> tuple[Callable[[], float], float]:
    """A score of ``schnet`` + ``priors``: |folded fraction of the model − the teacher's|.

    Half of the replicas start from the native structure and half from unfolded ones (the
    chain without contact wells, run for ``steps`` steps once), so a run tells whether the
    model holds the folded state and whether it folds, as the teacher does.

    Parameters
    ----------
    system : CGSystem
    teacher : Potential
    schnet : CGSchNet
        The network being trained; scored with its weights at the time of each call.
    priors : dict of str to PriorTerm
        The model's prior terms.
    temperature : float
        Kelvin.
    replicas : int
        Replicas of each run (at least 2).
    steps : int
        Steps of each run; the folded fraction (Q > 0.8) is taken over its second half.
    device : str or torch.device
    seed : int
        Seed of every run (teacher and model see the same random forces).
    bead_types : torch.Tensor, shape (n,), int64, optional
        The model's embedding indices; default the system's bead types.

    Returns
    -------
    (callable, float)
        ``score() -> float`` in [0, 1], and the teacher's folded fraction.
    """
    if replicas < 2 or steps < 2:
        raise ValueError(f"need replicas >= 2 and steps >= 2, got {replicas} and {steps}")
    starts = mixed_starts(system, temperature, replicas, replicas - replicas // 2, steps,
                          device, seed)
    target = folded_fraction(system, teacher, temperature, starts, steps, device, seed)

    types = system.bead_types if bead_types is None else bead_types

    def score() -> float:
        model = Potential(types, schnet, priors).to(device)
        return abs(folded_fraction(system, model, temperature, starts, steps, device, seed)
                   - target)

    return score, target
