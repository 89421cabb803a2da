"""What a potential does with the structures where a run ended: Q and flipped dihedrals.

    python scripts/relax_from_run.py RUN --protein 1yrf [--model teacher|PATH] \\
        [--replicas 16] [--times 2,5,10,20] [--timestep 4] [--teacher-forces] \\
        [--device cpu] [--out relax.json]

RUN is a ``workbench run`` folder (or its ``checkpoint.pt``), or ``native`` (the native
structure, ``--replicas`` times); its first ``--replicas`` live structures start a
Langevin run at 300 K of ``--model`` (default: the teacher), and the mean Q, the folded
fraction and the share of dihedrals more than 90° from native are printed at the start and
at each of ``--times`` (ps) (`workbench.training.validate.relaxation`). Run with the
teacher from a model run that drifted, it tells whether the teacher leaves that state and
how fast: the premise of ``workbench train --select-start``. The teacher is cheap enough
for the CPU.

With ``--teacher-forces`` (a trained model's file as ``--model``) each row also gives the
largest force the model's teacher puts on one bead, median and maximum over the replicas:
from ``native``, the time at which it leaves the thermal ~50–100 kcal/mol/Å is when the
model falls into a hole of its own (overlapping beads), and how many frames a sampler
round (``--sampler-equilibration 0``, ``--sampler-max-force``) can keep before that.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from workbench.cli import UsageError, atomic_write_text, model_and_teacher
from workbench.md.simulation import checkpoint_positions
from workbench.runner import TEACHER_MODEL, choose_potential, resolve_device
from workbench.system import build_system
from workbench.training.validate import relaxation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="run folder or checkpoint file")
    parser.add_argument("--protein", required=True)
    parser.add_argument("--model", default=TEACHER_MODEL,
                        help="'teacher' (default), or a saved potential")
    parser.add_argument("--replicas", type=int, default=16,
                        help="how many of the run's structures (the first ones)")
    parser.add_argument("--times", default="2,5,10,20", help="comma list, ps")
    parser.add_argument("--temperature", type=float, default=300.0)
    parser.add_argument("--timestep", type=float, default=4.0,
                        help="fs (a smaller one tells whether a drift is the integrator's)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--teacher-forces", action="store_true",
                        help="also the largest force of the model's teacher on a bead")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default=None, help="JSON file for the rows")
    args = parser.parse_args()
    try:
        times = [float(t) for t in args.times.split(",") if t.strip()]
    except ValueError:
        parser.error(f"--times must be a comma list of ps, got {args.times!r}")
    if not args.timestep > 0:
        parser.error(f"--timestep must be positive, got {args.timestep}")
    if args.replicas < 1:
        parser.error(f"--replicas must be at least 1, got {args.replicas}")
    if args.teacher_forces and args.model == TEACHER_MODEL:
        parser.error("--teacher-forces needs a trained model's file as --model")
    try:  # an unknown protein, a missing or foreign checkpoint, a bad model file or times
        system = build_system(args.protein)
        if args.run == "native":
            starts = system.native_positions.float().expand(args.replicas, -1, -1)
        else:
            starts = checkpoint_positions(args.run, system)[: args.replicas]
        potential, _ = choose_potential(system, args.model)
        teacher = model_and_teacher(args.model)[2] if args.teacher_forces else None
        device, _ = resolve_device(args.device)
        rows = relaxation(system, potential, starts, times, args.temperature, device, args.seed,
                          args.timestep, teacher)
    except (UsageError, ValueError, OSError) as exc:
        parser.error(str(exc))
    print(f"{args.model} from {args.run} ({len(starts)} structures, {args.temperature:g} K, "
          f"{args.timestep:g} fs)")
    forces = " | teacher force median, max" if teacher is not None else ""
    print(f"time ps | Q mean | folded | dihedrals flipped > 90°{forces}")
    for row in rows:
        extra = (f" | {row['teacher_force_median']:.0f}, {row['teacher_force_max']:.0f}"
                 if teacher is not None else "")
        print(f"{row['time_ps']:7.1f} | {row['q_mean']:6.3f} | {row['folded_fraction']:6.2f} | "
              f"{row['flipped_dihedrals']:.1%}{extra}")
    if args.out is not None:
        atomic_write_text(Path(args.out), json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
