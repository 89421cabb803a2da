"""Force matching: a network (CGSchNet, CGPaiNN, CGEGNN, ...) trained on teacher forces minus
prior forces.

The PyTorch reference path is used throughout (the fused kernels return no weight
gradients): forces are ``−∂E/∂x`` from ``torch.autograd.grad(..., create_graph=True)``
so the loss can be differentiated with respect to the weights. The loss is the mean
squared force error per component, (kcal/mol/Å)², plus, with an ``energy_weight`` and
target energies (teacher minus priors), that weight times the mean squared energy error
per bead after removing its mean over the batch (energies are known up to a constant):

    loss = mean |ΔF|² / 3n·B + w · mean_b (ΔE_b − mean ΔE)² / n  [+ w_S · ΔS]

Force matching pins the energy only where frames are dense; the energy term ties together
regions the data reach separately (a folded and an unfolded basin, or a compact state far
from the teacher's ensemble that a model run fell into). With frames of a sampler model's
own dynamics, the relative-entropy term ``w_S · ΔS``
(:mod:`workbench.training.relative_entropy`) moves the model's ensemble towards the
teacher's directly; with walkers of the model being trained
(:class:`~workbench.training.relative_entropy.OnlineEnsemble`) its frames stay those of
the current weights.

With ``weight_average`` the kept model is an exponential moving average of the weights
over the last ``~1 / (1 − decay)`` optimiser steps (:class:`WeightAverage`). For a
35-residue protein the model's folded fraction swings between epochs whose force errors
hardly differ (1YRF: from 0.91 to 0.05 within five epochs at a validation force RMSE of
0.77-0.85; docs/decisions/0009-force-error-does-not-select-models.md): the last optimiser
steps before a checkpoint can move the free energies of whole basins by several kT. The
average takes that step-to-step noise out of the kept model while the optimiser goes on
with the raw weights.
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch
from torch import nn
from tqdm import tqdm

from workbench.model.potential import Potential
from workbench.model.priors import PriorTerm
from workbench.neighbors import NeighborList
from workbench.training.relative_entropy import (
    EnsembleSet,
    OnlineEnsemble,
    relative_entropy_change,
    smallest_sample_fraction,
    validation_relative_entropy,
)

LOG_COLUMNS = (
    "epoch", "train_loss", "val_loss", "val_force_rmse", "val_energy_rmse", "learning_rate",
    "seconds", "val_relative_entropy", "ensemble_sample_fraction", "walker_q_mean",
    "walker_folded", "grad_norm",
)


@dataclass
class FitSettings:
    """Optimisation settings of :func:`train_force_matching`.

    Attributes
    ----------
    epochs : int
        Largest number of passes over the training frames.
    batch_size : int
        Frames per optimiser step.
    learning_rate : float
        Initial Adam learning rate.
    lr_factor, lr_patience : float, int
        ReduceLROnPlateau: multiply the rate by ``lr_factor`` after ``lr_patience``
        epochs without a better validation loss.
    patience : int
        Early stopping: stop after this many epochs without a better validation loss.
    min_improvement : float
        Relative decrease of the validation loss that counts as better.
    seed : int
        Seed of the batch order.
    device : str
    time_limit : float or None
        Seconds of training after which no new batch starts (None: no limit); the epoch
        in progress is then validated and logged, and training ends. With selection
        (``select_every``) the limit is brought forward by the longest selection run so
        far, so that the last epoch's selection run also ends within it, and training ends
        after a scheduled selection run that ends within that margin.
    deadline : float or None
        The same as a ``time.monotonic()`` reading (None: none): a command's wall limit,
        which also counts what came before training (data, priors, labels).
    select_every : int
        With a ``selector`` given to :func:`train_force_matching`: score the weights every
        this many epochs and at the last one, and keep those with the lowest score instead
        of those with the lowest validation loss (0: off).
    energy_weight : float
        Weight ``w`` of the energy term of the loss (module docstring), (Å)²/bead; used
        when target energies are given (0: forces alone).
    ensemble_weight : float
        Weight ``w_S`` of the relative-entropy term, (kcal/mol/Å)² per nat; used when
        ensemble sets are given to :func:`train_force_matching` (0: off).
    min_sample_fraction : float
        With the relative-entropy term: the weights must keep the reweighting's effective
        sample fraction on the validation frames at or above this (below it, the sampler's
        frames no longer represent the model). It is checked every ``ensemble_check_every``
        optimiser steps; the first check below it ends training with the weights of the
        last check that passed (or those training started from).
    ensemble_check_every : int
        Optimiser steps between those checks.
    reweighting_backoffs : int
        With the relative-entropy term: how many checks below ``min_sample_fraction`` may,
        instead of ending training, restore the weights of the last check that passed and
        halve the learning rate (0: the first such check ends training). A rate that
        leaves the sampler's frames behind within one check interval would otherwise end
        training with the weights it started from; smaller steps get as far from the
        sampler as its frames allow.
    tf32 : bool
        Run the optimiser steps' float32 matrix products as TF32 on tensor cores
        (``torch.set_float32_matmul_precision("high")``, CUDA only). Validation, selection
        and the ensemble checks stay full FP32, so the logged errors are FP32 ones; the
        result reports how far TF32 forces are from FP32 forces (``FitResult.tf32_force_error``).
    grad_clip : float
        Largest L2 norm of the weights' gradient in an optimiser step (a larger one is scaled
        down to it; 0: no limit). Adam rescales steady gradients anyway; the limit keeps a
        rare batch whose gradient is many times the usual from moving the weights (at
        batch 64, 1YRF's validation force RMSE once jumped from 0.79 to 1.93 in one epoch;
        whether a gradient spike did that is not measured yet). The log's ``grad_norm``
        (the epoch's median, lower of the middle two, before clipping) says where the usual
        lies.
    weight_average : float
        Decay of an exponential moving average of the weights
        (:class:`WeightAverage`; 0: off). Validation,
        selection and the kept weights are the average's; the optimiser steps the raw ones.
        Not with sampler frames (``ensemble``), whose check restores raw weights.
    """

    epochs: int = 100
    batch_size: int = 32
    learning_rate: float = 1e-3
    lr_factor: float = 0.5
    lr_patience: int = 3
    patience: int = 10
    min_improvement: float = 1e-3
    seed: int = 0
    device: str = "cpu"
    time_limit: float | None = None
    deadline: float | None = None
    select_every: int = 0
    energy_weight: float = 0.0
    ensemble_weight: float = 0.0
    min_sample_fraction: float = 0.5
    ensemble_check_every: int = 50
    reweighting_backoffs: int = 0
    tf32: bool = False
    grad_clip: float = 0.0
    weight_average: float = 0.0

    def __post_init__(self):
        for name in ("energy_weight", "ensemble_weight", "grad_clip"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        if not 0.0 <= self.weight_average < 1.0:
            raise ValueError(f"weight_average must lie in [0, 1), got {self.weight_average}")
        if self.ensemble_check_every < 1:
            raise ValueError(
                f"ensemble_check_every must be >= 1, got {self.ensemble_check_every}"
            )
        if self.reweighting_backoffs < 0:
            raise ValueError(
                f"reweighting_backoffs must be >= 0, got {self.reweighting_backoffs}"
            )
        if not 0.0 <= self.min_sample_fraction < 1.0:
            raise ValueError(
                f"min_sample_fraction must lie in [0, 1), got {self.min_sample_fraction}"
            )


@dataclass
class FitResult:
    """Outcome of :func:`train_force_matching`.

    Attributes
    ----------
    history : list of dict
        One row per epoch with the keys ``LOG_COLUMNS``.
    best_epoch : int
        Epoch whose weights were kept (1-based).
    stopped_early : bool
        Stopped by early stopping (patience).
    stopped_by_time : bool
        Stopped by ``FitSettings.time_limit``.
    stopped_by_reweighting : bool
        Stopped because the relative-entropy term's effective sample fraction fell below
        ``FitSettings.min_sample_fraction`` (the last epoch's weights are then those of the
        last check that passed).
    reweighting_backoffs : int
        Checks below ``FitSettings.min_sample_fraction`` that restored the last passing
        weights and halved the learning rate (``FitSettings.reweighting_backoffs``).
    reweighting_kept_step : int or None
        With sampler frames: the optimiser step whose weights passed the last check, those
        training ends with if stopped by reweighting (0: the weights it started from; None
        without sampler frames).
    selection : list of dict
        ``{"epoch", "score"}`` of every scored epoch (empty without a selector); the kept
        epoch is then the lowest-scoring one.
    tf32_force_error : float or None
        With ``FitSettings.tf32``: relative RMS difference of the starting model's forces on
        the first validation batch computed with TF32 products against FP32 (None without).
    clipped_steps : int
        Optimiser steps whose gradient ``FitSettings.grad_clip`` scaled down.
    """

    history: list[dict] = field(default_factory=list)
    best_epoch: int = 0
    stopped_early: bool = False
    stopped_by_time: bool = False
    stopped_by_reweighting: bool = False
    reweighting_backoffs: int = 0
    reweighting_kept_step: int | None = None
    selection: list[dict] = field(default_factory=list)
    tf32_force_error: float | None = None
    clipped_steps: int = 0

    @property
    def best_val_force_rmse(self) -> float:
        """Validation force RMSE of the kept weights, kcal/mol/Å."""
        return self.history[self.best_epoch - 1]["val_force_rmse"]


def model_energy_and_forces(
    potential: Potential, pos: torch.Tensor, create_graph: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Energies and forces ``−∂E/∂x`` of ``potential`` on the reference path, exact graph
    per call.

    Parameters
    ----------
    potential : Potential
    pos : torch.Tensor, shape (B, n, 3), float32
    create_graph : bool
        Keep the graph of the derivative (for a loss on the forces).

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        Energies (B,) in kcal/mol and forces (B, n, 3) in kcal/mol/Å, float32.
    """
    graph = None
    if potential.network is not None:
        graph = NeighborList(pos.shape[1], potential.cutoff, skin=0.0).update(pos)
    with torch.enable_grad():
        pos = pos.detach().requires_grad_(True)
        energy = potential.energy(pos, graph)
        (grad,) = torch.autograd.grad(energy.sum(), pos, create_graph=create_graph)
    return energy, -grad


def model_forces(
    potential: Potential, pos: torch.Tensor, create_graph: bool = False
) -> torch.Tensor:
    """The forces of :func:`model_energy_and_forces`, shape (B, n, 3), float32."""
    return model_energy_and_forces(potential, pos, create_graph)[1]


#: Beads per batch of :func:`potential_labels` (frames × beads): a CGSchNet batch of 1,024
#: frames of a 173-bead protein needs more than 74 GB for its derivative.
LABEL_BEADS_PER_BATCH = 32_768


def potential_labels(
    potential: Potential,
    positions: torch.Tensor,
    batch_size: int | None = None,
    device: str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Energies and forces of ``potential`` on every frame, in batches.

    Parameters
    ----------
    potential : Potential
        Moved to ``device``.
    positions : torch.Tensor, shape (M, n, 3), float32
    batch_size : int, optional
        Frames per batch; default ``LABEL_BEADS_PER_BATCH // n`` (at least 1).
    device : str

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        Energies (M,) and forces (M, n, 3), float32, on the CPU.
    """
    potential = potential.to(device)
    if batch_size is None:
        batch_size = max(1, LABEL_BEADS_PER_BATCH // max(1, positions.shape[1]))
    energies, forces = [], []
    for s in range(0, positions.shape[0], batch_size):
        energy, force = model_energy_and_forces(potential, positions[s : s + batch_size].to(device))
        energies.append(energy.detach().cpu())
        forces.append(force.detach().cpu())
    return torch.cat(energies), torch.cat(forces)


def prior_labels(
    bead_types: torch.Tensor,
    priors: dict[str, PriorTerm],
    positions: torch.Tensor,
    batch_size: int | None = None,
    device: str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Energies (M,) and forces (M, n, 3) of the priors alone on every frame (float32, CPU);
    ``bead_types`` (n,) int64, ``positions`` (M, n, 3) float32."""
    return potential_labels(Potential(bead_types, None, priors), positions, batch_size, device)


def _out_of_time(settings: FitSettings, began: float, reserve: float = 0.0) -> bool:
    """Whether training that began at ``began`` (``time.perf_counter()``) is within
    ``reserve`` seconds of its time limit or its deadline, or past them (``reserve``: what
    must still fit after the last batch, such as a selection run)."""
    return (settings.time_limit is not None
            and time.perf_counter() - began > settings.time_limit - reserve) or (
            settings.deadline is not None and time.monotonic() > settings.deadline - reserve)


def _batch_errors(
    potential: Potential,
    pos: torch.Tensor,
    target_forces: torch.Tensor,
    target_energies: torch.Tensor | None,
    create_graph: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Mean squared force error of one batch and its energy errors ΔE (B,), uncentred
    (None without target energies)."""
    energy, forces = model_energy_and_forces(potential, pos, create_graph)
    force_mse = (forces - target_forces).square().mean()
    if target_energies is None:
        return force_mse, None
    return force_mse, energy - target_energies


def _loss(
    force_mse: torch.Tensor, energy_error: torch.Tensor | None, weight: float, n_beads: int
) -> torch.Tensor:
    """The loss of the module docstring from a batch's errors."""
    if energy_error is None or weight <= 0:
        return force_mse
    return force_mse + weight * (energy_error - energy_error.mean()).square().mean() / n_beads


def _validation(
    potential: Potential, data: tuple[torch.Tensor, ...], settings: FitSettings
) -> tuple[float, float, float | None]:
    """(loss, force RMSE, energy RMSE) over all validation frames without weight gradients;
    the energy errors are centred over the whole set (energy RMSE None without them)."""
    positions, forces = data[0], data[1]
    energies = data[2] if len(data) > 2 else None
    squared, errors = 0.0, []
    for start in range(0, positions.shape[0], settings.batch_size):
        part = slice(start, start + settings.batch_size)
        force_mse, error = _batch_errors(
            potential,
            positions[part].to(settings.device),
            forces[part].to(settings.device),
            None if energies is None else energies[part].to(settings.device),
            create_graph=False,
        )
        squared += float(force_mse.detach()) * forces[part].numel()
        if error is not None:
            errors.append(error.detach())
    force_mse = squared / forces.numel()
    if energies is None:
        return force_mse, math.sqrt(force_mse), None
    error = torch.cat(errors)
    loss = _loss(torch.tensor(force_mse), error, settings.energy_weight, positions.shape[1])
    return float(loss), math.sqrt(force_mse), float((error - error.mean()).square().mean().sqrt())


def train_force_matching(
    network: nn.Module,
    bead_types: torch.Tensor,
    train: tuple[torch.Tensor, torch.Tensor],
    validation: tuple[torch.Tensor, torch.Tensor],
    settings: FitSettings,
    log_path: str | os.PathLike | None = None,
    progress: bool = True,
    selector: Callable[[], float] | None = None,
    ensemble: tuple[list[EnsembleSet], list[EnsembleSet]] | None = None,
    online: OnlineEnsemble | None = None,
) -> FitResult:
    """Fit ``network`` (in place) so that its forces match the targets.

    Adam with ReduceLROnPlateau on the validation loss and early stopping; the weights
    of the best validation epoch are restored at the end, or, with a ``selector`` and
    ``settings.select_every``, those of the lowest-scoring scored epoch.

    Parameters
    ----------
    network : nn.Module
        Trained in place: a network of any registered architecture
        (:data:`workbench.model.architectures.ARCHITECTURES`).
    bead_types : torch.Tensor, shape (n,), int64
    train, validation : tuple of torch.Tensor
        Positions (M, n, 3) and target forces (M, n, 3), float32 (teacher minus priors),
        and optionally target energies (M,), float32 (teacher minus priors, kcal/mol): the
        energy term of the loss (``settings.energy_weight``) and the ``val_energy_rmse``
        column need them.
    settings : FitSettings
    log_path : str or os.PathLike, optional
        CSV file with one row per epoch (columns ``LOG_COLUMNS``), flushed every epoch.
    progress : bool
        Show a tqdm bar over epochs.
    selector : callable, optional
        ``selector() -> float``: a score of ``network``'s current weights, lower is better
        (say, how far the model's folded fraction in a short MD run is from the teacher's).
    ensemble : tuple of two lists of EnsembleSet, optional
        Training and validation frames of the relative-entropy term (one set per
        temperature), used with ``settings.ensemble_weight > 0``: every optimiser step
        adds the term over ``batch_size`` random frames of each kind of one temperature
        (the temperatures in turn); the validation loss adds it over all validation
        frames, and the log gets its ``ΔS`` and effective sample fraction. Every
        ``settings.ensemble_check_every`` steps the fraction is checked
        (``settings.min_sample_fraction``).
    online : OnlineEnsemble, optional
        Instead of ``ensemble``: the term's frames come from walkers of the model being
        trained, run every ``online.settings.refresh_every`` optimiser steps with the
        weights of that moment (then the first step's frames as well). The log's
        ``ensemble_sample_fraction`` is the smallest of the epoch's refreshes (the last
        frames reweighted to the weights reached when the next run starts), and
        ``walker_q_mean`` and ``walker_folded`` describe the walkers after the epoch's last
        run. The validation loss stays the force and energy loss, and the weights kept are
        the last epoch's: the term moves the weights where those losses do not reward it.

    Returns
    -------
    FitResult
    """
    potential = Potential(bead_types, network).to(settings.device)
    optimizer = torch.optim.Adam(network.parameters(), lr=settings.learning_rate)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, factor=settings.lr_factor, patience=settings.lr_patience
    )
    generator = torch.Generator().manual_seed(settings.seed)
    positions, targets = train[0], train[1]
    energies = train[2] if len(train) > 2 else None
    result = FitResult()
    if settings.ensemble_weight <= 0:
        ensemble, online = None, None
    if ensemble is not None and online is not None:
        raise ValueError("give the relative-entropy term sampler frames or walkers, not both")
    if ensemble is not None and settings.weight_average > 0:
        raise ValueError("weight averaging goes with walkers or no ensemble term: the sampler "
                         "frames' reweighting check restores raw weights")
    average = WeightAverage(network, settings.weight_average) if settings.weight_average else None
    max_norm = settings.grad_clip or math.inf
    online_set: EnsembleSet | None = None
    step = 0
    within = None  # the weights of the last reweighting check that passed, and its step
    if ensemble is not None:
        within, result.reweighting_kept_step = _state_copy(network), 0
    best_loss, best_state = math.inf, None
    selecting = selector is not None and settings.select_every > 0
    best_score, selected_state = math.inf, None
    reserve = 0.0  # seconds of the longest selection run so far
    log = open(log_path, "w", newline="") if log_path is not None else None  # noqa: SIM115
    writer = csv.DictWriter(log, LOG_COLUMNS) if log is not None else None
    if writer is not None:
        writer.writeheader()
    steps_precision = "high" if settings.tf32 else "highest"
    if settings.tf32:
        result.tf32_force_error = _tf32_force_error(potential, validation, settings)
    bar = tqdm(range(1, settings.epochs + 1), disable=not progress, desc="train", unit="epoch")
    began = time.perf_counter()
    try:
        for epoch in bar:
            start = time.perf_counter()
            network.train()
            total, seen = 0.0, 0
            fractions: list[float] = []
            norms: list[torch.Tensor] = []  # gradient norms before clipping (no sync)
            for batch in torch.randperm(positions.shape[0], generator=generator).split(
                settings.batch_size
            ):
                pos = positions[batch].to(settings.device)
                target = targets[batch].to(settings.device)
                if online is not None and step % online.settings.refresh_every == 0:
                    if online_set is not None:
                        fractions.append(smallest_sample_fraction(
                            potential, [online_set], settings.batch_size, settings.device
                        ))
                    online_set = online.refresh(network)
                sets = ensemble[0] if ensemble is not None else (
                    [online_set] if online_set is not None else None)
                with float32_matmul_precision(steps_precision):
                    force_mse, energy_error = _batch_errors(
                        potential, pos, target,
                        None if energies is None else energies[batch].to(settings.device),
                        create_graph=True,
                    )
                    loss = _loss(force_mse, energy_error, settings.energy_weight, pos.shape[1])
                    if sets is not None:
                        frames = _ensemble_batch(sets[step % len(sets)], settings.batch_size,
                                                 generator)
                        change = relative_entropy_change(
                            potential, frames, settings.device,
                            reweight=online is None or not online.settings.contrastive,
                        )[0]
                        loss = loss + settings.ensemble_weight * change
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    norms.append(torch.nn.utils.clip_grad_norm_(network.parameters(), max_norm))
                    optimizer.step()
                    if average is not None:
                        average.update(network)
                step += 1
                total += float(loss.detach()) * target.numel()
                seen += target.numel()
                if ensemble is not None and step % settings.ensemble_check_every == 0:
                    if smallest_sample_fraction(
                        potential, ensemble[1], settings.batch_size, settings.device
                    ) >= settings.min_sample_fraction:
                        within, result.reweighting_kept_step = _state_copy(network), step
                    else:
                        network.load_state_dict(within)
                        if result.reweighting_backoffs == settings.reweighting_backoffs:
                            result.stopped_by_reweighting = True
                            break
                        result.reweighting_backoffs += 1
                        for group in optimizer.param_groups:
                            group["lr"] *= 0.5
                if _out_of_time(settings, began, reserve):
                    result.stopped_by_time = True  # this epoch ends early, and training too
                    break
            norm = torch.stack(norms).detach().cpu() if norms else None
            if norm is not None:
                result.clipped_steps += int((norm > max_norm).sum())
            # validation, selection and the kept weights see the average (if any)
            with average.applied(network) if average is not None else nullcontext():
                network.eval()
                val_loss, val_force_rmse, val_energy_rmse = _validation(
                    potential, validation, settings
                )
                change, fraction = None, None
                if ensemble is not None:
                    change, fraction = validation_relative_entropy(
                        potential, ensemble[1], settings.batch_size, settings.device
                    )
                    val_loss += settings.ensemble_weight * change
                walker = online.history[-1] if online is not None and online.history else None
                if online is not None and fractions:
                    fraction = min(fractions)
                row = {
                    "epoch": epoch,
                    "train_loss": total / seen,
                    "val_loss": val_loss,
                    "val_force_rmse": val_force_rmse,
                    "val_energy_rmse": val_energy_rmse,
                    "learning_rate": optimizer.param_groups[0]["lr"],
                    "seconds": time.perf_counter() - start,
                    "val_relative_entropy": change,
                    "ensemble_sample_fraction": fraction,
                    "walker_q_mean": None if walker is None else walker.q_mean,
                    "walker_folded": None if walker is None else walker.folded,
                    "grad_norm": None if norm is None else float(norm.median()),
                }
                result.history.append(row)
                if writer is not None:
                    writer.writerow(row)
                    log.flush()
                bar.set_postfix_str(f"train {row['train_loss']:.4g} | val {val_loss:.4g}")
                scheduler.step(val_loss)
                if not math.isfinite(best_loss) or (
                    val_loss < best_loss - settings.min_improvement * abs(best_loss)
                ):
                    best_loss, result.best_epoch = val_loss, epoch
                    best_state = _state_copy(network)
                elif epoch - result.best_epoch >= settings.patience:
                    result.stopped_early = True
                last = (result.stopped_early or result.stopped_by_time
                        or result.stopped_by_reweighting or epoch == settings.epochs)
                if selecting and (last or epoch % settings.select_every == 0):
                    scoring = time.perf_counter()
                    score = float(selector())
                    reserve = max(reserve, time.perf_counter() - scoring)
                    result.selection.append({"epoch": epoch, "score": score})
                    if score < best_score:
                        best_score, selected_state = score, (epoch, _state_copy(network))
                    if not last and _out_of_time(settings, began, reserve):
                        # another epoch would end with a selection run past the limit
                        result.stopped_by_time = last = True
                if last:
                    break
    finally:
        bar.close()
        if log is not None:
            log.close()
    if selected_state is not None:
        result.best_epoch, best_state = selected_state
    elif online is not None and result.history:
        result.best_epoch = len(result.history)
        best_state = None if average is None else average.shadow
    if best_state is not None:
        network.load_state_dict(best_state)
    return result


@contextmanager
def float32_matmul_precision(precision: str) -> Iterator[None]:
    """Set ``torch.set_float32_matmul_precision`` inside the block and restore the
    previous setting after it, exceptions included."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _tf32_force_error(
    potential: Potential, validation: tuple[torch.Tensor, ...], settings: FitSettings
) -> float:
    """Relative RMS difference of forces with TF32 products from FP32 ones, on the first
    validation batch."""
    pos = validation[0][: settings.batch_size].to(settings.device)
    forces = {}
    for precision in ("highest", "high"):
        with float32_matmul_precision(precision):
            forces[precision] = model_forces(potential, pos).double()
    reference = forces["highest"]
    scale = float(reference.square().mean().sqrt())
    return float((forces["high"] - reference).square().mean().sqrt()) / max(scale, 1e-30)


def _ensemble_batch(
    frames: EnsembleSet, size: int, generator: torch.Generator
) -> EnsembleSet:
    """``size`` random frames of each kind of ``frames`` (with replacement)."""
    teacher = torch.randint(frames.teacher.shape[0], (size,), generator=generator)
    model = torch.randint(frames.model.shape[0], (size,), generator=generator)
    return frames.subset(teacher, model)


def _state_copy(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


class WeightAverage:
    """``shadow ← decay · shadow + (1 − decay) · weights`` after every optimiser step.

    Parameters
    ----------
    module : torch.nn.Module
        The network; its state at construction starts the average.
    decay : float
        In [0, 1): 0 keeps the latest weights, 0.999 averages over about 1,000 steps.

    Attributes
    ----------
    shadow : dict of str to torch.Tensor
        The averaged state (floating-point entries averaged, the others copied).
    """

    def __init__(self, module: torch.nn.Module, decay: float):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"weight-average decay must lie in [0, 1), got {decay}")
        self.decay = decay
        self.shadow = {k: v.detach().clone() for k, v in module.state_dict().items()}

    def update(self, module: torch.nn.Module) -> None:
        """Fold ``module``'s current state into the average (after an optimiser step)."""
        with torch.no_grad():
            for name, value in module.state_dict().items():
                average = self.shadow[name]
                if average.is_floating_point():
                    average.lerp_(value, 1.0 - self.decay)
                else:
                    average.copy_(value)

    @contextmanager
    def applied(self, module: torch.nn.Module) -> Iterator[None]:
        """Inside the block ``module`` holds the averaged weights; its own come back after
        it (exceptions included)."""
        raw = {k: v.detach().clone() for k, v in module.state_dict().items()}
        module.load_state_dict(self.shadow)
        try:
            yield
        finally:
            module.load_state_dict(raw)
