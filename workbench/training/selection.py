"""Choosing among training epochs by what the model does in MD, not by its force error.

A folded fraction is a small free-energy difference: two models with the same force error
can fold and unfold in different proportions, and a model can lower its force error on the
teacher's frames while it deepens a basin of its own elsewhere
(docs/decisions/0009-force-error-does-not-select-models.md). :func:`selection_score` scores
a model being trained by a short Langevin run against the teacher's in the same run (same
starting structures, temperature and seed), for
:func:`~workbench.training.force_matching.train_force_matching`'s ``selector``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from workbench.model.potential import Potential
from workbench.model.priors import PriorTerm
from workbench.system.cg_system import CGSystem
from workbench.teacher import mixed_starts, second_half_q, state_thresholds
from workbench.training.validate import (
    MAX_FOLDED_DIFFERENCE,
    MIN_INTERSECTION,
    folded_fraction,
    histogram_intersection,
)

#: What a selection run compares: ``folded``, |folded fraction of the model − the
#: teacher's|, in [0, 1]; ``ensemble``, the worse of the long-run validation's two ensemble
#: criteria, each as a share of its limit: max(|Δ folded| / 0.1, (1 − Q overlap) / 0.2),
#: at most 1 when both pass.
SELECTION_CRITERIA = ("folded", "ensemble")


def selection_score(
    system: CGSystem,
    teacher: Potential,
    network: nn.Module,
    priors: dict[str, PriorTerm],
    temperature: float,
    replicas: int,
    steps: int,
    device: str | torch.device = "cpu",
    seed: int = 0,
    bead_types: torch.Tensor | None = None,
    criterion: str = "folded",
    other_starts: torch.Tensor | None = None,
) -> tuple[Callable[[], float], float]:
    """A score of ``network`` + ``priors`` by a short run against the teacher's (0: the same).

    Half of the replicas start from the native structure and half from unfolded ones (the
    chain without contact wells, run for ``steps`` steps once), so a run tells whether the
    model holds the folded state and whether it folds, as the teacher does. With
    ``other_starts`` that second half starts from those structures instead: say, the end
    of a model run that drifted into a state of its own, which the teacher leaves and a
    model that keeps it does not, within a run far shorter than the drift. A sample is
    folded above the protein's folded Q threshold (:func:`~workbench.teacher.state_thresholds`).

    Parameters
    ----------
    system : CGSystem
    teacher : Potential
    network : nn.Module
        The network being trained (any registered architecture); scored with its weights
        at the time of each call.
    priors : dict of str to PriorTerm
        The model's prior terms.
    temperature : float
        Kelvin.
    replicas : int
        Replicas of each run (at least 2).
    steps : int
        Steps of each run; Q is sampled over its second half.
    device : str or torch.device
    seed : int
        Seed of every run (teacher and model see the same random forces).
    bead_types : torch.Tensor, shape (n,), int64, optional
        The model's embedding indices; default the system's bead types.
    criterion : str
        One of :data:`SELECTION_CRITERIA`.
    other_starts : torch.Tensor, shape (S, n, 3), float32, optional
        Starting structures of the second half of the replicas, replica ``i`` of that half
        from structure ``i mod S`` (say, :func:`~workbench.md.simulation.checkpoint_positions`
        of a run); default unfolded chains.

    Returns
    -------
    (callable, float)
        ``score() -> float`` (non-negative), and the teacher's folded fraction.
    """
    if criterion not in SELECTION_CRITERIA:
        raise ValueError(f"selection criterion must be one of {SELECTION_CRITERIA}, got "
                         f"{criterion!r}")
    if replicas < 2 or steps < 2:
        raise ValueError(f"need replicas >= 2 and steps >= 2, got {replicas} and {steps}")
    folded_q = state_thresholds(system.name)[0]
    others = replicas - replicas // 2
    if other_starts is None:
        starts = mixed_starts(system, temperature, replicas, others, steps, device, seed)
    else:
        if other_starts.ndim != 3 or other_starts.shape[1:] != (system.n_beads, 3):
            raise ValueError(f"other starts must have shape (S, {system.n_beads}, 3), got "
                             f"{tuple(other_starts.shape)}")
        picked = other_starts[torch.arange(others) % other_starts.shape[0]]
        starts = torch.cat([mixed_starts(system, temperature, replicas - others, 0, steps,
                                         device, seed), picked.to(device, torch.float32)])
    target = second_half_q(system, teacher, temperature, starts, steps, device, seed)
    target_folded = folded_fraction(target, folded_q)
    types = system.bead_types if bead_types is None else bead_types

    def score() -> float:
        model = Potential(types, network, priors).to(device)
        q = second_half_q(system, model, temperature, starts, steps, device, seed)
        gap = abs(folded_fraction(q, folded_q) - target_folded)
        if criterion == "folded":
            return gap
        overlap = histogram_intersection(q, target)
        return max(gap / MAX_FOLDED_DIFFERENCE, (1.0 - overlap) / (1.0 - MIN_INTERSECTION))

    return score, target_folded
