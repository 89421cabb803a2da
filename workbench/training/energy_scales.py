"""Energy scales of a model's terms fitted to the teacher's ensemble (relative entropy).

Force matching fits forces frame by frame. Whether a protein near its melting point sits
tight in its native basin or frays depends on free-energy differences, sums over many
frames, where a small bias in the fitted energy decides (one epoch moved a 1YRF model from
folded fraction 0.9 to 0.05; docs/decisions/0009-force-error-does-not-select-models.md).
This module fits a few numbers instead of all weights: each chosen term ``k`` of the
potential (the network, by its architecture's name, ``"schnet"``, ``"painn"``,
``"egnn"``, ``"nequip"``, ``"dp"``, or a prior by name) gets its energy multiplied by
``s_k = exp(λ_k)``. The relative entropy ``S(λ) = D_KL(teacher ‖ model)`` then has
gradient and Hessian

    ∂S/∂λ_k      = β (⟨U_k⟩_teacher − ⟨U_k⟩_model)
    ∂²S/∂λ_k∂λ_l = β² Cov_model(U_k, U_l) + δ_kl ∂S/∂λ_k

with ``U_k`` the term's energy at the current scales and ``β = 1/(k_B T)``. ``S`` is convex
in ``λ`` (the energy is linear in the ``s_k``, and a log-partition function is convex in
linear parameters), so the one stationary point is the minimum: there the model's mean of
every chosen term equals the teacher's. Each iteration samples the model by Langevin MD
(:func:`sample_frames`), evaluates the terms on its frames and on the teacher's, and takes
a Newton step with the covariance part of the Hessian, capped in length (the covariance
is measured in one state and a step can cross into another).

Only terms whose energy is linear in some of their parameters can be scaled: the network
(its last output layer, `workbench.model.architectures.output_parameters`) and the
priors that name ``energy_parameters``; a repulsion ``(σ/r)⁶`` cannot.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from workbench.model.architectures import output_parameters
from workbench.model.potential import Potential
from workbench.neighbors import NeighborList
from workbench.system import CGSystem
from workbench.teacher import langevin_simulation, state_thresholds
from workbench.training.force_matching import LABEL_BEADS_PER_BATCH
from workbench.training.validate import (
    flipped_dihedral_fraction,
    folded_fraction,
    histogram_intersection,
)
from workbench.units import KB


def scalable_terms(potential: Potential) -> list[str]:
    """Names of the terms whose energy :func:`scale_terms` can multiply, in order."""
    network = potential.network
    names = [] if network is None else [potential.architecture]
    names += [name for name, prior in potential.priors.items() if prior.energy_parameters]
    return names


def scale_terms(potential: Potential, scales: dict[str, float]) -> Potential:
    """A copy of ``potential`` with the energy of each named term multiplied.

    Parameters
    ----------
    potential : Potential
        Left unchanged.
    scales : dict of str to float
        Positive factor per term name (:func:`scalable_terms`).

    Returns
    -------
    Potential
        The network's last output layer (weight and bias) or the prior's ``energy_parameters``
        multiplied: the term's energy and forces are multiplied, nothing else changes.
    """
    allowed = scalable_terms(potential)
    for name, factor in scales.items():
        if name not in allowed:
            raise ValueError(
                f"term {name!r} cannot be scaled; this potential's scalable terms: "
                f"{', '.join(allowed) or 'none'}"
            )
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"the scale of {name!r} must be positive and finite, got {factor}")
    scaled = copy.deepcopy(potential)
    with torch.no_grad():
        for name, factor in scales.items():
            if name == scaled.architecture:
                tensors = output_parameters(scaled.network)
            else:
                prior = scaled.priors[name]
                tensors = [getattr(prior, p) for p in prior.energy_parameters]
            for tensor in tensors:
                tensor.mul_(factor)
    return scaled


def term_energies(
    potential: Potential, positions: torch.Tensor, names: Sequence[str],
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Energies of the named terms on every frame (reference path, in batches).

    Parameters
    ----------
    potential : Potential
    positions : torch.Tensor, shape (M, n, 3), float32
        Frames, Å.
    names : sequence of str
        Keys of :meth:`Potential.energy_terms`.
    device : str or torch.device

    Returns
    -------
    torch.Tensor, shape (M, len(names)), float64, on the CPU
        kcal/mol.
    """
    potential = potential.to(device)
    batch = max(1, LABEL_BEADS_PER_BATCH // max(1, positions.shape[1]))
    rows = []
    for start in range(0, positions.shape[0], batch):
        pos = positions[start : start + batch].to(device)
        graph = None
        if potential.network is not None:
            graph = NeighborList(pos.shape[1], potential.cutoff, skin=0.0).update(pos)
        with torch.no_grad():
            terms = potential.energy_terms(pos, graph)
        rows.append(torch.stack([terms[name] for name in names], dim=-1).double().cpu())
    return torch.cat(rows)


@dataclass
class Sample:
    """Frames of a Langevin run (the live replicas', after the discarded start).

    Attributes
    ----------
    positions : torch.Tensor, shape (F, n, 3), float32
        Å, on the CPU.
    q : torch.Tensor, shape (F,), float32
        Fraction of native contacts of each frame.
    ends : torch.Tensor, shape (R, n, 3), float32
        Every replica's last structure (a frozen one's where it stopped).
    live : torch.Tensor, shape (R,), bool
        Replicas not stopped by the safety checks (only their frames are kept).
    """

    positions: torch.Tensor
    q: torch.Tensor
    ends: torch.Tensor
    live: torch.Tensor

    @property
    def frozen(self) -> int:
        """Replicas stopped by the safety checks."""
        return int((~self.live).sum())


def sample_frames(
    system: CGSystem, potential: Potential, starts: torch.Tensor, temperature: float,
    steps: int, discard: int, every: int, device: str | torch.device = "cpu", seed: int = 0,
    timestep_fs: float = 4.0,
) -> Sample:
    """Langevin MD of one replica per start; frames every ``every`` steps after ``discard``.

    Parameters
    ----------
    system : CGSystem
    potential : Potential
    starts : torch.Tensor, shape (R, n, 3), float32
        Starting structures, Å.
    temperature : float
        K.
    steps, discard, every : int
        Steps in all, steps left out at the start, steps between frames.
    device, seed, timestep_fs
        Run settings (fastest force path of the device, friction 1/ps).

    Returns
    -------
    Sample
    """
    if not 0 <= discard < steps or every < 1:
        raise ValueError(
            f"need 0 <= discard < steps and every >= 1, got steps={steps}, discard={discard}, "
            f"every={every}"
        )
    sim = langevin_simulation(system, potential, temperature, starts, device, seed,
                              timestep_fs=timestep_fs)
    sim.step(discard)
    frames, qs = [], []
    while sim.step_count + every <= steps:
        sim.step(every)
        frames.append(sim.positions.detach().cpu())
        qs.append(sim.native_q().float().cpu())
    live = ~sim.frozen.cpu()
    if not frames or not bool(live.any()):
        raise ValueError("no frames: every replica was stopped, or the run is shorter than "
                         "one frame after the discarded start")
    positions = torch.stack(frames, 1)[live]
    return Sample(positions.reshape(-1, *starts.shape[1:]), torch.stack(qs, 1)[live].reshape(-1),
                  frames[-1], live)


def newton_step(
    teacher_terms: torch.Tensor, model_terms: torch.Tensor, temperature: float,
    max_step: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The capped Newton step in ``λ = log s`` and the gradient it starts from.

    Parameters
    ----------
    teacher_terms : torch.Tensor, shape (A, K), float64
        The model's chosen terms on teacher frames, kcal/mol.
    model_terms : torch.Tensor, shape (B, K), float64
        The same terms on the model's own frames.
    temperature : float
        K.
    max_step : float
        Largest length of the step (Euclidean, in ``λ``).

    Returns
    -------
    (torch.Tensor, torch.Tensor), each shape (K,), float64
        The step ``Δλ = −H⁻¹ g`` (shortened to ``max_step``) and the gradient ``g``
        (``∂S/∂λ``, dimensionless).
    """
    beta = 1.0 / (KB * temperature)
    gradient = beta * (teacher_terms.mean(0) - model_terms.mean(0))
    centred = model_terms - model_terms.mean(0)
    covariance = centred.T @ centred / max(1, model_terms.shape[0] - 1)
    hessian = beta**2 * covariance
    # a small ridge keeps a term that barely fluctuates from taking an unbounded step
    ridge = 1e-6 * float(hessian.diagonal().max().clamp_min(1e-12))
    step = -torch.linalg.solve(hessian + ridge * torch.eye(len(gradient), dtype=hessian.dtype),
                               gradient)
    length = float(step.norm())
    if length > max_step:
        step = step * (max_step / length)
    return step, gradient


@dataclass
class ScaleFit:
    """What :func:`fit_energy_scales` returns.

    Attributes
    ----------
    potential : Potential
        The input potential with the last sampled scales applied.
    scales : dict of str to float
        Those scales.
    history : list of dict
        One row per iteration: ``scales``, ``gradient`` (``∂S/∂λ`` per term),
        ``teacher_means`` and ``model_means`` (kcal/mol), the model sample's ``q_mean``,
        ``folded_fraction``, ``q_intersection`` (its Q histogram's overlap with the
        teacher's), ``flipped_dihedrals`` (share more than 90° from native at its live
        replicas' last frames), ``frames`` and ``frozen``.
    teacher_q_mean, teacher_folded_fraction, teacher_flipped_dihedrals : float
        The same numbers for the teacher's frames.
    interrupted : bool
        Whether an interrupt (Ctrl-C, ``timeout -s INT``) ended the fit early; the
        scales are then those of the last finished iteration.
    """

    potential: Potential
    scales: dict[str, float]
    history: list[dict] = field(default_factory=list)
    teacher_q_mean: float = float("nan")
    teacher_folded_fraction: float = float("nan")
    teacher_flipped_dihedrals: float = float("nan")
    interrupted: bool = False


def fit_energy_scales(
    system: CGSystem,
    potential: Potential,
    teacher: Sample,
    starts: torch.Tensor,
    names: Sequence[str],
    temperature: float,
    iterations: int,
    steps: int,
    discard: int,
    every: int,
    max_step: float = 0.1,
    device: str | torch.device = "cpu",
    seed: int = 0,
    timestep_fs: float = 4.0,
    progress: Callable[[dict], None] | None = None,
    persistent: bool = True,
) -> ScaleFit:
    """Scales of the ``names`` terms that bring the model's ensemble to the teacher's.

    Parameters
    ----------
    system : CGSystem
    potential : Potential
        The trained model; not changed.
    teacher : Sample
        Equilibrium frames of the teacher at ``temperature`` (:func:`sample_frames`).
    starts : torch.Tensor, shape (R, n, 3), float32
        Where the first model run starts: the ends of a long run of the model (its own
        ensemble) or of the teacher.
    names : sequence of str
        Terms to scale (:func:`scalable_terms`).
    temperature : float
        K.
    iterations : int
        Model samples; a Newton step follows each but the last, so the scales returned are
        the last ones sampled.
    steps, discard, every : int
        Each model run's length, its discarded start and the steps between frames.
    max_step : float
        Cap of each step's length in ``λ`` (0.1: no scale moves by more than ~10 %).
    device, seed, timestep_fs
        Run settings; iteration ``i`` runs with seed ``seed + i``.
    progress : callable, optional
        Called with each history row as it is made.
    persistent : bool
        Each model run starts where the one before ended (a frozen replica where it
        started), so the chains add up to a long run that follows the scales; otherwise
        every run starts from ``starts``. A slow protein needs it: 1YRF's teacher takes
        ~400 ps to leave the native state's neighbourhood, far longer than one sample.

    Returns
    -------
    ScaleFit
        An interrupt during an iteration after the first ends the fit with the last
        finished one (``interrupted``); during the first it propagates.
    """
    names = list(names)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"name each term to scale once, got {names}")
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    folded_q = state_thresholds(system.name)[0]
    log_scales = torch.zeros(len(names), dtype=torch.float64)
    fit = ScaleFit(potential, dict.fromkeys(names, 1.0),
                   teacher_q_mean=float(teacher.q.mean()),
                   teacher_folded_fraction=folded_fraction(teacher.q, folded_q),
                   teacher_flipped_dihedrals=flipped_dihedral_fraction(
                       system, teacher.ends[teacher.live]))
    for iteration in range(iterations):
        scales = dict(zip(names, log_scales.exp().tolist(), strict=True))
        model = scale_terms(potential, scales)
        try:
            sample = sample_frames(system, model, starts, temperature, steps, discard, every,
                                   device, seed + iteration, timestep_fs)
            teacher_terms = term_energies(model, teacher.positions, names, device)
            model_terms = term_energies(model, sample.positions, names, device)
        except KeyboardInterrupt:
            if not fit.history:
                raise
            fit.interrupted = True
            break
        step, gradient = newton_step(teacher_terms, model_terms, temperature, max_step)
        row = {
            "iteration": iteration,
            "scales": scales,
            "gradient": dict(zip(names, gradient.tolist(), strict=True)),
            "teacher_means": dict(zip(names, teacher_terms.mean(0).tolist(), strict=True)),
            "model_means": dict(zip(names, model_terms.mean(0).tolist(), strict=True)),
            "q_mean": float(sample.q.mean()),
            "folded_fraction": folded_fraction(sample.q, folded_q),
            "q_intersection": histogram_intersection(teacher.q, sample.q),
            "flipped_dihedrals": flipped_dihedral_fraction(
                system, sample.ends[sample.live]),
            "frames": int(sample.positions.shape[0]),
            "frozen": sample.frozen,
        }
        fit.history.append(row)
        fit.potential, fit.scales = model, scales
        if progress is not None:
            progress(row)
        log_scales = log_scales + step
        if persistent:
            starts = torch.where(sample.live[:, None, None], sample.ends, starts)
    return fit
