"""The relative-entropy (ensemble) term of force matching: the model's Boltzmann ensemble
pulled towards the teacher's.

Force matching fits the mean force where frames are dense; a free-energy difference
between basins (a folded state too unstable by a kT, say) hides in the sparse regions
between them. The relative entropy ``S = D_KL(teacher ‖ model)`` measures exactly that.
Its change from a sampler model ``θ0`` (whose own MD gave the model frames) to the
weights ``θ`` is, per temperature ``T`` with ``β = 1/(k_B T)`` and
``ΔU(x) = U_θ(x) − U_θ0(x)`` (full energies, priors included),

    ΔS(θ) = β ⟨ΔU⟩_teacher + log ⟨exp(−β ΔU)⟩_θ0

The second average reweights the sampler's frames to ``θ`` (free-energy perturbation),
so the term is zero at ``θ = θ0`` and its gradient, ``β (⟨∂U/∂θ⟩_teacher −
⟨∂U/∂θ⟩_θ)``, lowers the energy where the teacher goes more often than the model and
raises it where the model goes more often. The reweighting holds while ``θ`` stays near
``θ0``: its effective sample fraction (Kish) is reported, and training stops when it falls
below a threshold (the next round samples the new model). Only the SchNet part of ``U``
depends on ``θ``: the priors are fixed, and enter through ``offset = U_prior − U_θ0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from workbench.model.potential import Potential
from workbench.neighbors import NeighborList
from workbench.units import KB


@dataclass
class SamplerFrames:
    """Which frames of a data set a model's own dynamics sampled, and that model.

    Attributes
    ----------
    potential : Potential
        The sampler (full potential, priors included): ``θ0`` of the module docstring.
    mask : torch.Tensor, shape (M,), bool
        Its frames among the data set's ``M``.
    """

    potential: Potential
    mask: torch.Tensor


@dataclass
class EnsembleSet:
    """The frames of one temperature for :func:`relative_entropy_change`.

    Attributes
    ----------
    teacher : torch.Tensor, shape (A, n, 3), float32
        Frames of the teacher's own dynamics at ``temperature``, Å.
    teacher_offset : torch.Tensor, shape (A,), float32
        Prior energy less the sampler's full energy at those frames, kcal/mol.
    model : torch.Tensor, shape (B, n, 3), float32
        Frames of the sampler model's dynamics at ``temperature``, Å.
    model_offset : torch.Tensor, shape (B,), float32
        Prior energy less the sampler's full energy at those frames, kcal/mol.
    temperature : float
        Kelvin.
    """

    teacher: torch.Tensor
    teacher_offset: torch.Tensor
    model: torch.Tensor
    model_offset: torch.Tensor
    temperature: float

    @property
    def beta(self) -> float:
        """1/(k_B T), mol/kcal."""
        return 1.0 / (KB * self.temperature)

    def subset(self, teacher: torch.Tensor, model: torch.Tensor) -> EnsembleSet:
        """The frames at the given indices (int64) of each kind."""
        return EnsembleSet(
            self.teacher[teacher], self.teacher_offset[teacher],
            self.model[model], self.model_offset[model], self.temperature,
        )


def ensemble_sets(
    positions: torch.Tensor,
    temperature: torch.Tensor,
    teacher_frames: torch.Tensor,
    model_frames: torch.Tensor,
    offset: torch.Tensor,
) -> list[EnsembleSet]:
    """One :class:`EnsembleSet` per temperature at which both kinds of frames exist.

    Parameters
    ----------
    positions : torch.Tensor, shape (M, n, 3), float32
    temperature : torch.Tensor, shape (M,), float32
        Kelvin.
    teacher_frames, model_frames : torch.Tensor, shape (M,), bool
        Frames of the teacher's dynamics and of the sampler's.
    offset : torch.Tensor, shape (M,), float32
        Prior energy less the sampler's full energy per frame, kcal/mol.

    Returns
    -------
    list of EnsembleSet
        Sorted by temperature.
    """
    sets = []
    for value in sorted({round(float(t), 6) for t in temperature[model_frames]}):
        at = (temperature - value).abs() < 1e-3
        teacher, model = teacher_frames & at, model_frames & at
        if teacher.any():
            sets.append(EnsembleSet(
                positions[teacher], offset[teacher], positions[model], offset[model], value
            ))
    if not sets:
        raise ValueError("no temperature has both teacher frames and sampler frames")
    return sets


def schnet_energies(potential: Potential, pos: torch.Tensor) -> torch.Tensor:
    """Energies ``(B,)`` (kcal/mol, float32) of ``potential`` at ``pos`` (B, n, 3) on the
    reference path, differentiable with respect to its weights."""
    graph = NeighborList(pos.shape[1], potential.cutoff, skin=0.0).update(pos.detach())
    return potential.energy(pos, graph)


def relative_entropy_change(
    potential: Potential,
    frames: EnsembleSet,
    device: str | torch.device,
    reweight: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ΔS`` of the module docstring over ``frames`` and the reweighting's effective
    sample fraction.

    Parameters
    ----------
    potential : Potential
        The SchNet part being trained (no priors: they are in the offsets).
    frames : EnsembleSet
    device : str or torch.device
    reweight : bool
        False: the model frames count equally, ``β (⟨ΔU⟩_teacher − ⟨ΔU⟩_θ0)`` instead of
        ``ΔS``. Its gradient is the plain contrastive one, ``β (⟨∂U/∂θ⟩_teacher −
        ⟨∂U/∂θ⟩_θ0)``: exact at ``θ = θ0`` (where it equals ``ΔS``'s), and it does not
        collapse onto a few frames as ``θ`` leaves ``θ0``.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        The change (nats, scalar, differentiable with respect to the weights) and the
        effective sample fraction ``(Σw)² / (B Σw²)`` of ``w = exp(−β ΔU)`` (scalar, in
        (0, 1], no gradient).
    """
    teacher = schnet_energies(potential, frames.teacher.to(device))
    model = schnet_energies(potential, frames.model.to(device))
    return _change_and_fraction(
        frames.beta,
        teacher + frames.teacher_offset.to(device),
        model + frames.model_offset.to(device),
        reweight,
    )


