"""The whole training run of ``workbench train``: data, priors, force matching, card.

Teacher data are read from a file or generated in the same job; priors are fitted by
Boltzmann inversion to the frames at ``prior_temperature``; a network of any registered
architecture (CGSchNet by default, CGPaiNN, CGEGNN: ``TrainSettings.network``) is trained on
the teacher forces minus the prior forces (and, with an energy weight, on the teacher's
energies minus the priors', up to a constant); the potential (network + priors) is saved with
:func:`~workbench.model.io.save_potential` as ``<out>/<protein>.pt`` with the model card
``<out>/<protein>.json``, which holds the epoch log (``training.log``, continued from the
model training started from). While it trains, the epochs of this call are written, one
line each, to ``<out>/<protein>.log.csv``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from workbench.md.simulation import checkpoint_positions
from workbench.model.architectures import architecture_of_config, build_network
from workbench.model.geometry import torsions
from workbench.model.io import load_potential, save_potential
from workbench.model.potential import Potential
from workbench.model.priors import FourierDihedrals
from workbench.model.schnet import SchNetConfig
from workbench.model_fit import check_model_fits
from workbench.system.cg_system import CGSystem
from workbench.system.topology import MIN_SEPARATION
from workbench.training.boltzmann_inversion import fit_priors, non_native_minima
from workbench.training.data import sampled_mask, split_indices
from workbench.training.force_matching import (
    FitSettings,
    model_forces,
    potential_labels,
    prior_labels,
    train_force_matching,
)
from workbench.training.model_card import (
    build_model_card,
    epoch_log,
    kept_prior_settings,
    read_epoch_log,
    write_model_card,
)
from workbench.training.prior_refinement import refine_priors
from workbench.training.relative_entropy import (
    EnsembleSet,
    OnlineEnsemble,
    OnlineSettings,
    SamplerFrames,
    ensemble_sets,
)
from workbench.training.selection import selection_score
from workbench.training.validate import force_rmse, validate_against_teacher


@dataclass
class TrainSettings:
    """What :func:`train_potential` does besides the optimisation itself.

    Attributes
    ----------
    schnet : SchNetConfig
        Sizes of the CGSchNet trained when ``network`` is None.
    network : dataclass or None
        Config of the network to train, of any registered architecture
        (:data:`~workbench.model.architectures.ARCHITECTURES`: ``SchNetConfig``,
        ``PaiNNConfig``, ``EGNNConfig``); it is built untrained with ``build_network`` and
        saved with its architecture. None: a CGSchNet of ``schnet``. With ``start_from`` the
        model's own network is continued; a config of another architecture is refused.
    fit : FitSettings
    validation_fraction : float
    prior_temperature : float or None
        Frames at this temperature (K) feed the Boltzmann inversion; None: the lowest.
    prior_grouping : {"term", "type"}
    prior_repulsion_separation : int or None
        Smallest bond-graph separation of the pairs of a fitted repulsion
        (:func:`~workbench.training.boltzmann_inversion.fit_priors`); None: the mapping's.
        Refused with ``start_from`` (continued priors are kept).
    prior_dihedral_degree : int or None
        Highest harmonic of the fitted dihedral series; None: 3. 1 gives every dihedral
        one minimum, as the teacher's (``fit_priors``). Refused with ``start_from``.
    prior_repulsion_grouping : {"pair", "type", "name", "sequence", "touching"} or None
        Which repulsion pairs share one σ
        (:func:`~workbench.training.boltzmann_inversion.repulsion_sigma`); None:
        ``"pair"``. Refused with ``start_from``.
    prior_refinement : bool
        Refit the Boltzmann-inverted bonds, angles and dihedrals to the teacher's forces
        on all frames (:func:`~workbench.training.prior_refinement.refine_priors`), so that
        the network is left the contacts and not the difference between those terms' free
        energies and the teacher's own terms. Refused with ``start_from``.
    embedding : {"type", "bead"} or None
        What the network's embedding tells apart: the bead types of the mapping (``"type"``,
        the CGSchNet convention: beads of the same amino acid and kind share a vector), or
        every bead of the chain (``"bead"``: as many vectors as beads, so the network can
        give each pair its own interaction, as a structure-based teacher does; the model
        then holds for this one sequence only). None: ``"type"`` for a new model, and
        whatever the model of ``start_from`` has (a different one given is refused).
    prior_repulsion : {"power", "cutoff", "edge"} or None
        Form of the fitted repulsion (:func:`~workbench.training.boltzmann_inversion.fit_priors`);
        None: ``"power"`` for new priors, and whatever the model of ``start_from`` has (a
        form given that differs from it is refused: continued priors are never refitted).
    validate_steps : int
        Steps of the teacher-vs-model validation runs (0: none).
    validate_replicas : int
        Replicas per validation temperature.
    validate_temperatures : list of float
    progress : bool
    start_from : str or None
        A model saved by an earlier run for the same protein: training continues from its
        network's weights (and architecture and configuration) and keeps its priors instead
        of refitting them, so the force targets are the same; its epoch log, when present
        beside it, is continued. Lets a long training run be split over several jobs.
    select_steps, select_replicas, select_by : int, int, str
        With ``fit.select_every``: the kept weights are those whose run of this many steps
        and replicas (half from native, half from unfolded structures, at the first of
        ``validate_temperatures``) scores closest to the teacher's by the criterion
        ``select_by`` (:func:`~workbench.training.selection.selection_score`).
    select_start : str or None
        A run folder (or checkpoint file) whose structures start the second half of each
        selection run instead of unfolded ones; recorded in the card.
    data_origin : dict
        How frames beyond the teacher's own runs were made (``--sampler``, ``--compact``),
        recorded in the card's ``data`` section.
    ensemble_temperatures : list of float or None
        Temperatures (K) whose frames feed the relative-entropy term
        (``fit.ensemble_weight``); None: every temperature with frames of both kinds. The
        term compares equilibrium ensembles: give only temperatures at which both the
        teacher's and the sampler's runs started from equilibrated structures.
    online : OnlineSettings or None
        With ``fit.ensemble_weight``: the term's model frames come from walkers of the model
        being trained (:class:`~workbench.training.relative_entropy.OnlineEnsemble`),
        compared with the training split's teacher frames at ``online.temperature``, instead
        of a sampler's frames (which, given, are then force-matching frames only).
    online_starts : torch.Tensor or None
        Shape (S, n, 3), float32: structures a share of the walkers start from
        (``online.start_fraction``); None: every walker from a teacher frame.
    """

    schnet: SchNetConfig = field(default_factory=SchNetConfig)
    network: Any = None
    fit: FitSettings = field(default_factory=FitSettings)
    validation_fraction: float = 0.1
    prior_temperature: float | None = None
    prior_grouping: str = "term"
    prior_repulsion: str | None = None
    prior_repulsion_separation: int | None = None
    prior_dihedral_degree: int | None = None
    prior_repulsion_grouping: str | None = None
    prior_refinement: bool = False
    embedding: str | None = None
    validate_steps: int = 0
    validate_replicas: int = 32
    validate_temperatures: list[float] = field(default_factory=lambda: [300.0])
    progress: bool = True
    start_from: str | None = None
    select_steps: int = 0
    select_replicas: int = 64
    select_by: str = "folded"
    select_start: str | None = None
    data_origin: dict = field(default_factory=dict)
    ensemble_temperatures: list[float] | None = None
    online: OnlineSettings | None = None
    online_starts: torch.Tensor | None = None


def train_potential(
    system: CGSystem,
    teacher: Potential,
    data: dict[str, torch.Tensor],
    settings: TrainSettings,
    out: str | Path,
    sampler: SamplerFrames | None = None,
) -> tuple[Potential, dict]:
    """Fit priors and a network to teacher data and save the potential and its card.

    Parameters
    ----------
    system : CGSystem
    teacher : Potential
        The teacher that produced ``data``: its metadata goes into the card, its energies
        of the frames (less the priors') are the energy targets, and it is run again for
        the selection and the validation.
    data : dict
        ``positions``, ``forces`` (M, n, 3) and ``temperature`` (M,), float32.
    settings : TrainSettings
    out : str or Path
        Existing folder.
    sampler : SamplerFrames, optional
        The frames of ``data`` a model's dynamics sampled, and that model: needed by the
        relative-entropy term (``settings.fit.ensemble_weight > 0``).

    Returns
    -------
    (Potential, dict)
        The trained potential (on the CPU) and its model card.
    """
    out = Path(out)
    temperature = data["temperature"]
    # (the lowest temperature of the teacher's own frames: not that of frames marked sampled)
    prior_t = settings.prior_temperature or float(temperature[~sampled_mask(data)].min())
    # priors come from the teacher's own ensemble, not from frames another potential sampled
    at_prior_t = ((temperature - prior_t).abs() < 1e-3) & ~sampled_mask(data)
    if not at_prior_t.any():
        raise ValueError(f"no teacher-sampled frames at the prior temperature {prior_t} K")
    config = settings.schnet if settings.network is None else settings.network
    architecture = architecture_of_config(config)
    start = _starting_model(settings.start_from, system, teacher, settings.prior_repulsion,
                            settings.prior_repulsion_separation,
                            settings.prior_dihedral_degree,
                            settings.prior_repulsion_grouping,
                            settings.prior_refinement,
                            None if settings.network is None else architecture)
    types = _embedding_types(system, start, settings.embedding)
    if start is None:
        repulsion = settings.prior_repulsion or "power"
        degree = 3 if settings.prior_dihedral_degree is None else settings.prior_dihedral_degree
        repulsion_grouping = settings.prior_repulsion_grouping or "pair"
        # the edge walls lie below every teacher frame, of every temperature (the network
        # is trained on all of them and so never meets a wall it would learn to cancel)
        walled = ~sampled_mask(data) if repulsion == "edge" else at_prior_t
        priors = fit_priors(
            system, data["positions"][at_prior_t], prior_t, grouping=settings.prior_grouping,
            dihedral_degree=degree, repulsion=repulsion,
            repulsion_separation=settings.prior_repulsion_separation,
            repulsion_grouping=repulsion_grouping,
            repulsion_positions=data["positions"][walled],
        )
        prior_settings = {
            "method": "Boltzmann inversion",
            "temperature_K": prior_t,
            "grouping": settings.prior_grouping,
            "repulsion": repulsion,
            "repulsion_pairs": int(priors["repulsion"].index.shape[0]),
            "repulsion_min_separation": settings.prior_repulsion_separation
            or MIN_SEPARATION[system.mapping],
            "repulsion_grouping": repulsion_grouping,
            "repulsion_temperatures_K": sorted({round(float(t), 3) for t in temperature[walled]}),
            "dihedral_degree": degree,
            "terms": list(priors),
        }
        if settings.prior_refinement:
            priors, refinement = refine_priors(
                priors, data["positions"], data["forces"], seed=settings.fit.seed,
                device=settings.fit.device,
            )
            prior_settings["method"] = ("Boltzmann inversion, then bonds, angles and "
                                        "dihedrals refined by force matching")
            prior_settings["refinement"] = refinement.card()
    else:
        priors = dict(start.priors)
        prior_settings = kept_prior_settings(settings.start_from, list(priors))
    if isinstance(priors.get("dihedrals"), FourierDihedrals):
        native = torsions(system.native_positions[None].double(), system.dihedrals)[0]
        prior_settings["dihedrals_with_a_non_native_minimum"] = int(
            non_native_minima(priors["dihedrals"], native).sum())
    device = settings.fit.device
    prior_energy, prior_force = prior_labels(
        system.bead_types, priors, data["positions"], device=device
    )
    teacher_energy = potential_labels(teacher, data["positions"], device=device)[0]
    targets = (data["positions"], data["forces"] - prior_force, teacher_energy - prior_energy)
    train, val = split_indices(
        data["positions"].shape[0], settings.validation_fraction, settings.fit.seed
    )
    ensemble, online = None, None
    if settings.fit.ensemble_weight > 0 and settings.online is not None:
        at = (temperature - settings.online.temperature).abs() < 1e-3
        teacher_frames = at & ~sampled_mask(data)
        teacher_frames[val] = False
        online = OnlineEnsemble(
            system, types, priors, data["positions"][teacher_frames], settings.online,
            device, settings.fit.seed, settings.online_starts,
        )
    elif settings.fit.ensemble_weight > 0:
        ensemble = _ensemble_frames(
            data, prior_energy, sampler, settings.ensemble_temperatures, (train, val), device
        )
    if start is None:
        state = torch.random.get_rng_state()
        torch.manual_seed(settings.fit.seed)
        try:
            network = build_network(
                architecture,
                replace(config, embedding_size=int(types.max()) + 1)
                if settings.embedding == "bead" else config,
            )
        finally:
            torch.random.set_rng_state(state)
        statistics = _descriptor_statistics(network, data["positions"][train], types)
    else:
        network, architecture = start.network, start.architecture
        statistics = None
    earlier_log = read_epoch_log(settings.start_from) if start else []
    selector, selection = None, None
    if settings.fit.select_every > 0 and settings.select_steps > 0:
        selection = {
            "every_epochs": settings.fit.select_every,
            "steps": settings.select_steps,
            "replicas": settings.select_replicas,
            "temperature_K": settings.validate_temperatures[0],
            "criterion": settings.select_by,
            "second_half_starts": settings.select_start or "unfolded",
        }
        others = None
        if settings.select_start is not None:
            others = checkpoint_positions(settings.select_start, system)
        selector, selection["teacher_folded"] = selection_score(
            system, teacher, network.to(device), priors, selection["temperature_K"],
            settings.select_replicas, settings.select_steps, device, settings.fit.seed, types,
            settings.select_by, others,
        )
    fit = train_force_matching(
        network,
        types,
        tuple(t[train] for t in targets),
        tuple(t[val] for t in targets),
        settings.fit,
        log_path=out / f"{system.name}.log.csv",
        progress=settings.progress,
        selector=selector,
        ensemble=ensemble,
        online=online,
    )
    potential = Potential(types, network, priors).cpu()
    potential.metadata = {
        "trained": True,
        "description": f"{type(network).__name__} + priors trained by force matching on the "
        f"structure-based teacher of {system.name} (epsilon {teacher.metadata.get('epsilon')} "
        "kcal/mol)",
        "protein": system.name,
        "mapping": system.mapping,
        "sequence": list(system.residue_names),
        "teacher": teacher.metadata,
    }

    def card_with(validation):
        card = build_model_card(
            system.name, teacher.metadata, data, network.config, fit, prior_settings, validation
        )
        card["data"].update(settings.data_origin)
        card[architecture]["embedding"] = "bead" if _per_bead(system, types) else "type"
        if statistics is not None:
            card[architecture]["environment_statistics"] = statistics
        card["training"]["energy_weight"] = settings.fit.energy_weight
        card["training"]["tf32"] = settings.fit.tf32
        card["training"]["tf32_force_error"] = fit.tf32_force_error
        card["training"]["grad_clip"] = settings.fit.grad_clip
        card["training"]["clipped_steps"] = fit.clipped_steps
        card["training"]["weight_average"] = settings.fit.weight_average
        if ensemble is not None:
            card["training"]["relative_entropy"] = {
                "weight": settings.fit.ensemble_weight,
                "min_sample_fraction": settings.fit.min_sample_fraction,
                "check_every_steps": settings.fit.ensemble_check_every,
                "stopped_by_reweighting": fit.stopped_by_reweighting,
                "backoffs": {"allowed": settings.fit.reweighting_backoffs,
                             "used": fit.reweighting_backoffs},
                "kept_step": fit.reweighting_kept_step,
                "temperatures_K": [s.temperature for s in ensemble[0]],
                "kept_epoch": {
                    k: fit.history[fit.best_epoch - 1][k]
                    for k in ("val_relative_entropy", "ensemble_sample_fraction")
                },
            }
        if online is not None:
            card["training"]["relative_entropy"] = {
                "weight": settings.fit.ensemble_weight,
                "frames": "walkers of the model being trained",
                "walkers": online.card(),
            }
        if start is not None:
            card["training"]["continued_from"] = {
                "model": str(settings.start_from), "epochs_before": len(earlier_log)
            }
            # the earlier epochs first, this call's numbered on
            card["training"]["log"] = epoch_log([
                *earlier_log,
                *({**row, "epoch": len(earlier_log) + row["epoch"]} for row in fit.history),
            ])
        if selection is not None:  # the scores of the selection runs, and the kept epoch
            card["training"]["selection_in_md"] = {
                **selection, "scores": fit.selection, "kept_epoch": fit.best_epoch
            }
        return card

    # Saved before the (long) MD validation, so a run cut short keeps the trained model.
    save_potential(potential, out / f"{system.name}.pt")
    card = card_with(None)
    write_model_card(card, out / f"{system.name}.pt")
    if settings.validate_steps > 0:
        held_out = data["positions"][val][:1024].to(device)
        predicted = model_forces(potential.to(device), held_out).cpu()
        validation = validate_against_teacher(
            system, teacher, potential, settings.validate_temperatures,
            settings.validate_replicas, settings.validate_steps,
            max(1, settings.validate_steps // 1000), device, settings.fit.seed,
            plot_path=out / f"{system.name}.validation.png",
            series_path=out / f"{system.name}.validation.pt",
        )
        validation["force_rmse"] = force_rmse(predicted, data["forces"][val][:1024])
        potential.cpu()
        card = card_with(validation)
        write_model_card(card, out / f"{system.name}.pt")
    return potential, card


def _ensemble_frames(
    data: dict[str, torch.Tensor],
    prior_energy: torch.Tensor,
    sampler: SamplerFrames | None,
    temperatures: list[float] | None,
    splits: tuple[torch.Tensor, torch.Tensor],
    device: str,
) -> tuple[list[EnsembleSet], list[EnsembleSet]]:
    """Training and validation sets of the relative-entropy term: the teacher's own frames
    and the sampler's, per temperature (those given, or all), with ``U_prior − U_θ0`` per
    frame."""
    if sampler is None or not sampler.mask.any():
        raise ValueError("the relative-entropy term needs frames of a sampler model (--sampler)")
    if sampler.mask.shape != data["temperature"].shape:
        raise ValueError(
            f"the sampler's frame mask has shape {tuple(sampler.mask.shape)}, the data "
            f"{tuple(data['temperature'].shape)}"
        )
    teacher_frames, model_frames = ~sampled_mask(data), sampler.mask
    if temperatures is not None:
        wanted = torch.zeros_like(teacher_frames)
        for value in temperatures:
            wanted |= (data["temperature"] - value).abs() < 1e-3
        teacher_frames, model_frames = teacher_frames & wanted, model_frames & wanted
    used = teacher_frames | model_frames
    offset = torch.zeros_like(prior_energy)
    offset[used] = prior_energy[used] - potential_labels(
        sampler.potential, data["positions"][used], device=device
    )[0]
    sets = []
    for index in splits:
        pick = torch.zeros_like(used)
        pick[index] = True
        sets.append(ensemble_sets(
            data["positions"], data["temperature"], teacher_frames & pick,
            model_frames & pick, offset,
        ))
    return sets[0], sets[1]


#: Repulsion prior class of each form of ``fit_priors``.
_REPULSION_CLASSES = {
    "power": "Repulsion", "cutoff": "CutoffRepulsion", "edge": "CutoffRepulsion",
}


def _starting_model(
    path: str | None,
    system: CGSystem,
    teacher: Potential,
    repulsion: str | None = None,
    repulsion_separation: int | None = None,
    dihedral_degree: int | None = None,
    repulsion_grouping: str | None = None,
    refinement: bool = False,
    architecture: str | None = None,
) -> Potential | None:
    """The model a run continues from, checked against the system, the teacher (the force
    targets must not change under it) and, when given, the repulsion form and the network's
    architecture; None for none. Its priors are kept, so a repulsion separation or grouping,
    a dihedral degree or a refinement given with it is refused."""
    if path is None:
        return None
    start = load_potential(path)
    protein = start.metadata.get("protein")
    if start.network is None or protein != system.name:
        raise ValueError(
            f"{path} cannot be continued for {system.name}: it is "
            + ("a prior-only potential" if start.network is None else f"a model of {protein}")
        )
    if architecture is not None and architecture != start.architecture:
        raise ValueError(
            f"{path} holds a {start.architecture} network, which is continued as it is: leave "
            f"out the architecture or give {start.architecture!r}, not {architecture!r}"
        )
    check_model_fits(start, system, str(path))
    refits = [name for name, value in (("repulsion separation", repulsion_separation),
                                       ("repulsion grouping", repulsion_grouping),
                                       ("dihedral degree", dihedral_degree),
                                       ("prior refinement", refinement or None))
              if value is not None]
    if refits:
        raise ValueError(f"{path} keeps its priors when continued: leave out the "
                         f"{' and the '.join(refits)}")
    priors = dict(start.priors)
    kept = type(priors["repulsion"]).__name__ if "repulsion" in priors else "none"
    if repulsion is not None and kept != _REPULSION_CLASSES[repulsion]:
        raise ValueError(
            f"{path} keeps its priors when continued (its repulsion: {kept}): leave out the "
            f"repulsion form or give the one it has, not {repulsion!r}"
        )
    before = (start.metadata.get("teacher") or {}).get("epsilon")
    now = teacher.metadata.get("epsilon")
    if before is not None and now is not None and abs(before - now) > 1e-9:
        raise ValueError(
            f"{path} was trained on a teacher with epsilon {before} kcal/mol; this run's "
            f"teacher has {now} (pass --epsilon {before} to continue it)"
        )
    return start


#: Values of ``TrainSettings.embedding``: the mapping's bead types, or one index per bead.
_EMBEDDINGS = ("type", "bead")


#: Most training frames the descriptor statistics of a Deep Potential are computed from.
STATISTICS_FRAMES = 1000


def _descriptor_statistics(network, positions: torch.Tensor, types: torch.Tensor) -> dict | None:
    """A new Deep Potential with neighbour slots gets deepmd-kit's input statistics from at
    most `STATISTICS_FRAMES` of its training frames, evenly spaced
    (`workbench.model.dp_statistics`); what its card records of them. None for other
    networks."""
    from workbench.model.deep_potential import CGDeepPotential
    from workbench.model.dp_statistics import set_environment_statistics

    if not isinstance(network, CGDeepPotential) or network.config.sel is None:
        return None
    every = max(1, -(-positions.shape[0] // STATISTICS_FRAMES))
    return set_environment_statistics(network, positions[::every], types)


def _per_bead(system: CGSystem, types: torch.Tensor) -> bool:
    """Whether ``types`` (n,) int64 gives every bead its own index 0..n-1."""
    return bool(torch.equal(types.cpu(), torch.arange(system.n_beads)))


def _embedding_types(
    system: CGSystem, start: Potential | None, embedding: str | None
) -> torch.Tensor:
    """Embedding indices (n,) int64 of the model trained: those of ``start`` when it is
    continued (checked against ``embedding`` when that is given), else those ``embedding``
    names (``TrainSettings.embedding``)."""
    if embedding is not None and embedding not in _EMBEDDINGS:
        raise ValueError(f"embedding must be one of {_EMBEDDINGS}, got {embedding!r}")
    if start is not None:
        types = start.bead_types.cpu()
        kept = "bead" if _per_bead(system, types) else "type"
        if embedding is not None and embedding != kept:
            raise ValueError(
                f"the model continued has a per-{kept} embedding; leave out the embedding "
                f"or give {kept!r}, not {embedding!r}"
            )
        return types
    if embedding == "bead":
        return torch.arange(system.n_beads)
    return system.bead_types.cpu()
