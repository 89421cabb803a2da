"""Where models hold structures lower than their teacher does: energy gaps and force errors.

For a model and a set of structures, the energy gap is the model's energy minus the
teacher's, averaged over the set, relative to the same difference averaged over a
reference set (say, the final structures of the teacher's long run): energies are known
up to a constant. A large negative gap at a run's ends is a basin of the model's own.
"""

from __future__ import annotations

import torch

from workbench.model.potential import Potential
from workbench.training.force_matching import potential_labels


def energy_gaps(
    models: dict[str, Potential],
    teacher: Potential,
    reference: torch.Tensor,
    structures: dict[str, torch.Tensor],
) -> dict[str, dict[str, dict[str, float]]]:
    """Energy gap and force RMSE of every model at every set of structures.

    Parameters
    ----------
    models : dict of str to Potential
        Named models.
    teacher : Potential
        The teacher they are compared with.
    reference : torch.Tensor, shape (M, n, 3)
        Structures at which the gap is zero on average.
    structures : dict of str to torch.Tensor, each shape (m, n, 3)
        Named sets of structures.

    Returns
    -------
    dict
        ``{model: {set: {"energy_gap": kcal/mol, "force_rmse": kcal/mol/Å}}}``.
    """
    teacher_labels = {name: potential_labels(teacher, pos) for name, pos in structures.items()}
    reference_energy = potential_labels(teacher, reference)[0]
    table = {}
    for name, model in models.items():
        offset = (potential_labels(model, reference)[0] - reference_energy).mean()
        table[name] = {}
        for set_name, positions in structures.items():
            energy, forces = potential_labels(model, positions)
            teacher_energy, teacher_forces = teacher_labels[set_name]
            table[name][set_name] = {
                "energy_gap": float((energy - teacher_energy - offset).mean()),
                "force_rmse": float((forces - teacher_forces).square().mean().sqrt()),
            }
    return table
