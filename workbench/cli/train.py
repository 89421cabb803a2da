"""``workbench train``: a network (CGSchNet by default, ``--arch``) + priors trained on a
structure-based teacher.

Options come from the command line or from a recipe file (``--config``, see
:mod:`workbench.cli.recipes`); the options that constrain one another are checked by
`TrainOptions` before anything runs.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import fields

import torch

from workbench.cli.errors import UsageError
from workbench.cli.output import folder_lock, refuse_existing, summary_table
from workbench.cli.parser import command_parser, floats
from workbench.md.reporters import ensure_writable_folder
from workbench.model.architectures import ARCHITECTURES
from workbench.settings_error import SettingsError
from workbench.teacher import state_thresholds
from workbench.training.train_options import TrainOptions


def add_parser(subparsers) -> None:
    """``workbench train`` and its options."""
    train = command_parser(
        subparsers, "train",
        "train a network (CGSchNet, CGPaiNN, CGEGNN, CGTensorProduct, CGDeepPotential) + "
        "priors on a structure-based teacher (force matching)",
    )
    train.add_argument(
        "--config", default=None, metavar="RECIPE",
        help="a recipe file (YAML) whose keys are these options' names (dashes or "
        "underscores); options given here override it (--no-tf32 turns off its tf32: true)",
    )
    train.add_argument("--protein", default="cln025", help="bundled name or PDB file")
    source = train.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--data", default=None, help="teacher data file (.pt; its teacher is rebuilt from it)"
    )
    source.add_argument("--generate", action="store_true", help="generate teacher data here")
    train.add_argument(
        "--save-data", default=None,
        help="also save the data here (the frames of --sampler and --compact included)",
    )
    train.add_argument("--epsilon", type=float, default=None, help="teacher ε, kcal/mol")
    train.add_argument("--dihedral-ratio", type=float, default=None)
    train.add_argument(
        "--contact-separation", type=int, default=None,
        help="teacher: smallest residue separation of a native contact (default 3)",
    )
    train.add_argument(
        "--contact-barrier", type=float, default=None,
        help="teacher: desolvation barrier height of every native contact, as a multiple "
        "of ε (default none)",
    )
    train.add_argument(
        "--calibrate", type=float, default=None, metavar="TARGET",
        help="first calibrate ε to this folded fraction at the first temperature",
    )
    train.add_argument("--calibrate-replicas", type=int, default=64)
    train.add_argument("--calibrate-steps", type=int, default=400, help="steps per ε tried")
    train.add_argument("--calibrate-iterations", type=int, default=8)
    train.add_argument(
        "--calibrate-native-fraction", type=float, default=0.5,
        help="share of calibration replicas started native (1 for proteins too large to "
        "refold in a calibration run)",
    )
    train.add_argument("--temperatures", default=None,
                       help="comma list, kelvin (default 300; with --data, the data's own)")
    train.add_argument("--replicas", type=int, default=64, help="per temperature")
    train.add_argument("--steps", type=int, default=100000, help="production steps")
    train.add_argument("--save-every", type=int, default=100)
    train.add_argument("--equilibration", type=int, default=5000)
    train.add_argument("--prior-temperature", type=float, default=None)
    train.add_argument("--prior-grouping", default="term", choices=["term", "type"])
    train.add_argument(
        "--repulsion", default=None, choices=["power", "cutoff", "edge"],
        help="fitted repulsion: (σ/r)^6 at all distances (default), shifted to zero at "
        "1.25 σ, or shifted to zero at σ, the closest approach (nothing wherever the data "
        "went); with --start-from the model's own priors are kept",
    )
    train.add_argument(
        "--repulsion-separation", type=int, default=None,
        help="smallest bond-graph separation of a fitted repulsion pair (default: the "
        "mapping's, 5 for five-bead; 4 also keeps 1-5 pairs apart)",
    )
    train.add_argument(
        "--repulsion-grouping", default=None,
        choices=["pair", "type", "name", "sequence", "touching"],
        help="pairs that share one repulsion σ, their smallest closest approach: each pair "
        "alone (default; far pairs then repel at the closest they came in the data), pairs "
        "of the same bead types (mlcg's), of the same bead names (a sequence-free hard "
        "core), or of the same bead types and residue separation (1-4, 5 and more: helix "
        "neighbours walled at their own closest approach); 'touching' is the last, except "
        "that pairs that came within 6.5 Å keep their own (contacts walled where the data "
        "found them); new priors only",
    )
    train.add_argument(
        "--dihedral-degree", type=int, default=None,
        help="highest harmonic of the fitted dihedral priors (default 3; 1: one minimum "
        "per dihedral, as the teacher's; new priors only)",
    )
    train.add_argument(
        "--refine-priors", action=argparse.BooleanOptionalAction, default=False,
        help="after Boltzmann inversion, refit the bond, angle and dihedral priors to the "
        "teacher's forces by linear least squares, so that the network is left the contacts "
        "(new priors only)",
    )
    train.add_argument(
        "--embedding", default=None, choices=["type", "bead"],
        help="network embedding: one vector per bead type (default, the CGSchNet convention) "
        "or one per bead of the chain (pair-specific interactions, as a structure-based "
        "teacher has; the model holds for this sequence only); with --start-from the "
        "model's own is kept",
    )
    train.add_argument(
        "--arch", default=None, choices=sorted(ARCHITECTURES),
        help="architecture of the network trained (default schnet; with --start-from the "
        "model's own)",
    )
    train.add_argument(
        "--network", default=None, metavar="MAPPING",
        help="the network's sizes as a YAML/JSON mapping of its config keys, say "
        "'{hidden: 64, blocks: 2}' (a mapping in a recipe); unset keys keep the "
        "architecture's defaults; unknown keys are refused",
    )
    train.add_argument("--hidden", type=int, default=None,
                       help="config key hidden (default 128 for schnet and painn, 64 for egnn; "
                       "nequip has irreps, dp embedding_widths and fitting_widths)")
    train.add_argument("--filters", type=int, default=None, help="config key filters (schnet)")
    train.add_argument("--blocks", type=int, default=None,
                       help="config key blocks (schnet, painn, nequip; egnn has layers; dp none)")
    train.add_argument("--num-rbf", type=int, default=None, help="config key num_rbf")
    train.add_argument("--cutoff", type=float, default=None, help="config key cutoff, Å")
    train.add_argument("--epochs", type=int, default=100)
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument("--patience", type=int, default=10, help="early-stopping epochs")
    train.add_argument(
        "--energy-weight", type=float, default=0.0,
        help="weight of the energy term of the loss, Å²/bead (teacher energies less the "
        "priors', centred per batch; 0: forces alone)",
    )
    train.add_argument(
        "--ensemble-weight", type=float, default=0.0,
        help="with --sampler: weight of the relative-entropy term, (kcal/mol/Å)² per nat: "
        "lowers the energy where the teacher's frames go more often than the sampler's and "
        "raises it where the sampler's go more often (0: off)",
    )
    train.add_argument(
        "--online-walkers", type=int, default=0, metavar="N",
        help="with --ensemble-weight: the term's model frames come from N walkers of the "
        "model being trained, run every --online-every optimiser steps with the weights of "
        "that moment (the reweighting starts afresh at each run), instead of --sampler "
        "frames (0: off)",
    )
    train.add_argument(
        "--online-temperature", type=float, default=None,
        help="kelvin, the walkers' and the teacher frames' they are compared with (default: "
        "the first --validate-temperatures)",
    )
    train.add_argument(
        "--online-start", default=None, metavar="RUN[,RUN...]",
        help="half of the --online-walkers start from these runs' structures, in turn (say, "
        "where the model's run from native went), the others from teacher frames",
    )
    train.add_argument(
        "--online-every", type=int, default=50, help="optimiser steps per walker run"
    )
    train.add_argument("--online-steps", type=int, default=1000, help="MD steps per walker run")
    train.add_argument(
        "--online-save-every", type=int, default=100, help="MD steps between kept walker frames"
    )
    train.add_argument(
        "--online-burn-in", type=int, default=0, metavar="STEPS",
        help="MD steps the walkers run with the starting weights before their first frames "
        "are kept (they relax into the model's own ensemble first)",
    )
    train.add_argument(
        "--online-contrastive", action=argparse.BooleanOptionalAction, default=False,
        help="count the walker frames equally (plain contrastive gradient) instead of "
        "reweighting them to the current weights between runs",
    )
    train.add_argument(
        "--min-sample-fraction", type=float, default=0.5,
        help="with --ensemble-weight: stop once the reweighted sampler frames' effective "
        "sample fraction falls below this, keeping the weights of the last check above it",
    )
    train.add_argument(
        "--ensemble-check-every", type=int, default=50,
        help="with --ensemble-weight: optimiser steps between those checks",
    )
    train.add_argument(
        "--reweighting-backoffs", type=int, default=0, metavar="N",
        help="with --ensemble-weight and --sampler: up to N checks below "
        "--min-sample-fraction restore the weights of the last check above it and halve the "
        "learning rate instead of ending training",
    )
    train.add_argument(
        "--grad-clip", type=float, default=0.0, metavar="NORM",
        help="largest L2 norm of an optimiser step's weight gradient, larger ones scaled "
        "down (0: none; the log's grad_norm column is each epoch's median before clipping)",
    )
    train.add_argument(
        "--weight-average", type=float, default=0.0, metavar="DECAY",
        help="validate, select and keep an exponential moving average of the weights with "
        "this decay per optimiser step, say 0.999 (0: off; not with --sampler's term)",
    )
    train.add_argument(
        "--tf32", action=argparse.BooleanOptionalAction, default=False,
        help="optimiser steps with TF32 matrix products on tensor cores (CUDA); validation "
        "stays FP32, and the card records how far TF32 forces are from FP32 ones",
    )
    train.add_argument(
        "--ensemble-temperatures", default=None, metavar="KELVIN",
        help="with --ensemble-weight: the temperatures (comma list) whose frames feed the "
        "term (default: all); give those at which the teacher's and the sampler's runs both "
        "start from equilibrated structures (--teacher-start, --sampler-start)",
    )
    train.add_argument(
        "--teacher-start", default=None, metavar="RUN",
        help="with --generate: start the teacher's replicas from the structures of a run's "
        "checkpoint (say, a long run of the teacher: its equilibrium) instead of the native "
        "structure",
    )
    train.add_argument(
        "--time-limit", type=float, default=None, help="seconds of training (no new batch after)"
    )
    train.add_argument(
        "--wall-limit", type=float, default=None,
        help="seconds for the data and training of this command: training ends early enough "
        "to save the model (a batch-queue job's limit, say); --validate-steps come on top",
    )
    train.add_argument(
        "--sampler", default=None, metavar="MODEL",
        help="also sample frames with this model's dynamics (say, the model being "
        "continued; with --data, at the data's temperatures) and label them with the "
        "teacher's forces, so training covers the states the model reaches (not used to fit "
        "priors)",
    )
    train.add_argument(
        "--sampler-replicas", type=int, default=None, help="per temperature (default --replicas)"
    )
    train.add_argument(
        "--sampler-steps", type=int, default=None,
        help="production steps of the sampler (default --steps; longer runs reach the states "
        "a model drifts into over nanoseconds)",
    )
    train.add_argument("--sampler-save-every", type=int, default=None, help="default --save-every")
    train.add_argument(
        "--sampler-equilibration", type=int, default=None,
        help="steps the sampler runs before its first frame (default --equilibration); 0 "
        "with a small --sampler-save-every keeps the frames of a model's first picoseconds, "
        "where it leaves the teacher's states for overlapping ones",
    )
    train.add_argument(
        "--sampler-max-force", type=float, default=1000.0, metavar="KCAL_PER_MOL_A",
        help="leave out sampled (and --noise) frames where the teacher's force on a bead "
        "exceeds this (kcal/mol/Å; frames of a sampler that drifted into overlapping beads, "
        "whose forces would swamp the squared error); inf keeps all (the "
        "teacher's own frames at 360 K stay below ~100)",
    )
    train.add_argument(
        "--sampler-start", default=None, metavar="RUN[,RUN...]",
        help="start the sampler's replicas from the structures of a run's checkpoint (its "
        "folder or checkpoint.pt; say, a long run of the model that drifted somewhere) "
        "instead of the native structure; with a comma list, from each run's structures "
        "in turn (the ends of every earlier round's run, so that a round keeps covering "
        "the states its predecessors drifted into)",
    )
    train.add_argument(
        "--compact", default=None, metavar="FRACTIONS",
        help="also frames of the teacher squeezed to these fractions of the "
        "native radius of gyration (comma list in (0, 1], say 0.7,0.8), labelled by the plain "
        "teacher: the over-compact states where a network extrapolates into holes (not used "
        "to fit priors)",
    )
    train.add_argument(
        "--cold", default=None, metavar="KELVIN",
        help="also teacher frames at these temperatures (comma list, below the data's) from "
        "the native structure: the ordered near-native states that the teacher's frames at "
        "the data temperatures, started from its equilibrium, do not reach and a model may "
        "hold too low (not used to fit priors or in the relative-entropy term)",
    )
    train.add_argument(
        "--noise", default=None, metavar="ANGSTROMS",
        help="also copies of teacher frames with every coordinate displaced by Gaussian "
        "noise of these standard deviations (comma list, Å, say 0.15,0.3), labelled by the "
        "teacher: unbiased frames just off its ensemble, compressed pairs included, where a "
        "network trained on equilibrium frames alone extrapolates into holes (not used to "
        "fit priors; frames above --sampler-max-force left out)",
    )
    train.add_argument(
        "--noise-fraction", type=float, default=0.1,
        help="share of the teacher's frames copied at each --noise scale",
    )
    train.add_argument(
        "--cold-replicas", type=int, default=None,
        help="per --cold temperature (default a quarter of --replicas)",
    )
    train.add_argument(
        "--compact-replicas", type=int, default=None,
        help="per temperature and fraction (default an eighth of --replicas)",
    )
    train.add_argument("--compact-steps", type=int, default=None, help="default --steps")
    train.add_argument(
        "--start-from", default=None, metavar="MODEL",
        help="continue training a model of this protein (its weights and priors; its epoch "
        "log is continued): a long training split over several jobs",
    )
    train.add_argument(
        "--select-every", type=int, default=0, metavar="EPOCHS",
        help="every this many epochs (and at the last) run the model for --select-steps and "
        "keep the weights whose run is closest to the teacher's (--select-by), instead of "
        "those with the lowest validation force error (0: off)",
    )
    train.add_argument(
        "--select-by", default="folded", choices=["folded", "ensemble"],
        help="folded: the folded fraction; ensemble: the worse of the long-run validation's "
        "criteria, the folded fraction (within 0.1) and the Q histogram overlap (at least "
        "0.8), each as a share of its limit",
    )
    train.add_argument(
        "--select-steps", type=int, default=25_000,
        help="steps of each --select-every run (half of the replicas from native, half from "
        "unfolded structures or --select-start; Q over its second half)",
    )
    train.add_argument("--select-replicas", type=int, default=64)
    train.add_argument(
        "--select-start", metavar="RUN",
        help="start the second half of each --select-every run from this run's checkpoint "
        "(say, a model run that drifted into a state of its own), not from unfolded structures",
    )
    train.add_argument("--val-fraction", type=float, default=0.1)
    train.add_argument("--validate-steps", type=int, default=0, help="0: no MD validation")
    train.add_argument("--validate-replicas", type=int, default=32)
    train.add_argument("--validate-temperatures", default="300")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--device", default="auto", help="auto, cpu or cuda")
    train.add_argument("--out", required=True, help="output folder")
    train.add_argument("--overwrite", action="store_true",
                       help="replace the model, card and log of an earlier training in --out")
    train.add_argument("--quiet", action="store_true", help="no progress bars")
    train.set_defaults(execute=execute)


def train_options(args) -> TrainOptions:
    """The checked `TrainOptions` of ``workbench train``'s arguments."""
    return TrainOptions(**{f.name: getattr(args, f.name) for f in fields(TrainOptions)})


