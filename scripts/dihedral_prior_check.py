"""Do a model's dihedral priors hold the flipped dihedrals of a drifted run on their own?

    python scripts/dihedral_prior_check.py --protein 1yrf --model workbench/models/data/1yrf.pt \\
        --teacher-run T --drifted-run R [--replicas 64] [--steps 3000] [--out check.json]

Teacher frames at 300 K (``--replicas`` replicas from the ends of the teacher run T,
``--steps`` steps, a frame every 30) are fitted with dihedral priors of degree 3 and 1
(`workbench.training.boltzmann_inversion.fit_priors`), and each prior's minima more than
90° from native are counted (`non_native_minima`), with the model's own. Then the first
16 end structures of the drifted model run R relax for 2 and 5 ps under the teacher, and
under the teacher with its dihedral term swapped for each of those priors
(`workbench.training.validate.relaxation`): a prior whose minima hold the flipped
dihedrals keeps them flipped where the teacher's own term lets them go. CPU: about 6 min
for 1YRF.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from workbench.cli import atomic_write_text
from workbench.md.simulation import checkpoint_positions
from workbench.model.geometry import torsions
from workbench.model.io import load_potential
from workbench.model.potential import Potential
from workbench.system import build_system
from workbench.teacher import TEACHER_EPSILON, teacher_potential
from workbench.training.boltzmann_inversion import fit_priors, non_native_minima
from workbench.training.data import generate_teacher_data
from workbench.training.validate import relaxation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protein", required=True)
    parser.add_argument("--model", required=True, help="a saved model (its dihedral priors)")
    parser.add_argument("--teacher-run", required=True, help="teacher run: the data's starts")
    parser.add_argument("--drifted-run", required=True, help="model run that drifted")
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=None, help="JSON file of the results")
    args = parser.parse_args()
    if args.replicas < 1 or args.steps < 30:
        parser.error(f"need --replicas >= 1 and --steps >= 30 (a frame every 30 steps), got "
                     f"{args.replicas} and {args.steps}")
    try:  # an unknown protein, a missing or foreign checkpoint, a bad model file
        system = build_system(args.protein)
        teacher = teacher_potential(system, TEACHER_EPSILON[system.name])
        starts = checkpoint_positions(args.teacher_run, system)[: args.replicas]
        ends = checkpoint_positions(args.drifted_run, system)[:16]
        own = load_potential(args.model).priors["dihedrals"]
    except (ValueError, OSError, KeyError) as exc:
        parser.error(f"{type(exc).__name__}: {exc}")
    data = generate_teacher_data(system, teacher, [300.0], len(starts), args.steps, 30,
                                 starts=starts)
    priors = {"the model's": own, **{
        f"refit, degree {d}": fit_priors(system, data["positions"], 300.0,
                                         dihedral_degree=d)["dihedrals"] for d in (3, 1)}}
    native = torsions(system.native_positions[None].double(), system.dihedrals)[0]
    out = {"frames": int(data["positions"].shape[0]), "dihedrals": int(native.numel()),
           "non_native_minima": {name: int(non_native_minima(term, native).sum())
                                 for name, term in priors.items()},
           "relaxation": {}}
    for name, term in {"teacher": None, **priors}.items():
        terms = dict(teacher.priors)
        if term is not None:
            terms["dihedrals"] = term
        label = name if term is None else f"teacher with {name} dihedral prior"
        rows = relaxation(system, Potential(system.bead_types, None, terms), ends, [2.0, 5.0])
        out["relaxation"][label] = rows
        print(label, " | ".join(f"{r['time_ps']:g} ps: Q {r['q_mean']:.3f}, flipped "
                                f"{100 * r['flipped_dihedrals']:.1f}%" for r in rows),
              flush=True)
    print("non-native minima:", out["non_native_minima"], f"of {out['dihedrals']}")
    if args.out is not None:
        atomic_write_text(args.out, json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