def validation_relative_entropy(
    potential: Potential, sets: list[EnsembleSet], batch_size: int, device: str | torch.device
) -> tuple[float, float]:
    """Mean ``ΔS`` over the temperatures and the smallest effective sample fraction, over
    all frames of ``sets`` without weight gradients (energies evaluated in batches)."""
    changes, fractions = [], []
    with torch.no_grad():
        for frames in sets:
            change, fraction = _change_and_fraction(
                frames.beta,
                _energy_changes(potential, frames.teacher, frames.teacher_offset, batch_size,
                                device),
                _energy_changes(potential, frames.model, frames.model_offset, batch_size,
                                device),
            )
            changes.append(float(change))
            fractions.append(float(fraction))
    return sum(changes) / len(changes), min(fractions)


def smallest_sample_fraction(
    potential: Potential, sets: list[EnsembleSet], batch_size: int, device: str | torch.device
) -> float:
    """The smallest effective sample fraction over ``sets`` alone (the sampler's frames
    only, no weight gradients): the cheap check made during training."""
    with torch.no_grad():
        return min(
            float(_fraction(frames.beta, _energy_changes(
                potential, frames.model, frames.model_offset, batch_size, device
            )))
            for frames in sets
        )


def _energy_changes(
    potential: Potential,
    positions: torch.Tensor,
    offset: torch.Tensor,
    batch_size: int,
    device: str | torch.device,
) -> torch.Tensor:
    """``ΔU`` (M,) at ``positions`` (M, n, 3), evaluated in batches."""
    return batched_energies(potential, positions, batch_size, device) + offset.to(device)


def batched_energies(
    potential: Potential, positions: torch.Tensor, batch_size: int, device: str | torch.device
) -> torch.Tensor:
    """:func:`schnet_energies` (M,) of ``positions`` (M, n, 3), ``batch_size`` frames at a
    time, on ``device``."""
    return torch.cat([
        schnet_energies(potential, positions[s : s + batch_size].to(device))
        for s in range(0, positions.shape[0], batch_size)
    ])


def _change_and_fraction(
    beta: float, teacher: torch.Tensor, model: torch.Tensor, reweight: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ΔS`` (or, without ``reweight``, its equal-weight form) and the effective sample
    fraction from ``ΔU`` at the teacher's frames (A,) and at the sampler's (B,), kcal/mol."""
    if reweight:
        model_side = torch.logsumexp(-beta * model, 0) - math.log(model.shape[0])
    else:
        model_side = -beta * model.mean()
    return beta * teacher.mean() + model_side, _fraction(beta, model.detach())


def _fraction(beta: float, model: torch.Tensor) -> torch.Tensor:
    """Effective sample fraction ``(Σw)² / (B Σw²)`` of ``w = exp(−β ΔU)`` from ``ΔU`` at
    the sampler's frames (B,)."""
    log_w = -beta * model
    return torch.exp(
        2 * torch.logsumexp(log_w, 0) - torch.logsumexp(2 * log_w, 0) - math.log(model.shape[0])
    )
