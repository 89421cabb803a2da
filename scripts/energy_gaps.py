"""Where each model holds structures lower than the teacher does: a table of energy gaps.

    python scripts/energy_gaps.py --protein 1yrf --teacher-run RUN \\
        --models d3=runs/d3/1yrf.pt,d4=runs/d4/1yrf.pt \\
        --runs native,d1=runs/d1/check,d4=runs/d4/1yrf-check [--out gaps.json]

For every model and every set of structures (the live replicas of a run's checkpoint, or
``native``), the model's energy minus the teacher's, relative to its mean over the
teacher run's structures (the ``energy_gap`` of
:func:`workbench.training.validate.compare_end_structures`), and the model's force RMSE
against the teacher there; on the CPU, reference path. A large
negative gap at a run's ends is a basin of the model's own (a hole); a row per model
shows which holes a round of training closed and which it reopened.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from workbench.cli import atomic_write_text
from workbench.md.simulation import checkpoint_positions
from workbench.model.io import load_potential
from workbench.system import build_system
from workbench.teacher import teacher_potential
from workbench.training.force_matching import potential_labels


def named_paths(text: str) -> dict[str, str]:
    """``a=PATH,b=PATH,native`` as ``{"a": PATH, "b": PATH, "native": "native"}``."""
    pairs = {}
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, _, path = item.partition("=")
        pairs[name] = path or name
    if not pairs:
        raise ValueError(f"no NAME=PATH items in {text!r}")
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protein", required=True)
    parser.add_argument("--teacher-run", required=True,
                        help="run folder or checkpoint of the teacher: the reference set")
    parser.add_argument("--models", required=True, help="NAME=FILE comma list")
    parser.add_argument("--runs", required=True,
                        help="NAME=RUN comma list of structure sets ('native': the native one)")
    parser.add_argument("--epsilon", type=float, default=None,
                        help="the teacher's contact depth, kcal/mol, where the models' "
                        "teacher was not the calibrated one (2A3D's a1: 0.2)")
    parser.add_argument("--out", default=None, help="JSON file for the table")
    args = parser.parse_args()
    try:
        system = build_system(args.protein)
        teacher = teacher_potential(system, args.epsilon)
        reference = checkpoint_positions(args.teacher_run, system)
        sets = {
            name: system.native_positions[None] if path == "native"
            else checkpoint_positions(path, system)
            for name, path in named_paths(args.runs).items()
        }
        models = {name: load_potential(path) for name, path in named_paths(args.models).items()}
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    teacher_labels = {name: potential_labels(teacher, pos) for name, pos in sets.items()}
    reference_energy = potential_labels(teacher, reference)[0]
    table = {}
    for name, model in models.items():
        offset = (potential_labels(model, reference)[0] - reference_energy).mean()
        table[name] = {}
        for set_name, positions in sets.items():
            energy, forces = potential_labels(model, positions)
            teacher_energy, teacher_forces = teacher_labels[set_name]
            table[name][set_name] = {
                "energy_gap": float((energy - teacher_energy - offset).mean()),
                "force_rmse": float((forces - teacher_forces).square().mean().sqrt()),
            }
    print("model − teacher energy (kcal/mol) relative to the teacher run's structures; "
          "force RMSE (kcal/mol/Å) in brackets")
    print("| model | " + " | ".join(sets) + " |")
    print("|---" * (len(sets) + 1) + "|")
    for name, row in table.items():
        print(f"| {name} | " + " | ".join(
            f"{cell['energy_gap']:+.0f} ({cell['force_rmse']:.2f})" for cell in row.values()
        ) + " |")
    if args.out:
        atomic_write_text(Path(args.out), json.dumps(
            {"protein": args.protein, "teacher_epsilon": teacher.metadata["epsilon"],
             "teacher_run": args.teacher_run, "gaps": table}, indent=1
        ) + "\n")


if __name__ == "__main__":
    main()
