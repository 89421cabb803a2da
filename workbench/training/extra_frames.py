"""Teacher frames off the teacher's own ensemble, labelled by the teacher: displaced at
random (:func:`displaced_frames`, ``--noise``) and more compact (:func:`compacted_frames`,
``--compact``).

*Displaced frames: the states just off its ensemble.*

A network trained on the teacher's equilibrium frames alone sees no pair closer than the
teacher lets it come, and what it does there is extrapolation. On 1YRF that extrapolation is
attractive: from native, models fall within picoseconds into states where backbone O beads
overlap at 1.6–1.9 Å (docs/decisions/0007-displaced-teacher-frames.md). Frames of a model's
own runs (``--sampler``) show it those states, but they are biased towards where that model
goes and pull the next model with them. Gaussian displacements of the teacher's frames are
unbiased: every direction around the teacher's ensemble, compressed pairs included, with the
teacher's exact forces, at no cost beyond one force evaluation per frame.

*Compact frames: states more compact than the teacher's own ensemble reaches.*

A network trained by force matching is free wherever its data never went. For CGSchNet
that is above all the region of structures more compact than any teacher frame: there
it extrapolates the attraction of native contacts to ever closer packing, and a long
run of the model drops into a collapsed state far below the teacher's energy (a hole),
with dozens of bead pairs closer than the closest approach in the data.

These frames cover that region on purpose. The teacher runs with one extra term, a
flat-bottomed restraint on the radius of gyration that pushes it below a fraction of the
native value; the kept frames are labelled with the plain teacher's forces (and, in
training, its energies), so the model learns how steeply the teacher's energy rises
there. Like frames sampled by a model, they are not the teacher's Boltzmann ensemble and
are kept out of the prior fit (``sampled`` in the data set).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from workbench.model.potential import Potential
from workbench.system.cg_system import CGSystem
from workbench.training.data import concatenate_data, generate_teacher_data, sampled_mask

#: Restraint strength, kcal/mol/Å²: 1 Å of radius of gyration above the target costs
#: 10 kcal/mol, well above the thermal energy, so the runs sit near their target.
SQUEEZE_STRENGTH = 10.0


def radius_of_gyration(pos: torch.Tensor) -> torch.Tensor:
    """Radius of gyration of each replica (equal bead weights).

    Parameters
    ----------
    pos : torch.Tensor, shape (R, n, 3) or (n, 3), float32
        Å.

    Returns
    -------
    torch.Tensor, shape (R,) or (), float32
        Å.
    """
    centred = pos - pos.mean(-2, keepdim=True)
    return centred.pow(2).sum(-1).mean(-1).sqrt()


class GyrationSqueeze(nn.Module):
    """``E = k · max(Rg − rg_max, 0)²`` (kcal/mol): zero at or below ``rg_max`` (Å).

    Parameters
    ----------
    rg_max : float
        Å.
    strength : float
        ``k``, kcal/mol/Å².
    """

    def __init__(self, rg_max: float, strength: float = SQUEEZE_STRENGTH):
        super().__init__()
        if not (rg_max > 0 and strength > 0):
            raise ValueError(
                f"the squeeze needs rg_max > 0 and strength > 0, got {rg_max}, {strength}"
            )
        self.register_buffer("rg_max", torch.tensor(float(rg_max)))
        self.register_buffer("strength", torch.tensor(float(strength)))

    def forward(self, pos: torch.Tensor) -> torch.Tensor:
        """Energy per replica, shape (R,), for positions (R, n, 3)."""
        excess = torch.relu(radius_of_gyration(pos) - self.rg_max)
        return self.strength * excess**2


def squeezed_teacher(
    system: CGSystem, teacher: Potential, fraction: float, strength: float = SQUEEZE_STRENGTH
) -> Potential:
    """The teacher plus a :class:`GyrationSqueeze` to ``fraction`` of the native radius.

    Parameters
    ----------
    system : CGSystem
    teacher : Potential
        A prior-only potential (its terms are shared, not copied).
    fraction : float
        Target radius of gyration over the native one, in (0, 1].
    strength : float
        kcal/mol/Å².
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(
            f"a compaction fraction is the target radius of gyration over the native one, "
            f"in (0, 1]; got {fraction}"
        )
    rg_native = float(radius_of_gyration(system.native_positions))
    priors = {**teacher.priors, "squeeze": GyrationSqueeze(fraction * rg_native, strength)}
    return Potential(system.bead_types, teacher.network, priors)


