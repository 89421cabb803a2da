"""``workbench analyze``: analyses of finished runs and trained models.

``states``: folded and unfolded populations, events and the Q histogram of runs.
``contacts``: which native contacts two runs hold differently where they ended.
``energy-gaps``: where models hold structures lower than the teacher does.
"""

from __future__ import annotations

import json
from pathlib import Path

from workbench.cli.errors import UsageError
from workbench.cli.output import refuse_existing
from workbench.cli.parser import command_parser
from workbench.files import atomic_write_text


def add_parser(subparsers) -> None:
    """``workbench analyze`` and its subcommands."""
    analyze = subparsers.add_parser("analyze", help="analyses of runs and trained models",
                                    description=__doc__)
    analyses = analyze.add_subparsers(dest="analysis", required=True)

    states = command_parser(analyses, "states", "folded and unfolded populations, folding "
                            "events and the Q histogram of runs' metrics")
    states.add_argument("runs", nargs="+", help="run folders or metrics CSV files")
    states.add_argument("--basin", default=None, metavar="HIGH,LOW",
                        help="also the fraction above HIGH and the events with the "
                        "thresholds HIGH / LOW (a native basin below Q 0.8, e.g. 0.5,0.3)")
    states.add_argument("--out", default=None, help="JSON file for the table")
    states.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    states.set_defaults(execute=states_command)

    contacts = command_parser(analyses, "contacts", "which native contacts two runs hold "
                              "differently, at the structures where they ended")
    contacts.add_argument("runs", nargs=2, help="two run folders or checkpoint files")
    contacts.add_argument("--protein", required=True)
    contacts.add_argument("--top", type=int, default=12, help="contacts listed each way")
    contacts.add_argument("--out", default=None, help="JSON file for every contact's shares")
    contacts.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    contacts.set_defaults(execute=contacts_command)

    gaps = command_parser(analyses, "energy-gaps", "model − teacher energies and force errors "
                          "at the structures where runs ended (CPU, reference path)")
    gaps.add_argument("--protein", required=True)
    gaps.add_argument("--teacher-run", required=True,
                      help="run folder or checkpoint of the teacher: the reference structures")
    gaps.add_argument("--models", required=True, help="NAME=FILE comma list")
    gaps.add_argument("--runs", required=True,
                      help="NAME=RUN comma list of structure sets ('native': the native one)")
    gaps.add_argument("--epsilon", type=float, default=None,
                      help="the teacher's contact depth, kcal/mol (default: the calibrated one)")
    gaps.add_argument("--out", default=None, help="JSON file for the table")
    gaps.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    gaps.set_defaults(execute=energy_gaps_command)


def _write_json(out: str | None, document) -> None:
    if out is not None:
        atomic_write_text(Path(out), json.dumps(document, indent=1) + "\n")


def states_command(args) -> int:
    """Body of ``workbench analyze states``."""
    refuse_existing([Path(args.out)] if args.out else [], args.overwrite)
    from workbench.training.validate import run_states

    basin = None
    if args.basin is not None:
        try:
            high, low = (float(v) for v in args.basin.split(","))
        except ValueError:
            raise UsageError(f"--basin must be HIGH,LOW (e.g. 0.5,0.3), got {args.basin!r}") \
                from None
        basin = (high, low)
    table = [run_states(run, basin) for run in args.runs]
    extra = " | basin | basin events" if basin else ""
    print(f"| run | ps | folded | unfolded | mean Q | events (fold, unfold){extra} | Q histogram, "
          f"0.1 bins |\n|---|---|---|---|---|---|{'---|---|' if basin else ''}---|")
    for row in table:
        columns = [row["run"], f"{row['time_ps']:,.0f}", f"{row['folded']:.3f}",
                   f"{row['unfolded']:.3f}", f"{row['mean_q']:.3f}",
                   f"({row['folding_events']}, {row['unfolding_events']})"]
        if basin:
            columns += [f"{row['basin_fraction']:.3f}", "({}, {})".format(*row["basin_events"])]
        columns.append(" ".join(map(str, row["q_histogram"])))
        print(f"| {' | '.join(columns)} |")
    _write_json(args.out, table)
    return 0