def _extra_frames_held(origin: dict) -> set[str]:
    """Which extra frames (``noise``, ``compaction``, ``cold``) a saved data set holds, by
    its ``origin`` record, through the saved data sets it was made from."""
    held = {kind for kind in ("noise", "compaction", "cold") if kind in origin}
    earlier = origin.get("saved_data")
    return held | (_extra_frames_held(earlier) if isinstance(earlier, dict) else set())


def _appended(data: dict, extra: dict, sampler) -> dict:
    """``data`` with the frames of ``extra`` after its own; a ``sampler``'s frame mask
    (the relative-entropy term's frames) grows by as many False entries."""
    from workbench.training.data import concatenate_data

    if sampler is not None:
        sampler.mask = torch.cat([
            sampler.mask, torch.zeros(extra["temperature"].shape[0], dtype=torch.bool)
        ])
    return concatenate_data(data, extra)


def execute(args) -> int:
    """Body of ``workbench train``: its output folder locked once made."""
    with contextlib.ExitStack() as locks:
        return train(args, locks)


def train(args, locks: contextlib.ExitStack) -> int:
    """``workbench train``; ``locks`` keeps the output folder's lock to the end."""
    from workbench.md.simulation import checkpoint_positions, pooled_checkpoint_positions
    from workbench.model.io import load_potential
    from workbench.runner import resolve_device
    from workbench.system import build_system
    from workbench.teacher import calibrate_epsilon, teacher_potential
    from workbench.training.data import (
        concatenate_data,
        data_temperatures,
        generate_teacher_data,
        load_teacher_data,
        save_teacher_data,
        without_violent_frames,
    )
    from workbench.training.extra_frames import SQUEEZE_STRENGTH, compacted_frames, displaced_frames
    from workbench.training.force_matching import FitSettings
    from workbench.training.pipeline import TrainSettings, train_potential
    from workbench.training.relative_entropy import OnlineSettings, SamplerFrames

    began = time.monotonic()
    options = train_options(args)
    online = None
    if args.online_walkers > 0:
        try:
            online = OnlineSettings(
                walkers=args.online_walkers,
                temperature=args.online_temperature or floats(args.validate_temperatures)[0],
                refresh_every=args.online_every, steps=args.online_steps,
                save_every=args.online_save_every, burn_in=args.online_burn_in,
                contrastive=args.online_contrastive,
            )
        except ValueError as error:  # the walkers' own settings
            raise SettingsError("online_walkers", f": {error}") from None
    cold, compact, noise = (
        None if values is None else list(values)
        for values in (options.cold_temperatures, options.compact_fractions,
                       options.noise_scales)
    )
    device, notice = resolve_device(args.device)
    if notice:
        print(f"NOTE: {notice}")
    system = build_system(args.protein)
    temperatures = floats(args.temperatures or "300")
    # starting structures are read before the output folder is made (a bad path leaves none);
    # the selection runs' are only checked here and read again by train_potential
    teacher_starts, _ = (
        None if run is None else checkpoint_positions(run, system)
        for run in (args.teacher_start, args.select_start)
    )
    sampler_starts, online_starts = (
        None if runs is None else pooled_checkpoint_positions(
            [run for run in runs.split(",") if run.strip()], system
        )
        for runs in (args.sampler_start, args.online_start)
    )
    saved = None if args.data is None else load_teacher_data(args.data)
    if saved is not None:
        # the same seed would add the very same frames again, each then counted twice
        held = _extra_frames_held(saved[1].get("origin", {}))
        requested = {"noise": ("--noise", noise), "compaction": ("--compact", compact),
                     "cold": ("--cold", cold)}
        for kind, (option, given) in requested.items():
            if given is not None and kind in held:
                raise UsageError(f"{args.data} already holds the frames of {option} (added "
                                 f"when it was saved): leave out {option}, or they count twice")
    out = ensure_writable_folder(args.out)
    locks.enter_context(folder_lock(out, "training output"))
    refuse_existing([out / f"{system.name}{suffix}" for suffix in (".pt", ".json", ".log.csv")],
                    args.overwrite)
    origin: dict = {}
    sampler = None
    if saved is not None:
        data, metadata = saved
        teacher = teacher_potential(system, metadata["epsilon"], metadata["dihedral_ratio"],
                                    metadata.get("contact_separation"),
                                    metadata.get("contact_barrier"))
        if args.temperatures is None:  # frames added below: at the data's own temperatures
            temperatures = data_temperatures(data)
        origin["saved_data"] = {"file": args.data, **metadata.get("origin", {})}
    else:
        epsilon = args.epsilon
        if args.calibrate is not None:
            calibration = calibrate_epsilon(
                system, temperatures[0], args.calibrate, device=device, seed=args.seed,
                dihedral_ratio=args.dihedral_ratio, replicas=args.calibrate_replicas,
                steps=args.calibrate_steps, iterations=args.calibrate_iterations,
                native_fraction=args.calibrate_native_fraction,
                contact_separation=args.contact_separation,
                contact_barrier=args.contact_barrier,
                folded_q=state_thresholds(system.name)[0],
            )
            epsilon = calibration.epsilon
            print(f"calibrated ε = {epsilon:.4f} kcal/mol (ε, folded: {calibration.history})")
        teacher = teacher_potential(system, epsilon, args.dihedral_ratio,
                                    args.contact_separation, args.contact_barrier)
        data = generate_teacher_data(
            system, teacher, temperatures, args.replicas, args.steps, args.save_every,
            device, args.seed, args.equilibration, progress=not args.quiet,
            starts=teacher_starts,
        )
        if args.teacher_start is not None:
            origin["teacher_start"] = args.teacher_start
    if args.sampler is not None:
        sampler_potential = load_potential(args.sampler)
        sampled = generate_teacher_data(
            system, teacher, temperatures, args.sampler_replicas or args.replicas,
            args.sampler_steps or args.steps, args.sampler_save_every or args.save_every,
            device, args.seed,
            args.equilibration if args.sampler_equilibration is None
            else args.sampler_equilibration,
            progress=not args.quiet, sampler=sampler_potential, starts=sampler_starts,
        )
        sampled, violent = without_violent_frames(sampled, args.sampler_max_force)
        if violent:
            print(f"{violent} of {violent + sampled['temperature'].shape[0]} sampled frames "
                  f"left out: a teacher force above {args.sampler_max_force:g} kcal/mol/Å")
        if sampled["temperature"].shape[0] == 0:
            raise UsageError(
                f"every sampled frame has a teacher force above {args.sampler_max_force:g} "
                "kcal/mol/Å: the sampler's structures overlap; start it elsewhere "
                "(--sampler-start) or raise --sampler-max-force"
            )
        # the ensemble term compares this sampler's frames only (frames of an earlier
        # sampler in --data stay marked ``sampled``, apart from the teacher's own)
        mask = torch.zeros(data["temperature"].shape[0] + sampled["temperature"].shape[0],
                           dtype=torch.bool)
        mask[data["temperature"].shape[0]:] = True
        data = concatenate_data(data, sampled)
        sampler = SamplerFrames(sampler_potential.cpu(), mask)
        origin["sampler"] = {"model": args.sampler, "start": args.sampler_start,
                             "frames": int(sampled["temperature"].shape[0]),
                             "left_out": violent, "max_force": args.sampler_max_force}
    if cold is not None:
        chilled = generate_teacher_data(
            system, teacher, cold, args.cold_replicas or max(1, args.replicas // 4), args.steps,
            args.save_every, device, args.seed, args.equilibration, progress=not args.quiet,
        )
        # marked like a sampler's frames: off the data temperatures' equilibrium, so kept
        # out of the prior fit
        chilled["sampled"] = torch.ones(chilled["temperature"].shape[0], dtype=torch.bool)
        data = _appended(data, chilled, sampler)
        origin["cold"] = {"temperatures_K": cold, "start": "native",
                          "frames": int(chilled["temperature"].shape[0])}
    if compact is not None:
        squeezed = compacted_frames(
            system, teacher, compact, temperatures,
            args.compact_replicas or max(1, args.replicas // 8),
            args.compact_steps or args.steps, args.save_every, device=device,
            seed=args.seed, equilibration=args.equilibration, progress=not args.quiet,
        )
        data = _appended(data, squeezed, sampler)
        origin["compaction"] = {
            "radius_of_gyration_fractions": compact, "strength_kcal_per_A2": SQUEEZE_STRENGTH,
            "frames": int(squeezed["temperature"].shape[0]),
        }
    if noise is not None:
        displaced, violent = without_violent_frames(
            displaced_frames(teacher, data, noise, args.noise_fraction, args.seed, device),
            args.sampler_max_force,
        )
        if violent:
            print(f"{violent} of {violent + displaced['temperature'].shape[0]} displaced "
                  f"frames left out: a teacher force above {args.sampler_max_force:g} "
                  "kcal/mol/Å")
        data = _appended(data, displaced, sampler)
        origin["noise"] = {"scales_A": noise, "fraction": args.noise_fraction,
                           "frames": int(displaced["temperature"].shape[0]),
                           "left_out": violent, "max_force": args.sampler_max_force}
    if args.save_data:
        save_teacher_data(data, args.save_data, {**teacher.metadata, "origin": origin})
    deadline = None
    if args.wall_limit is not None:
        # training ends by then, whatever it still has to prepare: a tenth of the command's
        # time is kept for the last validation and saving the model
        deadline = began + 0.9 * args.wall_limit
        print(f"training ends {max(deadline - time.monotonic(), 0.0):.0f} s from now "
              f"(wall limit)")
    settings = TrainSettings(
        # continued without --arch: the model's own network, whatever it is
        network=None if options.arch is None and args.start_from else options.network_config,
        fit=FitSettings(
            epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.lr,
            patience=args.patience, seed=args.seed, device=str(device),
            time_limit=args.time_limit, deadline=deadline, select_every=args.select_every,
            energy_weight=args.energy_weight, ensemble_weight=args.ensemble_weight,
            min_sample_fraction=args.min_sample_fraction,
            ensemble_check_every=args.ensemble_check_every,
            reweighting_backoffs=args.reweighting_backoffs, tf32=args.tf32,
            grad_clip=args.grad_clip, weight_average=args.weight_average,
        ),
        validation_fraction=args.val_fraction,
        prior_temperature=args.prior_temperature,
        prior_grouping=args.prior_grouping,
        prior_repulsion=args.repulsion,
        prior_repulsion_separation=args.repulsion_separation,
        prior_dihedral_degree=args.dihedral_degree,
        prior_repulsion_grouping=args.repulsion_grouping,
        prior_refinement=args.refine_priors,
        embedding=args.embedding,
        validate_steps=args.validate_steps,
        validate_replicas=args.validate_replicas,
        validate_temperatures=floats(args.validate_temperatures),
        progress=not args.quiet,
        start_from=args.start_from,
        select_steps=args.select_steps,
        select_replicas=args.select_replicas,
        select_by=args.select_by,
        select_start=args.select_start,
        data_origin=origin,
        ensemble_temperatures=None if args.ensemble_temperatures is None
        else floats(args.ensemble_temperatures),
        online=online,
        online_starts=online_starts,
    )
    _, card = train_potential(system, teacher, data, settings, out, sampler)
    training = card["training"]
    rows = [
        ("network", card["architecture"]),
        ("teacher ε", f"{card['teacher']['epsilon']:g} kcal/mol"),
        ("frames", f"{card['data']['frames']} ({card['data']['frames_sampled_by_a_model']} "
                   "from --sampler, --compact, --cold or --noise)"),
        ("epochs", f"{training['epochs_run']} (best {training['best_epoch']})"),
        ("val force RMSE", f"{training['val_force_rmse']:.4f} kcal/mol/Å"),
        ("val energy RMSE", f"{training['val_energy_rmse']:.3f} kcal/mol (centred)"),
    ]
    entropy = training.get("relative_entropy", {})
    if entropy.get("stopped_by_reweighting"):
        backoffs = entropy["backoffs"]
        kept = ("the weights training started from: the model is unchanged (a lower --lr, "
                "more --reweighting-backoffs or --online-walkers let it move)"
                if entropy["kept_step"] == 0 else f"the weights of optimiser step "
                f"{entropy['kept_step']}")
        rows.append(("reweighting", f"stopped: sample fraction below "
                                    f"{entropy['min_sample_fraction']} after "
                                    f"{backoffs['used']} of {backoffs['allowed']} backoffs; "
                                    f"kept {kept}"))
    walkers = entropy.get("walkers")
    if walkers is not None and walkers["last_walker_state"] is not None:
        last = walkers["last_walker_state"]
        rows.append(("walkers", f"{walkers['refreshes']} runs ({walkers['seconds']:.0f} s), "
                                f"last: Q {last['q_mean']:.3f}, "
                                f"folded {last['folded']:.2f}, {walkers['walkers_restarted']} "
                                "restarted"))
    if training["tf32_force_error"] is not None:
        rows.append(("TF32 steps", f"forces {training['tf32_force_error']:.1e} relative RMS "
                                   "from FP32 (first validation batch)"))
    rows += [
        ("files", f"{out}: {system.name}.pt, {system.name}.json (card and epoch log), "
                  f"{system.name}.log.csv (this call's epochs)"),
    ]
    print(summary_table(rows))
    return 0