def compacted_frames(
    system: CGSystem,
    teacher: Potential,
    fractions: Sequence[float],
    temperatures: Sequence[float],
    replicas: int,
    steps: int,
    save_every: int,
    **options,
) -> dict[str, torch.Tensor]:
    """Frames of the squeezed teacher at each fraction, labelled by the plain teacher.

    Parameters are those of :func:`~workbench.training.data.generate_teacher_data`
    (``options``: its ``device``, ``seed``, ``equilibration``, ``progress``);
    ``fractions`` are the targets of :func:`squeezed_teacher` (one run of ``replicas``
    per temperature for each, seeds ``seed``, ``seed + 1``, ...). Returns a data set
    whose frames are all ``sampled``.
    """
    if not fractions:
        raise ValueError("give at least one compaction fraction")
    seed = options.pop("seed", 0)
    parts = [
        generate_teacher_data(
            system, teacher, temperatures, replicas, steps, save_every, seed=seed + k,
            sampler=squeezed_teacher(system, teacher, fraction), **options,
        )
        for k, fraction in enumerate(fractions)
    ]
    return concatenate_data(*parts)


def displaced_frames(
    teacher: Potential,
    data: dict[str, torch.Tensor],
    scales: Sequence[float],
    fraction: float,
    seed: int = 0,
    device: str | torch.device = "cpu",
    batch: int = 1024,
) -> dict[str, torch.Tensor]:
    """Copies of teacher frames with every coordinate displaced by Gaussian noise.

    For each scale ``s``, a random ``fraction`` of the teacher's own frames (those not
    ``sampled``) is copied with independent N(0, s²) displacements of every coordinate and
    relabelled with the teacher's forces there. The frames keep their source's temperature
    and are marked ``sampled``: they are trained on but not used to fit priors.

    Parameters
    ----------
    teacher : Potential
        The labelling potential.
    data : dict
        A data set (:mod:`workbench.training.data`): ``positions`` (M, n, 3), ``forces``
        (M, n, 3), ``temperature`` (M,), float32, optionally ``sampled`` (M,) bool.
    scales : sequence of float
        Standard deviations of the displacement per coordinate, Å (positive). Two beads
        then move apart or together by ``√2 s`` in root mean square.
    fraction : float
        Share of the teacher's frames copied at each scale, in (0, 1].
    seed : int
        Seeds the frame choice and the displacements (the global RNG is left alone).
    device : str or torch.device
        Where the teacher evaluates its forces.
    batch : int
        Frames per teacher evaluation.

    Returns
    -------
    dict
        ``positions`` (K, n, 3), ``forces`` (K, n, 3), ``temperature`` (K,) float32 on the
        CPU, ``sampled`` (K,) True; ``K = len(scales) × round(fraction × M_teacher)`` (at
        least one frame per scale).
    """
    if not scales or not all(s > 0 for s in scales):
        raise ValueError(f"displacement scales must be positive Å, got {list(scales)}")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"the share of frames displaced must lie in (0, 1], got {fraction}")
    own = torch.nonzero(~sampled_mask(data)).flatten()
    if own.numel() == 0:
        raise ValueError("the data hold no teacher frames to displace")
    generator = torch.Generator().manual_seed(seed)
    per_scale = max(1, round(fraction * own.numel()))
    labeller = teacher.to(device)
    parts = []
    for scale in scales:
        chosen = own[torch.randperm(own.numel(), generator=generator)[:per_scale]]
        source = data["positions"][chosen]
        positions = source + scale * torch.randn(source.shape, generator=generator)
        forces = torch.cat([
            labeller.energy_and_forces(positions[s : s + batch].to(device), None)[1].cpu()
            for s in range(0, positions.shape[0], batch)
        ])
        parts.append({
            "positions": positions.float(),
            "forces": forces.float(),
            "temperature": data["temperature"][chosen].float(),
            "sampled": torch.ones(per_scale, dtype=torch.bool),
        })
    return concatenate_data(*parts)