def contacts_command(args) -> int:
    """Body of ``workbench analyze contacts``."""
    refuse_existing([Path(args.out)] if args.out else [], args.overwrite)
    from workbench.analysis.native_contacts import contact_shares, most_different
    from workbench.md.simulation import checkpoint_positions
    from workbench.system import build_system

    system = build_system(args.protein)
    names = [Path(run).name or run for run in args.runs]
    shares = []
    for name, run in zip(names, args.runs, strict=True):
        ca = checkpoint_positions(run, system)[:, system.ca_index]
        shares.append(contact_shares(ca, system.native_contacts, system.native_contact_distances))
        print(f"{name}: {ca.shape[0]} structures, mean Q {float(shares[-1].mean()):.3f}")
    pairs = system.native_contacts.tolist()
    r0 = system.native_contact_distances.tolist()
    less, more = most_different(*shares, args.top)
    for title, picked in ((f"formed less in {names[0]}", less),
                          (f"formed more in {names[0]}", more)):
        print(f"{title} (residues, native CA-CA Å: {names[0]} / {names[1]})")
        for c in picked:
            print(f"  {pairs[c][0]:3d}-{pairs[c][1]:<3d} {r0[c]:5.1f}  "
                  f"{float(shares[0][c]):.2f} / {float(shares[1][c]):.2f}")
    _write_json(args.out, [{"contact": pairs[c], "r0": r0[c], names[0]: float(shares[0][c]),
                            names[1]: float(shares[1][c])} for c in range(len(pairs))])
    return 0


def named_paths(text: str, flag: str) -> dict[str, str]:
    """``a=PATH,b=PATH,native`` as ``{"a": PATH, "b": PATH, "native": "native"}``."""
    pairs = {}
    for item in (t.strip() for t in text.split(",")):
        if item:
            name, _, path = item.partition("=")
            pairs[name] = path or name
    if not pairs:
        raise UsageError(f"{flag}: no NAME=PATH items in {text!r}")
    return pairs


def energy_gaps_command(args) -> int:
    """Body of ``workbench analyze energy-gaps``."""
    refuse_existing([Path(args.out)] if args.out else [], args.overwrite)
    from workbench.md.simulation import checkpoint_positions
    from workbench.model.io import load_potential
    from workbench.model_fit import check_model_fits
    from workbench.system import build_system
    from workbench.teacher import teacher_potential
    from workbench.training.validate import energy_gaps

    system = build_system(args.protein)
    teacher = teacher_potential(system, args.epsilon)
    structures = {
        name: system.native_positions[None] if path == "native"
        else checkpoint_positions(path, system)
        for name, path in named_paths(args.runs, "--runs").items()
    }
    models = {name: load_potential(path)
              for name, path in named_paths(args.models, "--models").items()}
    for (name, model), path in zip(models.items(), named_paths(args.models, "--models").values(),
                                   strict=True):
        check_model_fits(model, system, f"--models {name}={path}")
    table = energy_gaps(models, teacher, checkpoint_positions(args.teacher_run, system),
                        structures)
    print("model − teacher energy (kcal/mol) relative to the teacher run's structures; "
          "force RMSE (kcal/mol/Å) in brackets")
    print("| model | " + " | ".join(structures) + " |")
    print("|---" * (len(structures) + 1) + "|")
    for name, row in table.items():
        print(f"| {name} | " + " | ".join(
            f"{cell['energy_gap']:+.0f} ({cell['force_rmse']:.2f})" for cell in row.values()
        ) + " |")
    _write_json(args.out, {"protein": args.protein, "teacher_epsilon": teacher.metadata["epsilon"],
                           "teacher_run": args.teacher_run, "gaps": table})
    return 0
