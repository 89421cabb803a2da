"""``workbench validate``: MD of a trained model against its teacher, recorded in its card."""

from __future__ import annotations

from pathlib import Path

from workbench.cli.errors import UsageError
from workbench.cli.output import summary_table
from workbench.cli.parser import command_parser, floats
from workbench.teacher import model_and_teacher, state_thresholds


def add_parser(subparsers) -> None:
    """``workbench validate`` and its options."""
    validate = command_parser(
        subparsers, "validate",
        "MD validation of a trained model against its teacher (into its card)",
    )
    validate.add_argument("--model", required=True, help="model written by workbench train")
    validate.add_argument("--temperatures", default="300", help="comma list, kelvin")
    validate.add_argument("--replicas", type=int, default=64, help="per temperature")
    validate.add_argument("--steps", type=int, default=10000)
    validate.add_argument("--seed", type=int, default=0)
    validate.add_argument("--device", default="auto", help="auto, cpu or cuda")
    validate.add_argument(
        "--runs", nargs=2, default=None, metavar=("MODEL_RUN", "TEACHER_RUN"),
        help="instead of new MD: compare two run folders already made (`workbench run` with "
        "the model and with --model teacher), or their metrics files (a kept run: "
        "workbench/models/validation/<model>.teacher-run.csv.gz), and record it as the "
        "card's long run",
    )
    validate.add_argument(
        "--plot", default=None, metavar="PNG",
        help="with --runs: where the long runs' plot goes (default: beside the model, "
        "MODEL.long_run.png)",
    )
    validate.set_defaults(execute=execute)


def execute(args) -> int:
    """Body of ``workbench validate``."""
    from workbench.runner import resolve_device
    from workbench.training.model_card import card_path, read_model_card, write_model_card
    from workbench.training.validate import validate_against_teacher

    potential, system, teacher = model_and_teacher(args.model)
    if args.runs is not None:
        return _validate_long_run(
            Path(args.model), *args.runs, state_thresholds(system.name), plot=args.plot,
            ends=(system, potential, teacher),
        )
    device, notice = resolve_device(args.device)
    if notice:
        print(f"NOTE: {notice}")
    model = Path(args.model)
    stem = model.with_suffix("")
    validation = validate_against_teacher(
        system, teacher, potential, floats(args.temperatures), args.replicas, args.steps,
        max(1, args.steps // 1000), device, args.seed,
        plot_path=f"{stem}.validation.png", series_path=f"{stem}.validation.pt",
    )
    card = read_model_card(model)
    previous = card.get("validation") or {}
    # kept: the force error on held-out teacher frames (training) and a long run
    for key in ("force_rmse", "long_run"):
        if key in previous:
            validation[key] = previous[key]
    card["validation"] = validation
    write_model_card(card, model)
    rows = []
    for temperature, result in zip(validation["temperatures"], validation["results"], strict=True):
        verdict = "pass" if all(result["passes"].values()) else "FAIL"
        rows.append((
            f"{temperature:g} K",
            f"Q overlap {result['q_intersection']:.2f}, folded teacher/model "
            f"{result['folded_teacher']:.2f}/{result['folded_model']:.2f}, events (fold, unfold) "
            f"teacher {tuple(result['events_teacher'])} model {tuple(result['events_model'])}: "
            f"{verdict}",
        ))
    rows.append(("card", str(card_path(model))))
    print(summary_table(rows))
    return 0


def _validate_long_run(
    model: Path, model_run: str, teacher_run: str, states: tuple[float, float],
    plot: str | None = None, ends=None,
) -> int:
    """``validate --runs``: the two runs' comparison into the card as ``long_run``, states
    counted with the Q thresholds ``states`` (folded, unfolded); with ``ends = (system,
    model potential, teacher)`` and both runs' checkpoints, also the two potentials at the
    runs' final structures (``long_run["end_structures"]``). A run is a folder, or its
    metrics file (a run kept in the repository; no checkpoint, so no ``end_structures``)."""
    from workbench.md.simulation import checkpoint_positions
    from workbench.training.model_card import card_path, read_model_card, write_model_card
    from workbench.training.validate import (
        compare_end_structures,
        compare_runs,
        metrics_file,
        plot_long_runs,
    )

    try:
        files = [metrics_file(folder) for folder in (model_run, teacher_run)]
    except FileNotFoundError as error:
        raise UsageError(f"--runs: {error}") from None
    long_run = compare_runs(*files, states=states)
    plot = Path(plot) if plot is not None else model.with_suffix(".long_run.png")
    if plot_long_runs({"model": files[0]}, files[1], plot, states):
        long_run["plot"] = str(plot)
    checkpoints = [Path(folder) / "checkpoint.pt" for folder in (model_run, teacher_run)]
    if ends is not None and all(file.is_file() for file in checkpoints):
        system, potential, teacher = ends
        long_run["end_structures"] = compare_end_structures(
            system, potential, teacher,
            *(checkpoint_positions(file, system) for file in checkpoints),
        )
    card = read_model_card(model)
    card["validation"] = {**(card.get("validation") or {}), "long_run": long_run}
    write_model_card(card, model)
    failed = [name for name, ok in long_run["passes"].items() if not ok]
    rows = [
        ("long run", f"{long_run['replicas']} replicas × {long_run['time_ps']:,.0f} ps"),
        ("Q overlap", f"{long_run['q_intersection']:.2f}"),
        ("folded", f"teacher {long_run['folded_teacher']:.2f}, "
                   f"model {long_run['folded_model']:.2f} (Q > {states[0]:g})"),
        ("events", f"teacher {tuple(long_run['events_teacher'])}, "
                   f"model {tuple(long_run['events_model'])} (fold, unfold; Q "
                   f"{states[0]:g} / {states[1]:g})"),
        ("verdict", "pass" if not failed else f"FAIL ({', '.join(failed)})"),
    ]
    if "end_structures" in long_run:
        ends = long_run["end_structures"]
        rows.append((
            "end structures",
            f"model − teacher energy at the model run's, relative to the teacher run's: "
            f"{ends['energy_gap']:+.1f} ± {ends['energy_gap_std']:.1f} kcal/mol (spread at "
            f"the teacher's {ends['teacher_spread']:.1f}); force RMSE "
            f"{ends['force_rmse_model_run']:.2f} / {ends['force_rmse_teacher_run']:.2f}",
        ))
        rows.append((
            "teacher terms",
            "at the model run's / the teacher run's ends, kcal/mol: " + ", ".join(
                f"{key} {value:.0f} / {ends['teacher_terms_teacher_run'][key]:.0f}"
                for key, value in ends["teacher_terms_model_run"].items()
            ),
        ))
        rows.append((
            "flipped dihedrals",
            f"more than 90° from native at the model run's / the teacher run's ends: "
            f"{ends['flipped_dihedrals_model_run']:.1%} / "
            f"{ends['flipped_dihedrals_teacher_run']:.1%}",
        ))
    rows += [
        ("plot", long_run.get("plot", "none (matplotlib is not installed)")),
        ("card", str(card_path(model))),
    ]
    print(summary_table(rows))
    return 0

