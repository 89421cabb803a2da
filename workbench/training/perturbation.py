"""Teacher frames displaced at random, labelled by the teacher: the states just off its ensemble.

A network trained on the teacher's equilibrium frames alone sees no pair closer than the
teacher lets it come, and what it does there is extrapolation. On 1YRF that extrapolation is
attractive: from native, models fall within picoseconds into states where backbone O beads
overlap at 1.6–1.9 Å (docs/decisions/0007-displaced-teacher-frames.md). Frames of a model's
own runs (``--sampler``) show it those states, but they are biased towards where that model
goes and pull the next model with them. Gaussian displacements of the teacher's frames are
unbiased: every direction around the teacher's ensemble, compressed pairs included, with the
teacher's exact forces, at no cost beyond one force evaluation per frame.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from workbench.model.potential import Potential
from workbench.training.data import concatenate_data, sampled_mask


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
