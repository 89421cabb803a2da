"""``workbench fit-scales``: energy scales of a model's terms fitted to its teacher's ensemble."""

from __future__ import annotations

from pathlib import Path

from workbench.cli.errors import UsageError
from workbench.cli.output import summary_table
from workbench.cli.parser import command_parser
from workbench.cli.stopping import terminate_as_interrupt
from workbench.teacher import model_and_teacher


def add_parser(subparsers) -> None:
    """``workbench fit-scales`` and its options."""
    scales = command_parser(
        subparsers, "fit-scales",
        "fit energy scales of a model's terms to its teacher's ensemble (relative entropy)",
    )
    scales.add_argument("--model", required=True, help="model written by workbench train")
    scales.add_argument(
        "--teacher-start", required=True, metavar="RUN",
        help="a long `workbench run --model teacher` folder at --temperature: its final "
        "structures start the teacher's sample and every model sample",
    )
    scales.add_argument(
        "--model-start", default=None, metavar="RUN",
        help="a long run of the model: its final structures start the first model sample "
        "(default: --teacher-start's); each later sample starts where the one before ended",
    )
    scales.add_argument("--terms", default=None,
                        help="comma list of the terms to scale: the network's, by its "
                        "architecture (schnet, painn, egnn, nequip, dp), and/or prior names "
                        "(default: the network's)")
    scales.add_argument("--temperature", type=float, default=300.0)
    scales.add_argument("--replicas", type=int, default=None,
                        help="how many of the run's structures (default all)")
    scales.add_argument("--iterations", type=int, default=4, help="model samples")
    scales.add_argument("--time", type=float, default=100.0, help="ps per sample")
    scales.add_argument("--discard", type=float, default=25.0,
                        help="ps left out at each sample's start")
    scales.add_argument("--every", type=float, default=1.0, help="ps between frames")
    scales.add_argument("--max-step", type=float, default=0.1,
                        help="longest step in log-scale per iteration")
    scales.add_argument("--dt", type=float, default=4.0, help="time step, fs")
    scales.add_argument("--seed", type=int, default=0)
    scales.add_argument("--device", default="auto", help="auto, cpu or cuda")
    scales.add_argument("--out", required=True,
                        help="where the scaled model goes (its card beside it)")
    scales.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    scales.set_defaults(execute=execute)


def execute(args) -> int:
    """Body of ``workbench fit-scales``."""
    from workbench.md.simulation import checkpoint_positions
    from workbench.model.io import save_potential
    from workbench.runner import resolve_device
    from workbench.training.energy_scales import fit_energy_scales, sample_frames, scale_terms
    from workbench.training.model_card import card_path, read_model_card, write_model_card

    out = Path(args.out)
    if out.resolve() == Path(args.model).resolve():
        raise UsageError("--out must differ from --model (the scaled model is a new file)")
    if out.exists() and not args.overwrite:
        raise UsageError(f"{out} exists; pass --overwrite to replace it")
    if not out.parent.is_dir():
        raise UsageError(f"--out: no folder {out.parent}")
    for name in ("time", "every", "dt", "max_step"):
        if not getattr(args, name) > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got "
                             f"{getattr(args, name)}")
    if not 0 <= args.discard < args.time:
        raise UsageError(f"--discard must lie in [0, --time), got {args.discard}")
    potential, system, teacher = model_and_teacher(args.model)
    terms = args.terms or potential.architecture or ""
    names = [t.strip() for t in terms.split(",") if t.strip()]
    if not names:
        raise UsageError("--terms: a prior-only model has no network term; name its priors")
    try:
        scale_terms(potential, dict.fromkeys(names, 1.0))  # refuses terms it cannot scale now
    except ValueError as error:
        raise UsageError(f"--terms: {error}") from None
    starts = checkpoint_positions(Path(args.teacher_start) / "checkpoint.pt", system)
    model_starts = starts if args.model_start is None else checkpoint_positions(
        Path(args.model_start) / "checkpoint.pt", system)
    if args.replicas is not None:
        if args.replicas < 1:
            raise UsageError(f"--replicas must be at least 1, got {args.replicas}")
        starts, model_starts = starts[: args.replicas], model_starts[: args.replicas]
    device, notice = resolve_device(args.device)
    if notice:
        print(f"NOTE: {notice}")
    steps, every = (max(1, round(t * 1000.0 / args.dt)) for t in (args.time, args.every))
    discard = round(args.discard * 1000.0 / args.dt)
    teacher_sample = sample_frames(system, teacher, starts, args.temperature, steps, discard,
                                   every, device, args.seed, args.dt)
    print(f"teacher: {teacher_sample.positions.shape[0]} frames, Q mean "
          f"{float(teacher_sample.q.mean()):.3f}", flush=True)

    def report(row: dict) -> None:
        scales = ", ".join(f"{k} {v:.3f}" for k, v in row["scales"].items())
        gradient = ", ".join(f"{v:+.2f}" for v in row["gradient"].values())
        print(f"iteration {row['iteration']}: scales {scales}; Q mean {row['q_mean']:.3f}, "
              f"folded {row['folded_fraction']:.2f}, Q overlap {row['q_intersection']:.2f}, "
              f"flipped dihedrals {row['flipped_dihedrals']:.1%}; dS/dlog s {gradient}",
              flush=True)

    with terminate_as_interrupt():  # a scheduler's time limit keeps the last iteration too
        fit = fit_energy_scales(
            system, potential, teacher_sample, model_starts, names, args.temperature,
            args.iterations, steps, discard, every, args.max_step, device, args.seed + 1,
            args.dt, progress=report,
        )
    scaled = fit.potential.cpu()
    record = {
        "model": str(args.model), "teacher_start": str(args.teacher_start),
        "model_start": str(args.model_start or args.teacher_start), "persistent_chains": True,
        "temperature_K": args.temperature, "replicas": int(starts.shape[0]),
        "sample_ps": args.time, "discard_ps": args.discard, "frame_ps": args.every,
        "timestep_fs": args.dt, "max_step": args.max_step, "scales": fit.scales,
        "teacher_frames": int(teacher_sample.positions.shape[0]),
        "teacher_q_mean": fit.teacher_q_mean,
        "teacher_folded_fraction": fit.teacher_folded_fraction,
        "teacher_flipped_dihedrals": fit.teacher_flipped_dihedrals,
        "interrupted": fit.interrupted, "history": fit.history,
    }
    earlier = potential.metadata.get("energy_scales") or {}  # a fit of a fitted model
    total = {name: earlier.get(name, 1.0) * fit.scales.get(name, 1.0)
             for name in {**earlier, **fit.scales}}
    scaled.metadata = {**potential.metadata, "energy_scales": total}
    save_potential(scaled, out)
    card = read_model_card(args.model)
    card.pop("validation", None)  # it was the unscaled model's
    card["energy_scales"] = record
    write_model_card(card, out)
    last = fit.history[-1]
    print(summary_table([
        ("scales", ", ".join(f"{k} {v:.4f}" for k, v in fit.scales.items())),
        ("Q mean", f"model {last['q_mean']:.3f}, teacher {fit.teacher_q_mean:.3f}"),
        ("folded", f"model {last['folded_fraction']:.2f}, "
                   f"teacher {fit.teacher_folded_fraction:.2f}"),
        ("model", f"{out} (card {card_path(out)})"),
    ]))
    if fit.interrupted:
        print(f"interrupted: the scales of iteration {last['iteration']}, the last finished")
    return 0

