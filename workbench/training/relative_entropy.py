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
below a threshold (the next round samples the new model). Only the network's part of ``U``
depends on ``θ``: the priors are fixed, and enter through ``offset = U_prior − U_θ0``.

*Online walkers* (:class:`OnlineEnsemble`): the term with frames of the model being
trained. With a sampler, the term reweights frames that a fixed model made. For a protein
of 35 residues and more the reweighting degenerates within a few optimiser steps (its
effective sample fraction collapses), so the term can barely move the weights. Here the
model's frames are made during training instead: every ``refresh_every`` optimiser steps,
``walkers`` replicas run ``steps`` Langevin steps at one temperature with a copy of the
current weights (the sampler ``θ0`` above), and the term's frames are theirs. Right after
each run the reweighting is exact (every frame's weight is one) and the term's gradient is
``β (⟨∂U/∂θ⟩_teacher − ⟨∂U/∂θ⟩_θ)``; between runs the weights drift as before (for 1YRF
the effective sample fraction fell to about 10⁻³ within 25 optimiser steps,
docs/decisions/0010-relative-entropy-for-fast-folders.md), so runs must come often.

The walkers persist from one refresh to the next (persistent contrastive divergence):
they follow the model's ensemble as training changes it, and reach over many refreshes
states that a model falls into only after tens of picoseconds. They start from teacher
frames at the term's temperature, or a share of them from given structures (where a run
of the model started from native went: a state teacher frames do not reach within the
training's walker time); a walker that the safety checks freeze restarts from another
teacher frame. Each refresh draws fresh velocities and noise.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from workbench.model.potential import Potential
from workbench.model.priors import PriorTerm
from workbench.neighbors import NeighborList
from workbench.system.cg_system import CGSystem
from workbench.teacher import langevin_simulation, state_thresholds
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
    """Energies ``(B,)`` (kcal/mol, float32) of ``potential`` (its network of any
    architecture, and priors if any) at ``pos`` (B, n, 3) on the reference path,
    differentiable with respect to its weights."""
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
        The network being trained (no priors: they are in the offsets).
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


@dataclass
class OnlineSettings:
    """How the walkers of :class:`OnlineEnsemble` run.

    Attributes
    ----------
    walkers : int
        Replicas of the model.
    temperature : float
        Kelvin; the teacher frames compared with them are those at this temperature.
    refresh_every : int
        Optimiser steps between walker runs (each run uses the weights of that moment).
    steps : int
        Langevin steps (4 fs) per run.
    save_every : int
        Steps between the frames kept in a run: ``walkers × steps // save_every`` frames
        per refresh, and as many teacher frames drawn at random.
    start_fraction : float
        With starting structures given to :class:`OnlineEnsemble`: the share of walkers
        that start from them (the others from teacher frames).
    burn_in : int
        Langevin steps the walkers run before the first run's frames are kept, with the
        weights training starts from: they relax from the teacher frames into the model's
        own ensemble (for 1YRF a model's Q drifts from the teacher's within ~50 ps,
        12,500 steps), so the term compares that ensemble from the first step on.
    contrastive : bool
        Count every walker frame equally (the plain contrastive gradient ``β (⟨∂U/∂θ⟩_teacher
        − ⟨∂U/∂θ⟩_walkers)``) instead of reweighting them to the current weights: between
        runs the reweighting puts the model side on a few frames.
    """

    walkers: int = 128
    temperature: float = 300.0
    refresh_every: int = 50
    steps: int = 1000
    save_every: int = 100
    start_fraction: float = 0.5
    burn_in: int = 0
    contrastive: bool = False

    def __post_init__(self):
        for name in ("walkers", "refresh_every", "steps", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"online {name} must be >= 1, got {getattr(self, name)}")
        if self.save_every > self.steps:
            raise ValueError(
                f"online save_every ({self.save_every}) must not exceed steps ({self.steps})"
            )
        if self.burn_in < 0:
            raise ValueError(f"online burn_in must be >= 0, got {self.burn_in}")
        if not 0.0 <= self.start_fraction <= 1.0:
            raise ValueError(
                f"online start_fraction must lie in [0, 1], got {self.start_fraction}"
            )
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ValueError(f"online temperature must be positive, got {self.temperature} K")


@dataclass
class WalkerState:
    """What the walkers looked like at the end of a refresh.

    Attributes
    ----------
    q_mean : float
        Mean fraction of native contacts.
    folded : float
        Share of walkers with Q above the protein's folded threshold.
    restarted : int
        Walkers frozen by the safety checks in this run (restarted from teacher frames).
    seconds : float
        Wall time of the run and of the frames' energies.
    """

    q_mean: float
    folded: float
    restarted: int
    seconds: float


@dataclass
class OnlineEnsemble:
    """Walkers of the model being trained, and the frames they give the ensemble term.

    Parameters
    ----------
    system : CGSystem
    bead_types : torch.Tensor, shape (n,), int64
        Embedding types of the network being trained.
    priors : dict of PriorTerm
        The model's (fixed) priors: the walkers run the full potential.
    teacher_frames : torch.Tensor, shape (A, n, 3), float32
        Teacher frames at ``settings.temperature`` (the training split's), Å.
    settings : OnlineSettings
    device : str or torch.device
    seed : int
        Seeds the walkers' starting frames, their runs (seed + refresh count) and the
        teacher frames drawn.
    starts : torch.Tensor, shape (S, n, 3), float32, optional
        Structures that the first ``round(walkers × settings.start_fraction)`` walkers
        start from, in turn (say, the ends of the model's run from native).

    Attributes
    ----------
    positions : torch.Tensor, shape (walkers, n, 3), float32
        Where the walkers are (the next run starts there), on the CPU.
    history : list of WalkerState
        One entry per run.
    """

    system: CGSystem
    bead_types: torch.Tensor
    priors: dict[str, PriorTerm]
    teacher_frames: torch.Tensor
    settings: OnlineSettings
    device: str | torch.device = "cpu"
    seed: int = 0
    starts: torch.Tensor | None = None
    history: list[WalkerState] = field(default_factory=list)

    def __post_init__(self):
        n = self.system.n_beads
        if self.teacher_frames.ndim != 3 or self.teacher_frames.shape[1:] != (n, 3):
            raise ValueError(
                f"teacher frames of {self.system.name} must have shape (A, {n}, 3), got "
                f"{tuple(self.teacher_frames.shape)}"
            )
        if self.teacher_frames.shape[0] == 0:
            raise ValueError(
                f"no teacher frames at {self.settings.temperature} K for the walkers to start "
                "from and be compared with"
            )
        self._generator = torch.Generator().manual_seed(self.seed)
        self.positions = self._teacher_sample(self.settings.walkers)
        if self.starts is not None:
            if self.starts.ndim != 3 or self.starts.shape[1:] != (n, 3) or not len(self.starts):
                raise ValueError(
                    f"walker starts of {self.system.name} must have shape (S, {n}, 3), got "
                    f"{tuple(self.starts.shape)}"
                )
            given = round(self.settings.walkers * self.settings.start_fraction)
            self.positions[:given] = self.starts[torch.arange(given) % len(self.starts)].float()
        self._network: nn.Module | None = None

    def _teacher_sample(self, count: int) -> torch.Tensor:
        """``count`` teacher frames drawn at random (with replacement), (count, n, 3)."""
        index = torch.randint(self.teacher_frames.shape[0], (count,), generator=self._generator)
        return self.teacher_frames[index]

    def refresh(self, network: nn.Module) -> EnsembleSet:
        """Run the walkers with a copy of ``network``'s current weights and return their
        frames with as many teacher frames (the first run after ``settings.burn_in`` steps).

        Parameters
        ----------
        network : nn.Module
            The network being trained, of any registered architecture (only read).

        Returns
        -------
        EnsembleSet
            ``model``: the walkers' kept frames (frames of walkers frozen in this run left
            out); ``teacher``: random teacher frames, as many; offsets ``−U_θ0`` (network
            energy of the copy, kcal/mol), so that ``ΔU = U_θ − U_θ0``.
        """
        began = time.perf_counter()
        if self._network is None:
            self._network = copy.deepcopy(network).requires_grad_(False)
        else:
            self._network.load_state_dict(network.state_dict())
        self._network.eval()
        settings = self.settings
        full = Potential(self.bead_types, self._network, self.priors)
        sim = langevin_simulation(
            self.system, full, settings.temperature, self.positions, self.device,
            self.seed + len(self.history),
        )
        if not self.history and settings.burn_in:
            sim.step(settings.burn_in)
        kept = []
        for _ in range(settings.steps // settings.save_every):
            sim.step(settings.save_every)
            kept.append(sim.positions.detach().clone())
        live = ~sim.frozen
        frozen = sim.frozen.cpu()
        q = sim.native_q()[live].float().cpu()
        model = torch.cat([frames[live] for frames in kept]).float().cpu()
        self.positions = sim.positions.detach().float().cpu()
        if frozen.any():
            self.positions[frozen] = self._teacher_sample(int(frozen.sum()))
        if model.shape[0] == 0:
            raise RuntimeError(
                f"every walker of {self.system.name} was frozen by the safety checks in one "
                "run: the model being trained has blown up"
            )
        teacher = self._teacher_sample(model.shape[0])
        sampler = Potential(self.bead_types, self._network).to(self.device)
        with torch.no_grad():
            offsets = [-batched_energies(sampler, x, settings.walkers, self.device).cpu()
                       for x in (teacher, model)]
        frames = EnsembleSet(teacher, offsets[0], model, offsets[1], settings.temperature)
        self.history.append(WalkerState(
            q_mean=float(q.mean()),
            folded=float((q > state_thresholds(self.system.name)[0]).float().mean()),
            restarted=int(frozen.sum()),
            seconds=time.perf_counter() - began,
        ))
        return frames

    def card(self) -> dict:
        """The settings, refresh count and last walker state, for the model card."""
        last = asdict(self.history[-1]) if self.history else None
        return {
            **asdict(self.settings),
            "walkers_from_given_starts": 0 if self.starts is None
            else round(self.settings.walkers * self.settings.start_fraction),
            "refreshes": len(self.history),
            "walkers_restarted": sum(state.restarted for state in self.history),
            "seconds": sum(state.seconds for state in self.history),
            "last_walker_state": last,
        }
